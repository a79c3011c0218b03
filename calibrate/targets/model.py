"""A target: the real-path measurement a calibration tries to reproduce.

Per scheme (canonical name plus the label the source used) and per flow plus "all": the
per-run throughput, p95 one-way delay and loss of the valid runs, their aggregates, the runs that
were dropped and why; the workload; where the numbers came from; and, where the source has
per-packet logs, what they show beyond those numbers (`calibrate.evidence`: the smallest one-way
delay, the link's capacity and queue, its drops).  A summary table has aggregates but no per-run
values, and a Target says so (`runs` is empty, `evidence` None) rather than inventing them.

This module is the value model only, and imports no reader: the readers (one module each in
`calibrate.targets`) build Targets, and `calibrate.targets.load.load_target` picks the reader for
what a user types.  A Target's own JSON (`Target.to_json` / `from_json`, "calibrate-target") is
written and read here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from calibrate.errors import InputError
from calibrate.evidence import PathEvidence
from calibrate.metrics import STD_DDOF, TOTAL, Aggregate, Stats, aggregate, impossible
from calibrate.physics import SchemeMeasurement
from calibrate.scheme_registry import canonical_scheme
from calibrate.targets.bounds import FORMAT_VERSION, declared

FORMAT = "calibrate-target"


@dataclass(frozen=True)
class FlowSummary:
    """Aggregates of one flow (or "all") of one scheme over its valid runs.  loss is a fraction."""

    tput_mbps: Aggregate
    delay_ms: Aggregate
    loss: Aggregate

    def to_json(self) -> dict[str, Any]:
        """Keyed like a measurement (`Stats.to_json`): {"tput", "delay", "loss"}, each an
        `Aggregate`; earlier target files spelled the first two "tput_mbps" and "delay_ms",
        which are still read."""
        return {"tput": self.tput_mbps.to_json(), "delay": self.delay_ms.to_json(),
                "loss": self.loss.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FlowSummary:
        return cls(Aggregate.from_json(data["tput"] if "tput" in data else data["tput_mbps"]),
                   Aggregate.from_json(data["delay"] if "delay" in data else data["delay_ms"]),
                   Aggregate.from_json(data["loss"]))

    def stats(self, aggregate: str) -> Stats | None:
        """Each metric's `aggregate` ("mean" or "median") over the runs, or None when the
        throughput has none."""
        tput, delay, loss = (getattr(a, aggregate) for a in (self.tput_mbps, self.delay_ms, self.loss))
        return None if tput is None else Stats(tput, delay, loss)

    @classmethod
    def of_runs(cls, metrics: Iterable[Stats], ddof: int = STD_DDOF) -> FlowSummary:
        metrics = list(metrics)
        return cls(aggregate((m.throughput for m in metrics), ddof),
                   aggregate((m.delay for m in metrics), ddof),
                   aggregate((m.loss for m in metrics), ddof))


@dataclass(frozen=True)
class RunResult:
    """One valid run of one scheme: metrics per flow key ("all", "1", ...) and their source."""

    run: int
    flows: Mapping[str, Stats]
    source: str  # "pantheon_perf.json", "datalink log", "stats log"

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "source": self.source,
                "flows": {key: m.to_json() for key, m in self.flows.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunResult:
        return cls(int(data["run"]),
                   {key: Stats.from_json(v) for key, v in data["flows"].items()},
                   str(data.get("source", "")))


@dataclass(frozen=True)
class DroppedRun:
    """A run of a source that is not in the target, and why (for the user to judge)."""

    label: str
    run: int | None  # None: the whole scheme was dropped
    reason: str

    def __str__(self) -> str:
        where = self.label if self.run is None else f"{self.label} run {self.run}"
        return f"{where}: {self.reason}"


@dataclass(frozen=True)
class SchemeResult:
    scheme: str  # canonical name (calibrate.scheme_registry.canonical_scheme)
    label: str  # as the source spelled it, e.g. default_tcp
    runs: tuple[RunResult, ...]  # valid runs; empty when the source has only aggregates
    summary: Mapping[str, FlowSummary]  # flow key -> aggregates over valid runs
    dropped: tuple[DroppedRun, ...] = ()

    @classmethod
    def of_runs(cls, label: str, runs: Iterable[RunResult], dropped: Iterable[DroppedRun] = (),
                ddof: int = STD_DDOF) -> SchemeResult:
        runs = tuple(sorted(runs, key=lambda r: r.run))
        keys = sorted({key for r in runs for key in r.flows}, key=_flow_order)
        # an impossible value (inf, say) is refused by the Target with a message that names it
        # (`check_values`); numpy's warning about averaging it would only be noise before that
        with np.errstate(invalid="ignore", over="ignore"):
            summary = {key: FlowSummary.of_runs((r.flows[key] for r in runs if key in r.flows), ddof)
                       for key in keys}
        return cls(canonical_scheme(label), label, runs, summary, tuple(dropped))

    @property
    def n_runs(self) -> int:
        """Valid runs behind the aggregates (from the table's count when there are no runs)."""
        return len(self.runs) if self.runs else self.total.tput_mbps.n

    @property
    def total(self) -> FlowSummary:
        return self.summary[TOTAL]

    def measurement(self, aggregate: str = "mean") -> SchemeMeasurement | None:
        """Its whole-connection statistics as the search space reads them: each metric's
        `aggregate` ("mean" or "median") over the runs, its standard deviation, the runs; None
        where a metric has no value."""
        total = self.summary.get(TOTAL)
        if total is None:
            return None
        metrics = (total.tput_mbps, total.delay_ms, total.loss)
        centre = [getattr(m, aggregate) for m in metrics]
        if None in centre:
            return None
        throughput, delay, loss = centre
        throughput_sd, delay_sd, loss_sd = (m.std or 0.0 for m in metrics)
        return SchemeMeasurement(throughput, delay, loss, throughput_sd, delay_sd, loss_sd,
                                 runs=max(self.n_runs, 1))

    def to_json(self) -> dict[str, Any]:
        return {"scheme": self.scheme, "label": self.label, "n_runs": self.n_runs,
                "summary": {key: s.to_json() for key, s in self.summary.items()},
                "runs": [r.to_json() for r in self.runs],
                "dropped": [{"run": d.run, "reason": d.reason} for d in self.dropped]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SchemeResult:
        label = str(data.get("label") or data["scheme"])
        return cls(str(data["scheme"]), label,
                   tuple(RunResult.from_json(r) for r in data.get("runs", [])),
                   {key: FlowSummary.from_json(s) for key, s in data["summary"].items()},
                   tuple(DroppedRun(label, d.get("run"), str(d["reason"]))
                         for d in data.get("dropped", [])))


@dataclass(frozen=True)
class Workload:
    """How each scheme was run: Pantheon's -f, --interval, -t and --run-times."""

    flows: int = 1
    interval_s: float = 0.0
    runtime_s: float = 30.0
    run_times: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"flows": self.flows, "interval_s": self.interval_s, "runtime_s": self.runtime_s,
                "run_times": self.run_times}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "target JSON",
                  fix: str = "correct its workload") -> Workload:
        """The workload of a target JSON, each number within its bound (`declared`)."""
        default = cls()

        def number(key: str, field: str, fallback: Any) -> Any:
            return fallback if data.get(key) is None else declared(field, data[key], where, fix)

        return cls(number("flows", "flows", default.flows),
                   number("interval_s", "interval_s", default.interval_s),
                   number("runtime_s", "runtime_s", default.runtime_s),
                   number("run_times", "runs", default.run_times))


@dataclass(frozen=True)
class Provenance:
    """Where the numbers come from, precisely enough to fetch and recompute them again."""

    kind: str  # "archive", "data dir", "result", "summary table", "bundled", "target json"
    source: str  # path or URL as given
    name: str = ""  # experiment title, e.g. 2017-01-03T21-30-Nepal-to-AWS-India-10-runs
    date: str | None = None  # ISO date (time) of the measurement, when known
    path_description: str | None = None  # e.g. "Nepal (Wi-Fi mesh) -> AWS India"
    archive_name: str | None = None
    sha256: str | None = None  # of the archive or file read
    result_id: int | None = None
    url: str | None = None
    metrics_from: str = ""  # how the per-run numbers were obtained
    std_ddof: int = STD_DDOF
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["notes"] = list(self.notes)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Provenance:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["notes"] = tuple(known.get("notes", ()))
        return cls(**known)


@dataclass(frozen=True)
class Target:
    schemes: tuple[SchemeResult, ...]
    workload: Workload
    provenance: Provenance
    dropped: tuple[DroppedRun, ...] = ()  # runs or schemes left out, with the reason
    name: str = field(default="")
    evidence: PathEvidence | None = None  # per-packet logs' findings; None: the source had none

    def __post_init__(self) -> None:
        names = [s.scheme for s in self.schemes]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise InputError(f"target {self.name or self.provenance.source!r} lists "
                             f"{', '.join(duplicates)} more than once (perhaps under a legacy and "
                             "a current label); keep one")
        check_values(self)

    def scheme(self, name: str) -> SchemeResult:
        """Look a scheme up by canonical name or by the source's label."""
        canonical = canonical_scheme(name)
        for s in self.schemes:
            if s.scheme == canonical or s.label == name:
                return s
        raise InputError(f"scheme {name!r} is not in target {self.name!r}; it has "
                         f"{', '.join(s.scheme for s in self.schemes)}")

    @property
    def scheme_names(self) -> list[str]:
        return [s.scheme for s in self.schemes]

    @property
    def has_runs(self) -> bool:
        return any(s.runs for s in self.schemes)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": FORMAT_VERSION, "name": self.name,
                "workload": self.workload.to_json(), "provenance": self.provenance.to_json(),
                "schemes": [s.to_json() for s in self.schemes],
                "dropped": [{"label": d.label, "run": d.run, "reason": d.reason}
                            for d in self.dropped],
                **({} if self.evidence is None else {"evidence": self.evidence.to_json()})}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n"

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "target JSON") -> Target:
        if data.get("format") != FORMAT:
            raise InputError(f"{source}: not a calibrate target (no \"format\": \"{FORMAT}\")")
        remake = "make the file again with `calibrate target show SOURCE --json-out FILE`"
        if "version" in data:
            declared("version", data["version"], source,
                     f"a newer version needs a newer calibrate; else {remake}")
        workload = data.get("workload") or {}
        if not isinstance(workload, Mapping):
            raise InputError(f"{source}: \"workload\" is not an object; {remake}")
        try:
            return cls(tuple(SchemeResult.from_json(s) for s in data["schemes"]),
                       Workload.from_json(workload, source, f"correct its workload or {remake}"),
                       Provenance.from_json(data.get("provenance", {"kind": "target json",
                                                                    "source": source})),
                       tuple(DroppedRun(str(d["label"]), d.get("run"), str(d["reason"]))
                             for d in data.get("dropped", [])),
                       str(data.get("name", "")),
                       None if data.get("evidence") is None
                       else PathEvidence.from_json(data["evidence"]))
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(f"{source}: malformed calibrate target ({type(error).__name__}: "
                             f"{error}); regenerate it with `calibrate target show --write`") from None

    def with_provenance(self, **changes: Any) -> Target:
        return replace(self, provenance=replace(self.provenance, **changes))


def _fix(target: Target, run: RunResult | None) -> str:
    """What to do about an impossible value, by where the target came from."""
    kind, source = target.provenance.kind, target.provenance.source
    if kind in ("summary table", "bundled"):
        return f"correct that scheme's row in {source}"
    if kind == "target json":
        return (f"correct it in {source}, or make the file again from the measurement with "
                "`calibrate target show SOURCE --json-out FILE`")
    if run is None:
        return f"correct it in {source}"
    return (f"correct or delete that run in {source} (the value came from its "
            f"{run.source or 'files'})")


def check_values(target: Target) -> None:
    """Refuse a target holding a value no measurement can have (`impossible`): every run's
    numbers per flow, and the aggregates of a target without runs (a table).  Every reader's
    target passes here, so `target show` refuses what `run` would, with the same words."""
    where = target.name or target.provenance.source
    _check_declared(target, f"target {where}")
    for scheme in target.schemes:
        for run in scheme.runs:
            for flow, m in run.flows.items():
                why = m.problem()
                if why:
                    flow_text = "" if flow == TOTAL else f" flow {flow}"
                    raise InputError(f"target {where}: {scheme.label} run {run.run}{flow_text}: "
                                     f"{why}; {_fix(target, run)}")
        if scheme.runs:
            continue
        for flow, s in scheme.summary.items():
            flow_text = "" if flow == TOTAL else f" flow {flow}"
            why = impossible(s.tput_mbps.mean, s.delay_ms.mean, s.loss.mean)
            stds = {"throughput": s.tput_mbps.std, "delay": s.delay_ms.std, "loss": s.loss.std}
            bad_std = next((name for name, v in stds.items()
                            if v is not None and not (math.isfinite(v) and v >= 0)), None)
            if why is None and bad_std is not None:
                why = (f"the standard deviation of {bad_std} {stds[bad_std]:g} is impossible "
                       "(a standard deviation is finite and >= 0)")
            if why:
                raise InputError(f"target {where}: {scheme.label}{flow_text} (mean over "
                                 f"{scheme.n_runs} runs): {why}; {_fix(target, None)}")


def _check_declared(target: Target, where: str) -> None:
    """Every number the target declares within its bound (`calibrate.targets.bounds`)."""
    fix = _fix(target, None)
    workload = target.workload
    declared("flows", workload.flows, where, fix)
    declared("interval_s", workload.interval_s, where, fix)
    declared("runtime_s", workload.runtime_s, where, fix)
    if workload.run_times is not None:
        declared("runs", workload.run_times, where, fix)
    declared("std_ddof", target.provenance.std_ddof, where, fix)
    for scheme in target.schemes:
        if scheme.runs:
            for run in scheme.runs:
                declared("run", run.run, f"{where}: {scheme.label}", fix)
                for key in run.flows:
                    check_flow_key(key, f"{where}: {scheme.label} run {run.run}", fix)
        else:
            declared("runs", scheme.n_runs, f"{where}: {scheme.label}", fix)
        for key in scheme.summary:
            check_flow_key(key, f"{where}: {scheme.label}", fix)


def check_flow_key(key: str, where: str, fix: str) -> None:
    """A flow key is "all" or a flow number within the flows' bound."""
    if key == TOTAL:
        return
    if not key.isdigit():
        raise InputError(f"{where}: flow key {key!r} is neither {TOTAL!r} nor a flow number; "
                         f"{fix}".replace("\n", " "))
    declared("flows", key, f"{where}: flow key", fix)


def _flow_order(key: str) -> tuple[int, int]:
    return (0, 0) if key == TOTAL else (1, int(key) if key.isdigit() else 0)
