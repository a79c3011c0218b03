"""The problem of a run: what is scored, over which space (`Problem`), derived once from the
target and the run's settings (`calibrate.runs.config.RunConfig`).

`problem_of` derives the problem when a run starts: which of the target's schemes are scored
(those this host can run: `registry_of`), their target numbers, the search space and the warm
start (`calibrate.space`).  The run directory records it (`calibrate.runs.journal`), and every
later reader — resume, export — reads it back from there (`Problem.from_json`), never from the
host again.  Only running an evaluation needs the host (`calibrate.runs.evaluate.host_schemes`).

`links_for` picks the link kinds to search when none are asked for: the one the target's own
link logs show.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from calibrate.errors import InputError
from calibrate.metrics import TOTAL, Stats
from calibrate.physics import SchemeMeasurement, space_from_target, warm_start
from calibrate.runs.config import LINK_KINDS, RunConfig
from calibrate.scheme_registry import era_of, traits_of
from calibrate.schemes import Registry, Scheme, load_registry
from calibrate.space import SearchSpace
from calibrate.targets.model import SchemeResult, Target, Workload


def registry_of(config: RunConfig) -> Registry:
    """The schemes of this host, and of the Pantheon checkout the settings name."""
    return load_registry(config.pantheon_dir, config.pantheon_python)


def links_for(target: Target, requested: Sequence[str] | None = None) -> tuple[str, ...]:
    """The link kinds to search: those asked for; else the one the target's own link logs show
    (`calibrate.evidence`: opportunities spread like a constant trace's or a Poisson one's), so
    the budget is not spent on a kind the measurement rules out and a noisy comparison cannot
    pick it; else both, each its own search."""
    if requested:
        return tuple(requested)
    shown = target.evidence.deliveries if target.evidence is not None else None
    return (shown,) if shown in LINK_KINDS else LINK_KINDS


@dataclass(frozen=True)
class Problem:
    """The target side of the objective and the space, as derived from target + settings."""

    real: Mapping[Any, Stats]  # objective key (label, or (label, flow)) -> target aggregate
    schemes: Mapping[str, str]  # label -> the name of the scheme that runs for it
    dropped: Mapping[str, str]  # label -> why it is not scored
    workload: Workload  # what each run does (the target's flows and interval, our runtime)
    space: SearchSpace
    warm_start: Mapping[str, float]
    #: label -> why the scheme that runs for it is not the program Pantheon ran (its measured
    #: difference): a stand-in runs only for a scheme named in --schemes
    substitutes: Mapping[str, str] = field(default_factory=dict)
    era: str | None = None  # the era of Pantheon's scheme builds the labels were read in
    era_assumed: bool = False  # the target has no date: the era was read from its labels
    #: the target's own runs' length (s): ours may be shorter (`workload.runtime_s`), cheaper but
    #: scoring schemes that ramp slowly short of the steady state the target measured
    target_runtime_s: float | None = None

    def flow_keys(self) -> list[str]:
        return [TOTAL] if self.workload.flows == 1 else [str(f) for f in range(1, self.workload.flows + 1)]

    def key(self, label: str, flow: str) -> Any:
        return label if self.workload.flows == 1 else (label, flow)

    def sharing(self) -> dict[str, list[str]]:
        """Target labels run by the same scheme (Nepal's saturator and greg_saturator) share
        its runs: first label -> every label scored with them."""
        groups: dict[str, list[str]] = {}
        for label, scheme in self.schemes.items():
            groups.setdefault(scheme, []).append(label)
        return {labels[0]: labels for labels in groups.values()}

    def to_json(self) -> dict[str, Any]:
        """The problem as run.json holds it (`from_json` reads it back)."""
        space = self.space
        return {
            "space": {"bounds": {k: list(v) for k, v in space.bounds.items()},
                      "fixed": dict(space.fixed), "free": list(space.free)},
            "warm_start": dict(self.warm_start),
            "schemes": dict(self.schemes),
            "dropped": dict(self.dropped),
            "substitutes": dict(self.substitutes),
            "era": self.era, "era_assumed": self.era_assumed,
            "workload": self.workload.to_json(),
            "real": [{"scheme": key[0] if isinstance(key, tuple) else key,
                      "flow": key[1] if isinstance(key, tuple) else TOTAL,
                      **s.to_json()}
                     for key, s in self.real.items()],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], target: Target, config: RunConfig) -> Problem:
        """The problem run.json recorded.  A format-1 run.json has no "real": the target numbers
        are taken again from its target.json, as `problem_of` took them (no host involved)."""
        space = data["space"]
        workload = Workload.from_json(data["workload"])
        schemes = {str(label): str(name) for label, name in data["schemes"].items()}
        if "real" in data:
            real = {(row["scheme"] if workload.flows == 1 else (row["scheme"], row["flow"])):
                    Stats.from_json(row)
                    for row in data["real"]}
        else:
            real = {}
            for label in schemes:
                result = next((s for s in target.schemes if s.label == label), None) or target.scheme(label)
                values = _aggregates(result, config.aggregate, workload.flows)
                for flow in _flow_keys(workload.flows):
                    # whole: problem_of scored these aggregates when the run began
                    value = values[flow]
                    assert value is not None
                    real[label if workload.flows == 1 else (label, flow)] = value
        return cls(real=real, schemes=schemes, dropped=dict(data.get("dropped", {})),
                   substitutes=dict(data.get("substitutes", {})), era=data.get("era"),
                   era_assumed=bool(data.get("era_assumed", False)),
                   target_runtime_s=target.workload.runtime_s, workload=workload,
                   space=SearchSpace.from_bounds({k: (float(v[0]), float(v[1]))
                                                  for k, v in space["bounds"].items()},
                                                 space.get("fixed", {})),
                   warm_start=dict(data["warm_start"]))


def _flow_keys(flows: int) -> list[str]:
    return [TOTAL] if flows == 1 else [str(f) for f in range(1, flows + 1)]


def _aggregates(result: SchemeResult, aggregate: str, flows: int) -> dict[str, Stats | None]:
    """Per flow key (and the total) the target's `aggregate` statistics."""
    values: dict[str, Stats | None] = {}
    for flow in [TOTAL, *_flow_keys(flows)]:
        summary = result.summary.get(flow)
        values[flow] = None if summary is None else summary.stats(aggregate)
    return values


def _hints(labels: Sequence[str], schemes: Mapping[str, Scheme]
           ) -> tuple[list[str], list[str], list[str]]:
    """Saturating / delay-based / rate-probing labels for the space's rules: the character the
    registry file gives any name the label's scheme has (the target's label, our scheme's name
    and aliases; `calibrate.scheme_registry.traits_of`)."""
    def traits(label: str) -> frozenset[str]:
        s = schemes.get(label)
        return traits_of({label, *(() if s is None else (s.name, *s.aliases))})
    return ([label for label in labels if "saturating" in traits(label)],
            [label for label in labels if "delay-based" in traits(label)],
            [label for label in labels if "rate-probing" in traits(label)])


def problem_of(target: Target, config: RunConfig, registry: Registry | None = None) -> Problem:
    """Pick the schemes, read their aggregates, derive the space and the warm start.

    Each label means the implementation Pantheon ran in the target's era (`era_of` its date). By
    default only faithful implementations are scored; a scheme named in `config.schemes` runs
    with a stand-in where no faithful one exists, and `substitutes` says how it differs."""
    registry = registry or registry_of(config)
    chosen = [target.scheme(name) for name in config.schemes] if config.schemes else list(target.schemes)
    era, era_assumed = era_of(target.provenance.date, [s.label for s in target.schemes])
    flows = target.workload.flows
    workload = Workload(flows, target.workload.interval_s, config.runtime_s, 1)
    flow_keys = _flow_keys(flows)
    real: dict[Any, Stats] = {}
    schemes: dict[str, Scheme] = {}
    dropped: dict[str, str] = {}
    space_stats: dict[str, SchemeMeasurement] = {}
    for s in chosen:
        try:
            schemes[s.label] = registry.resolve(s.label, era, substitutes=bool(config.schemes))
        except InputError as e:
            dropped[s.label] = str(e)
            continue
        values = _aggregates(s, config.aggregate, flows)
        whole = {f: v for f in values
                 if (v := values[f]) is not None and v.delay is not None and v.loss is not None}
        if len(whole) < len(values):
            dropped[s.label] = (f"the target has no {config.aggregate} of every metric for "
                                f"{s.label}; try --aggregate mean")
            del schemes[s.label]
            continue
        why = next((w for v in whole.values() if (w := v.problem("reference"))), None)
        if why:  # a scheme that moved nothing, or a delay of 0: f cannot divide by it
            dropped[s.label] = f"the target's {config.aggregate} for {s.label} cannot be scored: {why}"
            del schemes[s.label]
            continue
        measurement = s.measurement(config.aggregate)
        assert measurement is not None  # the total's aggregates were checked above
        space_stats[s.label] = measurement
        for flow in flow_keys:
            real[s.label if flows == 1 else (s.label, flow)] = whole[flow]
    if not schemes:
        raise InputError("no scheme of the target can run here: "
                         + "; ".join(f"{k}: {v}" for k, v in dropped.items())
                         + " (see `calibrate schemes`)")
    saturating, delay_based, rate_probing = _hints(list(space_stats), schemes)
    # the target's per-packet evidence is physical, so every scheme's logs count, run here or not
    evidence, runtime_s = target.evidence, target.workload.runtime_s
    space = space_from_target(space_stats, rate_probing=rate_probing, evidence=evidence,
                              runtime_s=runtime_s, overrides=config.bounds,
                              fixed=config.fixed)
    start = warm_start(space_stats, saturating or None, delay_based, runtime_s,
                       rate_probing=rate_probing, evidence=evidence)
    # a scheme named as the label is the program that was measured, faithful or not
    substitutes = {label: f"{s.name} is not the program Pantheon ran ({s.difference()})"
                   for label, s in schemes.items() if not s.faithful and s.name != label}
    return Problem(real, {label: s.name for label, s in schemes.items()}, dropped, workload,
                   space, start, substitutes, era, era_assumed, target.workload.runtime_s)

