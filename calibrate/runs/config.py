"""What a run is asked to do (`RunConfig`), and the problem derived from it once (`Problem`).

`problem_of` derives the problem when a run starts: which of the target's schemes are scored
(those this host can run), their target numbers, the search space and the warm start
(`calibrate.space`).  The run directory records it (`calibrate.runs.journal`), and every later
reader — resume, export — reads it back from there, never from the host again.  Only running
an evaluation needs the host: `host_schemes` finds the programs of the recorded schemes.

One evaluation of a candidate emulator is every scored scheme run `replicates` times over it
(`tasks_of`, one Ray task each), scored by the Pantheon paper's replication error (`score_runs`).

Seeds: each link kind's emulator seed is derived here from the run's seed, once per search
(`emulator_seed`): it is the candidates' trace seed (`EmulatorConfig.trace_seed`: the Poisson
trace, the same for every candidate of that search, so candidates differ only in their
parameters).  Replicate r of every candidate runs with loss seed emulator_seed·1000 + r
(`EmulatorConfig.for_run`, the one place it is derived: common random numbers across candidates,
independent across replicates).  Both are in every journal record ("seed", "loss_seeds").
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from calibrate.emulator import EmulatorConfig, Queue
from calibrate.engine import Backend
from calibrate.errors import InputError
from calibrate.evaluation import Evaluator, RunMetrics, RunTask, lost
from calibrate.metrics import TOTAL
from calibrate.objective import ReplicationError, Stats, replication_error
from calibrate.physics import SchemeMeasurement, space_from_target, warm_start
from calibrate.scheme_registry import era_of, traits_of
from calibrate.schemes import Registry, Scheme, load_registry
from calibrate.scripted import MAX_RUNTIME_S
from calibrate.space import PARAMETERS, SearchSpace
from calibrate.targets.model import SchemeResult, Target, Workload

LINK_KINDS: tuple[str, ...] = ("constant", "poisson")


# ----------------------------------------------------------------------------------------------
# Settings


@dataclass(frozen=True)
class RunConfig:
    """What `calibrate run` was asked to do; stored in run.json and reused by `resume`."""

    target: str  # TARGET as given
    schemes: tuple[str, ...] = ()  # target labels or names to score; () = every one this host runs
    budget: int = 30  # evaluations per link kind
    optimizer: str = "gpytorch"
    runtime_s: float = 30.0  # seconds per run (Pantheon's -t)
    replicates: int = 3
    links: tuple[str, ...] = LINK_KINDS
    seed: int = 0
    time_limit_s: float | None = None  # wall-clock seconds for the whole calibration
    aggregate: str = "mean"
    include_loss: bool = False
    n_initial: int | None = None  # Sobol design size (default: `initial_design`)
    fixed: Mapping[str, float] = field(default_factory=dict)
    bounds: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    pantheon_dir: str | None = None  # a Pantheon checkout whose wrappers run the target's schemes
    pantheon_python: str | None = None  # their interpreter
    backend: str = "engine"  # what runs the emulations: our engine or the user's real Mahimahi
    mahimahi_user: str | None = None  # the account Mahimahi's shells run as

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise InputError(f"--budget must be at least 1 evaluation per link kind, got {self.budget}")
        if self.replicates < 1:
            raise InputError(f"--replicates must be at least 1, got {self.replicates}")
        if not 0 < self.runtime_s <= MAX_RUNTIME_S:
            raise InputError(f"--runtime must be in (0, {MAX_RUNTIME_S:g}] seconds as Pantheon's -t, "
                             f"got {self.runtime_s}")
        if self.n_initial is not None and self.n_initial < 1:
            raise InputError(f"--n-initial must be at least 1, got {self.n_initial}")
        bad = [k for k in self.links if k not in LINK_KINDS]
        if bad or not self.links:
            got = f"unknown link kind {bad[0]!r}" if bad else "no link kind given"
            raise InputError(f"{got}: the link kinds are {' and '.join(LINK_KINDS)} (--links "
                             f"{LINK_KINDS[0]}, or --links {','.join(LINK_KINDS)} for both)")
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise InputError(f"--time-limit must be positive seconds, got {self.time_limit_s}")
        if self.aggregate not in ("mean", "median"):
            raise InputError(f"--aggregate must be mean or median, got {self.aggregate!r}")
        self.emulation_backend()  # validates the pair
        if set(PARAMETERS) <= set(self.fixed):
            raise InputError(self._nothing_to_search())

    def _nothing_to_search(self) -> str:
        """What to do instead of a search whose every parameter is fixed: score that emulator."""
        text = (f"--fix fixes every parameter ({', '.join(f'{k}={self.fixed[k]:g}' for k in PARAMETERS)}):"
                f" nothing is left to search")
        try:
            emulator = emulator_of(self.fixed, self.links[0] if self.links else LINK_KINDS[0], 0)
        except (InputError, KeyError, TypeError, ValueError):
            return f"{text}; fix fewer parameters, or score an emulator with `calibrate score`"
        return (f"{text}; to measure that emulator, run `calibrate score {shlex.quote(self.target)} "
                f"--emulator {shlex.quote(emulator.mahimahi_command())}`, or fix fewer parameters")

    def emulation_backend(self) -> Backend:
        return Backend(self.backend, self.mahimahi_user)

    def initial_design(self, dim: int) -> int:
        """Sobol points after the warm start: `n_initial`, else 2·dim (the usual design for a GP
        in a few dimensions) but at most a quarter of the budget (at least 2), so a small budget
        still leaves most evaluations to the model — the warm start already places the search."""
        if self.n_initial is not None:
            return self.n_initial
        return min(2 * dim, max(2, self.budget // 4))

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["fixed"] = dict(self.fixed)
        data["bounds"] = {k: list(v) for k, v in self.bounds.items()}
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunConfig:
        d = dict(data)
        d["schemes"] = tuple(d.get("schemes", ()))
        d["links"] = tuple(d.get("links", LINK_KINDS))
        d["bounds"] = {k: (float(v[0]), float(v[1])) for k, v in d.get("bounds", {}).items()}
        return cls(**d)


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


def emulator_seed(seed: int, link: str) -> int:
    """The emulator seed of one link kind's search (module docstring: Seeds)."""
    return int(np.random.SeedSequence([abs(int(seed)), LINK_KINDS.index(link)]).generate_state(1)[0]) % (1 << 24)


#: packets: a queue this deep is Mahimahi's default, no limit (an ablation's "unlimited queue"
#: step; the deepest queue a search space allows, `calibrate.space`)
UNLIMITED_QUEUE = 10_000_000


def emulator_of(values: Mapping[str, float], link: str, seed: int) -> EmulatorConfig:
    """The candidate emulator at a point of the space, with its search's emulator seed as its
    trace seed (each run then draws its own losses: `EmulatorConfig.for_run`)."""
    queue = Queue() if values["queue"] >= UNLIMITED_QUEUE else Queue.droptail(max(int(values["queue"]), 1))
    # link is one of LINK_KINDS (RunConfig checks them); EmulatorConfig checks it again
    return EmulatorConfig(rate_mbps=float(values["rate"]), delay_ms=int(values["delay"]), queue=queue,
                          uplink_loss=float(values["loss"]), link=link, trace_seed=seed)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------
# The problem: what is scored, over which space


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
                      "tput": s.throughput, "delay": s.delay, "loss": s.loss}
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
                    Stats(float(row["tput"]), float(row["delay"]), float(row["loss"]))
                    for row in data["real"]}
        else:
            real = {}
            for label in schemes:
                result = next((s for s in target.schemes if s.label == label), None) or target.scheme(label)
                values = _aggregates(result, config.aggregate, workload.flows)
                for flow in _flow_keys(workload.flows):
                    # whole triples: problem_of scored these aggregates when the run began
                    real[label if workload.flows == 1 else (label, flow)] = Stats(*values[flow])  # type: ignore[misc]
        return cls(real=real, schemes=schemes, dropped=dict(data.get("dropped", {})),
                   substitutes=dict(data.get("substitutes", {})), era=data.get("era"),
                   era_assumed=bool(data.get("era_assumed", False)),
                   workload=workload,
                   space=SearchSpace.from_bounds({k: (float(v[0]), float(v[1]))
                                                  for k, v in space["bounds"].items()},
                                                 space.get("fixed", {})),
                   warm_start=dict(data["warm_start"]))


def _flow_keys(flows: int) -> list[str]:
    return [TOTAL] if flows == 1 else [str(f) for f in range(1, flows + 1)]


def _aggregates(result: SchemeResult, aggregate: str, flows: int
                ) -> dict[str, tuple[float | None, ...] | None]:
    """Per flow key (and the total) the target's (throughput, p95 delay, loss) `aggregate`."""
    values: dict[str, tuple[float | None, ...] | None] = {}
    for flow in [TOTAL, *_flow_keys(flows)]:
        summary = result.summary.get(flow)
        values[flow] = None if summary is None else tuple(
            getattr(getattr(summary, m), aggregate) for m in ("tput_mbps", "delay_ms", "loss"))
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
        if any(v is None or None in v for v in (values[f] for f in flow_keys + [TOTAL])):
            dropped[s.label] = (f"the target has no {config.aggregate} of every metric for "
                                f"{s.label}; try --aggregate mean")
            del schemes[s.label]
            continue
        measurement = s.measurement(config.aggregate)
        assert measurement is not None  # the total's aggregates were checked above
        space_stats[s.label] = measurement
        for flow in flow_keys:
            # whole triples: checked above
            real[s.label if flows == 1 else (s.label, flow)] = Stats(*values[flow])  # type: ignore[misc]
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
                   space, start, substitutes, era, era_assumed)


# ----------------------------------------------------------------------------------------------
# One evaluation: the runs of a candidate, and their score


def host_schemes(problem: Problem, registry: Registry) -> dict[str, Scheme]:
    """This host's scheme for every scheme name the problem scores (what a task runs), or an
    InputError naming the one that cannot run here."""
    found: dict[str, Scheme] = {}
    for name in dict.fromkeys(problem.schemes.values()):
        scheme = registry.get(name)
        if scheme is None or not scheme.available:
            labels = ", ".join(label for label, n in problem.schemes.items() if n == name)
            why = "unknown here" if scheme is None else scheme.unavailable_reason
            raise InputError(f"scheme {name!r}, which this run scores for {labels}, cannot run on "
                             f"this host ({why}); see `calibrate schemes`")
        found[name] = scheme
    return found


def tasks_of(problem: Problem, config: RunConfig, schemes: Mapping[str, Scheme], candidate: int,
             emulator: EmulatorConfig) -> list[RunTask]:
    """Every (scheme, replicate) run of one candidate emulator; `schemes`: `host_schemes`."""
    backend = config.emulation_backend()
    return [RunTask(candidate, label, schemes[problem.schemes[label]], replicate, emulator,
                    problem.workload, backend)
            for label in problem.sharing()
            for replicate in range(1, config.replicates + 1)]


def score_runs(problem: Problem, config: RunConfig, results: Sequence[RunMetrics]) -> ReplicationError:
    """f and its table from one candidate's runs."""
    emulated: dict[Any, list] = {}
    sharing = problem.sharing()
    for m in sorted(results, key=lambda m: (m.label, m.replicate)):
        for label in sharing[m.label]:
            for flow in problem.flow_keys():
                emulated.setdefault(problem.key(label, flow), []).append(m.replicate_of(flow))
    # RunConfig checks that aggregate is "mean" or "median"
    return replication_error(problem.real, emulated, aggregate=config.aggregate,  # type: ignore[arg-type]
                             include_loss=config.include_loss)


def score_emulator(problem: Problem, config: RunConfig, schemes: Mapping[str, Scheme],
                   evaluator: Evaluator, emulator: EmulatorConfig,
                   on_run: Callable[[RunMetrics, int, int], None] | None = None) -> ReplicationError:
    """Run every scheme `config.replicates` times over one emulator on Ray and score it
    (`calibrate score`, the floor of a synthetic target).  `on_run(metrics, done, total)` after
    each run."""
    pending = {evaluator.submit(t): t for t in tasks_of(problem, config, schemes, -1, emulator)}
    total = len(pending)
    results: list[RunMetrics] = []
    try:
        while pending:
            for ref, metrics in evaluator.wait(list(pending), timeout=1.0):
                task = pending.pop(ref)
                results.append(metrics if metrics is not None else lost(task))
                if on_run:
                    on_run(results[-1], len(results), total)
    except BaseException:  # Ctrl-C, SIGTERM, an input or host error: stop the runs cleanly
        evaluator.cancel(list(pending))
        raise
    return score_runs(problem, config, results)


def _stats_json(s: Stats | None) -> dict[str, float] | None:
    return None if s is None else {"tput": s.throughput, "delay": s.delay, "loss": s.loss}


def scheme_table(error: ReplicationError) -> list[dict[str, Any]]:
    """Per key: real vs emulated, the error terms (%), replicates and failures."""
    rows = []
    for s in error.schemes:
        label, flow = (s.key if isinstance(s.key, tuple) else (s.key, TOTAL))
        rows.append({"scheme": label, "flow": flow, "real": _stats_json(s.real),
                     "emulated": _stats_json(s.emulated), "replicates": s.replicates,
                     "error_pct": {"tput": 100 * s.throughput, "delay": 100 * s.delay,
                                   "loss": 100 * s.loss},
                     "failures": list(s.failures)})
    return rows
