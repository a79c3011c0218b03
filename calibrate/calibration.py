"""The calibration loop: target → search space → optimizer ↔ Ray evaluations → journal → result.

One calibration searches each link kind (constant, Poisson deliveries) as its own run, with its
own optimizer over the same space, and compares the two at the end (spec/pantheon.md §5.1).
Both searches share the Ray slots: whenever fewer tasks are unfinished than the cluster has
emulator slots, the search with fewer evaluations asks its optimizer for one more candidate, so
candidates are proposed while others still run (asynchronous batches) and no slot idles.

The path of one evaluation: optimizer.ask(1) → unit point → `SearchSpace.to_values` →
`EmulatorConfig` → one Ray task per (scheme, replicate) (`calibrate.evaluation`) → when the
candidate's last task is back: `replication_error` → optimizer.tell → one JSON line appended to
RUN_DIR/evaluations.jsonl and fsync'ed → only then the next ask.  So a crash, Ctrl-C or kill -9
loses at most the candidates still running, never a finished evaluation.

The run directory:

- ``run.json``: the settings (`RunConfig`), the search space, the warm start, the schemes
  scored and dropped — written once, before anything runs;
- ``target.json``: the target as loaded, so a resume does not depend on fetching it again;
- ``evaluations.jsonl``: the journal, one finished evaluation per line, in the order the
  optimizers were told (parameters, unit point, seeds, per-scheme metrics and runs, f, noise,
  timing, phase: search or refine; lines written before phases existed are search lines);
- ``result.json``: written at the end: per link kind the best candidate, its per-scheme
  real-vs-emulated table and the ranges of values indistinguishable from it, and which link
  kind wins.

`resume` rebuilds each optimizer by telling it the journal's evaluations in order (the
optimizers' proposals, and the refinement's, are a pure function of their history,
`calibrate.optimizers.base`); candidates that were running when the run stopped are not in the
journal, so they are simply proposed again.

Seeds: each link kind's emulator seed is derived from the run's seed (it makes the Poisson
trace, the same for every candidate of that search, so candidates differ only in their
parameters); replicate r of every candidate uses loss seed emulator_seed·1000 + r (common random
numbers across candidates, independent across replicates).  Both are in every journal line.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from calibrate import refinement
from calibrate.emulator import EmulatorConfig, Queue
from calibrate.engine import Backend
from calibrate.errors import InputError
from calibrate.evaluation import Evaluator, RunMetrics, RunTask, lost
from calibrate.jsonfile import parse_json, read_json
from calibrate.metrics import TOTAL
from calibrate.objective import ReplicationError, Stats, replication_error
from calibrate.optimizers import Optimizer, make_optimizer
from calibrate.ranges import Ranges, ranges_of
from calibrate.schemes import Registry, Scheme, load_registry
from calibrate.space import (PANTHEON_DELAY_BASED, PANTHEON_RATE_PROBING, PANTHEON_SATURATING,
                             SchemeMeasurement, SearchSpace, space_from_target, warm_start)
from calibrate.target import Target, Workload

LINK_KINDS: tuple[str, ...] = ("constant", "poisson")
RUN_FILE = "run.json"
TARGET_FILE = "target.json"
JOURNAL = "evaluations.jsonl"
RESULT = "result.json"
FORMAT = "calibrate-run"
FORMAT_VERSION = 1

#: seconds between checks of the deadline and progress while tasks run
POLL_S = 0.5

#: How a search spends its budget, in full.  It searches the whole space with its optimizer
#: until (a) `REFINE_SHARE` of its budget is left (rounded; the last 5 of 24), or (b) earlier,
#: its model is confident that no point beats the incumbent by more than the measured noise
#: (`Optimizer.improvement_ruled_out`; the rule and its constants are in
#: calibrate.optimizers.base), checked after each evaluation once `STOP_AFTER` of the budget is
#: spent (a GP fitted on a handful of points can be confidently wrong).  It never stops merely
#: because EI at the proposals is small: on a real target "EI < 1 % of f" stopped a search after
#: 18 of 24 evaluations at f = 15.6 % while 4.6 % was reachable.  What is left of the budget goes
#: to the local refinement (`calibrate.refinement`): the incumbent's not yet evaluated
#: neighbours in delay (±1, ±2 ms), queue, rate and loss, the model's lowest posterior means
#: first, following the incumbent as it moves.  When every neighbour of the incumbent has been
#: evaluated, a search that reached (b) ends (`CONVERGED`); one that reached (a) takes its
#: optimizer's proposals again.  Random search has no model: no (b), no refinement, its whole
#: budget is its own sequence.  Each journal line records its phase ("search" or "refine") and
#: whether (b) held after it ("confident"), so a resumed search continues in the same phase.
STOP_AFTER = 0.5
REFINE_SHARE = 0.2
CONVERGED = "converged: improvement ruled out and the incumbent's neighbours evaluated"


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
        if not 0 < self.runtime_s <= 60:
            raise InputError(f"--runtime must be in (0, 60] seconds as Pantheon's -t, got {self.runtime_s}")
        if self.n_initial is not None and self.n_initial < 1:
            raise InputError(f"--n-initial must be at least 1, got {self.n_initial}")
        bad = [k for k in self.links if k not in LINK_KINDS]
        if bad or not self.links:
            raise InputError(f"link kinds must be among {', '.join(LINK_KINDS)}, got {list(self.links)}")
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise InputError(f"--time-limit must be positive seconds, got {self.time_limit_s}")
        if self.aggregate not in ("mean", "median"):
            raise InputError(f"--aggregate must be mean or median, got {self.aggregate!r}")
        self.emulation_backend()  # validates the pair

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
    def from_json(cls, data: Mapping[str, Any]) -> "RunConfig":
        d = dict(data)
        d["schemes"] = tuple(d.get("schemes", ()))
        d["links"] = tuple(d.get("links", LINK_KINDS))
        d["bounds"] = {k: (float(v[0]), float(v[1])) for k, v in d.get("bounds", {}).items()}
        return cls(**d)


def emulator_seed(seed: int, link: str) -> int:
    """The emulator seed of one link kind's search (module docstring: Seeds)."""
    return int(np.random.SeedSequence([abs(int(seed)), LINK_KINDS.index(link)]).generate_state(1)[0]) % (1 << 24)


# ----------------------------------------------------------------------------------------------
# The problem: what is scored, over which space


def _hints(labels: Sequence[str], schemes: Mapping[str, Scheme]
           ) -> tuple[list[str], list[str], list[str]]:
    """Saturating / delay-based / rate-probing labels for the space's rules, matched on every name
    a scheme has (the target's label, its canonical name, our scheme's name and aliases)."""
    def names(label: str) -> set[str]:
        s = schemes.get(label)
        return {label, *(() if s is None else (s.name, *s.aliases))}
    return ([l for l in labels if names(l) & PANTHEON_SATURATING],
            [l for l in labels if names(l) & PANTHEON_DELAY_BASED],
            [l for l in labels if names(l) & PANTHEON_RATE_PROBING])


@dataclass(frozen=True)
class Problem:
    """The target side of the objective and the space, as derived from target + settings."""

    real: Mapping[Any, Stats]  # objective key (label, or (label, flow)) -> target aggregate
    schemes: Mapping[str, Scheme]  # label -> the scheme that runs for it
    dropped: Mapping[str, str]  # label -> why it is not scored
    workload: Workload  # what each run does (the target's flows and interval, our runtime)
    space: SearchSpace
    warm_start: Mapping[str, float]

    def flow_keys(self) -> list[str]:
        return [TOTAL] if self.workload.flows == 1 else [str(f) for f in range(1, self.workload.flows + 1)]

    def key(self, label: str, flow: str) -> Any:
        return label if self.workload.flows == 1 else (label, flow)

    def sharing(self) -> dict[str, list[str]]:
        """Target labels run by the same scheme (Nepal's saturator and greg_saturator) share
        its runs: first label -> every label scored with them."""
        groups: dict[str, list[str]] = {}
        for label, scheme in self.schemes.items():
            groups.setdefault(scheme.name, []).append(label)
        return {labels[0]: labels for labels in groups.values()}


def problem_of(target: Target, config: RunConfig, registry: Registry | None = None) -> Problem:
    """Pick the schemes, read their aggregates, derive the space and the warm start."""
    registry = registry or load_registry(config.pantheon_dir, config.pantheon_python)
    chosen = [target.scheme(name) for name in config.schemes] if config.schemes else list(target.schemes)
    flows = target.workload.flows
    workload = Workload(flows, target.workload.interval_s, config.runtime_s, 1)
    flow_keys = [TOTAL] if flows == 1 else [str(f) for f in range(1, flows + 1)]
    real: dict[Any, Stats] = {}
    schemes: dict[str, Scheme] = {}
    dropped: dict[str, str] = {}
    space_stats: dict[str, SchemeMeasurement] = {}
    for s in chosen:
        try:
            schemes[s.label] = registry.resolve(s.label)
        except InputError as e:
            dropped[s.label] = str(e)
            continue
        values = {}
        for flow in [TOTAL, *flow_keys]:
            summary = s.summary.get(flow)
            agg = None if summary is None else tuple(
                getattr(getattr(summary, m), config.aggregate) for m in ("tput_mbps", "delay_ms", "loss"))
            values[flow] = agg
        if any(values[f] is None or None in values[f] for f in flow_keys + [TOTAL]):  # type: ignore[operator]
            dropped[s.label] = (f"the target has no {config.aggregate} of every metric for "
                                f"{s.label}; try --aggregate mean")
            del schemes[s.label]
            continue
        space_stats[s.label] = s.measurement(config.aggregate)  # type: ignore[assignment]
        for flow in flow_keys:
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
    return Problem(real, schemes, dropped, workload, space, start)


def emulator_of(values: Mapping[str, float], link: str, seed: int) -> EmulatorConfig:
    return EmulatorConfig(rate_mbps=float(values["rate"]), delay_ms=int(values["delay"]),
                          queue=Queue.droptail(max(int(values["queue"]), 1)),
                          uplink_loss=float(values["loss"]), link=link, seed=seed)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------
# The journal


def tasks_of(problem: Problem, config: RunConfig, candidate: int,
             emulator: EmulatorConfig) -> list[RunTask]:
    """Every (scheme, replicate) run of one candidate emulator."""
    backend = config.emulation_backend()
    return [RunTask(candidate, label, problem.schemes[label], replicate, emulator, problem.workload, backend)
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
    return replication_error(problem.real, emulated, aggregate=config.aggregate,  # type: ignore[arg-type]
                             include_loss=config.include_loss)


def score_emulator(problem: Problem, config: RunConfig, evaluator: Evaluator,
                   emulator: EmulatorConfig,
                   on_run: Callable[[RunMetrics, int, int], None] | None = None) -> ReplicationError:
    """Run every scheme `config.replicates` times over one emulator on Ray and score it
    (`calibrate score`, the floor of a synthetic target).  `on_run(metrics, done, total)` after
    each run."""
    pending = {evaluator.submit(t): t for t in tasks_of(problem, config, -1, emulator)}
    total = len(pending)
    results: list[RunMetrics] = []
    while pending:
        for ref, metrics in evaluator.wait(list(pending), timeout=None):
            task = pending.pop(ref)
            results.append(metrics if metrics is not None else lost(task))
            if on_run:
                on_run(results[-1], len(results), total)
    return score_runs(problem, config, results)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: Any) -> None:
    """JSON written whole or not at all (temp file, fsync, rename, fsync the directory)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(data, indent=2, allow_nan=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def append_journal(path: Path, record: Mapping[str, Any]) -> None:
    """One line, flushed and fsync'ed before returning (the durability promise)."""
    line = json.dumps(record, allow_nan=False, separators=(",", ":")) + "\n"
    new = not path.exists()
    with open(path, "a") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())
    if new:
        _fsync_dir(path.parent)


def read_journal(path: Path, *, repair: bool = False) -> list[dict[str, Any]]:
    """The journal's records.  A last line cut short by a crash mid-write (no newline) was
    never acknowledged; it is dropped (and, with `repair`, cut from the file)."""
    if not path.exists():
        return []
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data) and repair:
        with open(path, "r+b") as f:
            f.truncate(end)
            os.fsync(f.fileno())
    records = []
    for number, line in enumerate(data[:end].decode("utf-8").splitlines(), start=1):
        if line.strip():
            records.append(parse_json(line, source=f"{path}:{number}", what="journal line"))
    return records


def _clean(value: float) -> float | None:
    """JSON has no NaN: unknown numbers are null."""
    return None if value is None or not math.isfinite(value) else float(value)


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


# ----------------------------------------------------------------------------------------------
# The loop's bookkeeping


@dataclass
class Candidate:
    """A proposed point whose tasks are running (mutable: results arrive one by one)."""

    id: int
    link: str
    x: np.ndarray
    values: dict[str, float]
    emulator: EmulatorConfig
    tasks: dict[Any, RunTask]  # ObjectRef -> task
    phase: str = "search"  # "search" (the optimizer's proposal) or "refine" (calibrate.refinement)
    results: list[RunMetrics] = field(default_factory=list)
    started: float = field(default_factory=time.time)

    @property
    def done(self) -> bool:
        return not self.tasks


@dataclass
class Search:
    """One link kind's optimizer, its journaled evaluations, and its running candidates."""

    link: str
    optimizer: Optimizer
    records: list[dict[str, Any]] = field(default_factory=list)
    running: dict[int, Candidate] = field(default_factory=dict)
    stopped: str | None = None  # why it proposes no more
    confident: bool = False  # the model ruled out improvement elsewhere (rule above STOP_AFTER)
    ranges: Ranges | None = None  # values indistinguishable from the best, after the last tell

    @property
    def best_f(self) -> float | None:
        return min((r["f"] for r in self.records), default=None)


@dataclass(frozen=True)
class ProgressInfo:
    """What the live display shows."""

    done: Mapping[str, int]  # link -> evaluations journaled
    budget: int
    best: Mapping[str, float | None]  # link -> best f so far (%)
    running_tasks: int
    running_candidates: int
    elapsed_s: float
    eta_s: float | None
    stopped: Mapping[str, str | None]
    latest: Sequence[Mapping[str, Any]] = ()  # evaluations finished since the last call
    refining: Mapping[str, bool] = field(default_factory=dict)  # link -> in its local refinement
    ranges: Mapping[str, Ranges | None] = field(default_factory=dict)  # link -> after the last tell


Progress = Callable[[ProgressInfo], None]


@dataclass
class Calibration:
    """A run directory and the loop that fills it.  `start` a new one or `open` an existing
    one, then `run` it with an `Evaluator`."""

    run_dir: Path
    config: RunConfig
    target: Target
    problem: Problem
    searches: dict[str, Search]
    elapsed_before: float = 0.0  # seconds spent by earlier sessions (resume)
    _next_id: int = 0
    _latest: list[dict[str, Any]] = field(default_factory=list)

    # -- making and reopening

    @classmethod
    def start(cls, run_dir: Path | str, config: RunConfig, target: Target) -> "Calibration":
        run_dir = Path(run_dir)
        if (run_dir / RUN_FILE).exists() or (run_dir / JOURNAL).exists():
            raise InputError(f"{run_dir} already holds a calibration; continue it with "
                             f"`calibrate resume {run_dir}`, or choose another --out")
        problem = problem_of(target, config)
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"cannot create run directory {run_dir} ({e.strerror or e}); "
                             f"choose another --out") from None
        write_atomic(run_dir / TARGET_FILE, target.to_json())
        space = problem.space
        write_atomic(run_dir / RUN_FILE, {
            "format": FORMAT, "version": FORMAT_VERSION,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(),
            "config": config.to_json(),
            "space": {"bounds": {k: list(v) for k, v in space.bounds.items()},
                      "fixed": dict(space.fixed), "free": list(space.free)},
            "warm_start": dict(problem.warm_start),
            "schemes": {label: s.name for label, s in problem.schemes.items()},
            "dropped": dict(problem.dropped),
            "workload": problem.workload.to_json(),
            "seeds": {link: emulator_seed(config.seed, link) for link in config.links},
        })
        return cls._build(run_dir, config, target, problem, [])

    @classmethod
    def open(cls, run_dir: Path | str, *, read_only: bool = False) -> "Calibration":
        """Reopen a run directory to continue it; a journal line torn by a crash is cut off.
        `read_only` (export, inspection) leaves the files as they are: the run may still be
        writing its last line."""
        run_dir = Path(run_dir)
        if not (run_dir / RUN_FILE).exists():
            raise InputError(f"{run_dir} is not a calibration run directory (no {RUN_FILE}); "
                             f"start one with `calibrate run TARGET --out {run_dir}`")
        meta = read_json(run_dir / RUN_FILE, what="run settings")
        if meta.get("format") != FORMAT or int(meta.get("version", 0)) > FORMAT_VERSION:
            raise InputError(f"{run_dir / RUN_FILE} is not a run file this calibrate understands")
        config = RunConfig.from_json(meta["config"])
        target = Target.from_json(read_json(run_dir / TARGET_FILE, what="target"),
                                  str(run_dir / TARGET_FILE))
        problem = problem_of(target, config)
        if problem.space.bounds != {k: tuple(v) for k, v in meta["space"]["bounds"].items()}:
            raise InputError(f"the search space derived again from {run_dir / TARGET_FILE} differs "
                             f"from the one in {run_dir / RUN_FILE}; this calibrate version "
                             f"cannot resume that run")
        records = read_journal(run_dir / JOURNAL, repair=not read_only)
        return cls._build(run_dir, config, target, problem, records)

    @classmethod
    def _build(cls, run_dir: Path, config: RunConfig, target: Target, problem: Problem,
               records: list[dict[str, Any]]) -> "Calibration":
        start = problem.space.from_values(problem.warm_start, clip=True)
        options = {"n_initial": config.initial_design(problem.space.dim)}
        searches = {}
        for link in config.links:
            opt = make_optimizer(config.optimizer, problem.space.dim, seed=config.seed,
                                 warm_start=[start], **options)
            search = Search(link, opt)
            mine = [r for r in records if r["link"] == link]
            if mine:  # the history, in the order the original was told (= journal order)
                opt.tell([r["x"] for r in mine], [r["f"] for r in mine],
                         [r["noise"] for r in mine])
                search.records = mine
                search.confident = any(r.get("confident", False) for r in mine)
            searches[link] = search
        elapsed = max((r.get("elapsed_s", 0.0) for r in records), default=0.0)
        next_id = max((r["candidate"] for r in records), default=-1) + 1
        return cls(run_dir, config, target, problem, searches, elapsed, next_id)

    # -- the loop

    def _deadline_passed(self, session_start: float) -> bool:
        limit = self.config.time_limit_s
        return limit is not None and self.elapsed_before + time.monotonic() - session_start >= limit

    def _want_more(self, search: Search) -> bool:
        return (search.stopped is None
                and len(search.records) + len(search.running) < self.config.budget)

    def _refining(self, search: Search) -> bool:
        """Whether the search's next candidate comes from its local refinement (the rule above
        `STOP_AFTER`)."""
        opt = search.optimizer
        left = self.config.budget - len(search.records) - len(search.running)
        return (opt.model_based and opt.design_done
                and (search.confident or left <= round(REFINE_SHARE * self.config.budget)))

    def _propose(self, search: Search, evaluator: Evaluator) -> Candidate | None:
        """Ask for one candidate and submit its tasks.  None when the search has nothing to
        propose now: it converged (`stopped` says so), or its refinement waits for its running
        neighbours to tell where the incumbent is."""
        refining = self._refining(search)
        xs = refinement.propose(search.optimizer, self.problem.space) if refining else []
        if refining and not xs and search.confident:
            if not search.running:
                search.stopped = CONVERGED
            return None
        x = xs[0] if xs else search.optimizer.ask(1)[0]
        values = self.problem.space.to_values(x)
        emulator = emulator_of(values, search.link, emulator_seed(self.config.seed, search.link))
        candidate = Candidate(self._next_id, search.link, x, values, emulator, {},
                              "refine" if xs else "search")
        self._next_id += 1
        for task in self.tasks(candidate.id, emulator):
            candidate.tasks[evaluator.submit(task)] = task
        search.running[candidate.id] = candidate
        return candidate

    def tasks(self, candidate: int, emulator: EmulatorConfig) -> list[RunTask]:
        return tasks_of(self.problem, self.config, candidate, emulator)

    def score(self, results: Sequence[RunMetrics]) -> ReplicationError:
        return score_runs(self.problem, self.config, results)

    def evaluate(self, evaluator: Evaluator, values: Mapping[str, float], link: str) -> ReplicationError:
        """Score one given point now, outside the search (not journaled, no optimizer told),
        with the search's seeds: e.g. the known true emulator of a synthetic target, whose f
        is the measured noise floor."""
        return score_emulator(self.problem, self.config, evaluator,
                              emulator_of(values, link, emulator_seed(self.config.seed, link)))

    def _finish(self, candidate: Candidate, search: Search, session_start: float) -> None:
        """Score a finished candidate, tell the optimizer, journal it (fsync) — in that order,
        before anything new is proposed."""
        error = self.score(candidate.results)
        noise = _clean(error.noise)
        search.optimizer.tell([candidate.x], [error.f], [math.nan if noise is None else noise])
        told = len(search.records) + 1
        if not search.confident and STOP_AFTER * self.config.budget <= told < self.config.budget:
            search.confident = search.optimizer.improvement_ruled_out()
        finished = time.time()
        record = {
            "index": sum(len(s.records) for s in self.searches.values()),
            "link": search.link,
            "candidate": candidate.id,
            "x": [float(v) for v in candidate.x],
            "params": candidate.values,
            "emulator": candidate.emulator.mahimahi_command(),
            "seed": candidate.emulator.seed,
            "loss_seeds": sorted({s for m in candidate.results for s in m.loss_seeds}),
            "f": error.f,
            "noise": noise,
            "floor": _clean(error.floor),
            "errors_pct": {"tput": error.throughput, "delay": error.delay, "loss": error.loss},
            "schemes": scheme_table(error),
            "penalized": {str(k): v for k, v in error.penalized.items()},
            "runs": [m.to_json() for m in sorted(candidate.results, key=lambda m: (m.label, m.replicate))],
            "started_at": dt.datetime.fromtimestamp(candidate.started, dt.timezone.utc).isoformat(),
            "finished_at": dt.datetime.fromtimestamp(finished, dt.timezone.utc).isoformat(),
            "seconds": round(finished - candidate.started, 3),
            "elapsed_s": round(self.elapsed_before + time.monotonic() - session_start, 3),
            "phase": candidate.phase,
            "confident": search.confident,
        }
        append_journal(self.run_dir / JOURNAL, jsonable(record))
        search.records.append(record)
        search.ranges = ranges_of(search.optimizer, self.problem.space)
        self._latest.append({"link": search.link, "n": len(search.records), "f": error.f,
                             "noise": noise, "emulator": record["emulator"]})
        del search.running[candidate.id]

    def run(self, evaluator: Evaluator, progress: Progress | None = None) -> dict[str, Any]:
        """Evaluate until every search is stopped (budget, time, converged); write result.json."""
        session_start = time.monotonic()
        owner: dict[Any, Candidate] = {}  # ObjectRef -> its candidate
        slots = evaluator.slots
        for search in self.searches.values():
            if len(search.records) >= self.config.budget:
                search.stopped = "budget"
            if search.records:  # a resumed search: the live display shows them from the start
                search.ranges = ranges_of(search.optimizer, self.problem.space)
        try:
            while True:
                if self._deadline_passed(session_start):
                    for s in self.searches.values():
                        s.stopped = s.stopped or "time limit"
                # propose while a slot would otherwise idle
                waiting: set[str] = set()  # searches with nothing to propose until a tell
                while len(owner) < slots:
                    open_ = [s for s in self.searches.values()
                             if self._want_more(s) and s.link not in waiting]
                    if not open_:
                        break
                    search = min(open_, key=lambda s: (len(s.records) + len(s.running),
                                                       LINK_KINDS.index(s.link)))
                    candidate = self._propose(search, evaluator)
                    if candidate is None:
                        waiting.add(search.link)
                        continue
                    owner.update({ref: candidate for ref in candidate.tasks})
                if not owner:
                    break
                for ref, metrics in evaluator.wait(list(owner), timeout=POLL_S):
                    candidate = owner.pop(ref)
                    task = candidate.tasks.pop(ref)
                    candidate.results.append(metrics if metrics is not None else lost(task))
                    if candidate.done:
                        self._finish(candidate, self.searches[candidate.link], session_start)
                if progress:
                    progress(self._progress(len(owner), session_start))
        except BaseException:
            # Ctrl-C, an input or host error: the running candidates are abandoned (a resume
            # proposes them again); their engines stop with their workers or at their deadline.
            evaluator.cancel(list(owner))
            raise
        for s in self.searches.values():
            if s.stopped is None:
                s.stopped = "budget"
        if progress:
            progress(self._progress(0, session_start))
        result = self.result()
        write_atomic(self.run_dir / RESULT, jsonable(result))
        return result

    def _progress(self, running_tasks: int, session_start: float) -> ProgressInfo:
        elapsed = self.elapsed_before + time.monotonic() - session_start
        done = {l: len(s.records) for l, s in self.searches.items()}
        total_done = sum(done.values())
        left = sum(max(self.config.budget - n, 0) for l, n in done.items()
                   if self.searches[l].stopped is None)
        # rough: the run's average time per evaluation so far, times what the budget has left
        eta = elapsed / total_done * left if total_done else None
        latest, self._latest = self._latest, []
        return ProgressInfo(done, self.config.budget, {l: s.best_f for l, s in self.searches.items()},
                            running_tasks, sum(len(s.running) for s in self.searches.values()),
                            elapsed, eta, {l: s.stopped for l, s in self.searches.items()}, latest,
                            {l: self._refining(s) for l, s in self.searches.items()},
                            {l: s.ranges for l, s in self.searches.items()})

    # -- the outcome

    def result(self) -> dict[str, Any]:
        """Per link kind the incumbent (the optimizer's choice: lowest model mean for GPs), its
        table, the ranges of values indistinguishable from it (`calibrate.ranges`), how many
        evaluations the refinement made and whether the stop rule held; the winner is the link
        kind whose incumbent has the lower observed f."""
        links: dict[str, Any] = {}
        for link, search in self.searches.items():
            if not search.records:
                links[link] = {"evaluations": 0, "stopped": search.stopped}
                continue
            best = search.optimizer.best()
            record = search.records[best.index]
            links[link] = {
                "evaluations": len(search.records), "stopped": search.stopped,
                "candidate": record["candidate"], "params": record["params"],
                "emulator": record["emulator"], "seed": record["seed"],
                "f": record["f"], "model_mean": best.mean, "noise": record["noise"],
                "floor": record["floor"], "errors_pct": record["errors_pct"],
                "schemes": record["schemes"], "best_observed_f": search.best_f,
                "refined": sum(r.get("phase") == "refine" for r in search.records),
                "confident": search.confident,
                **ranges_of(search.optimizer, self.problem.space).to_json(),
            }
        scored = {l: v["f"] for l, v in links.items() if "f" in v}
        winner = min(scored, key=scored.get) if scored else None  # type: ignore[arg-type]
        return {"format": "calibrate-result", "version": FORMAT_VERSION,
                "target": self.config.target, "winner": winner,
                "best": links.get(winner) if winner else None, "links": links,
                "dropped": dict(self.problem.dropped),
                "evaluations": sum(len(s.records) for s in self.searches.values()),
                "wall_s": round(max((r.get("elapsed_s", 0.0) for s in self.searches.values()
                                     for r in s.records), default=0.0), 3)}


def jsonable(value: Any) -> Any:
    """NaN/inf -> None, numpy scalars -> Python, tuples -> lists, for strict JSON."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return _clean(float(value))
    if isinstance(value, np.integer):
        return int(value)
    return value


def resume(run_dir: Path | str, evaluator: Evaluator, progress: Progress | None = None) -> dict[str, Any]:
    """Continue a calibration after a crash, Ctrl-C or kill -9 (nothing lost, nothing twice)."""
    return Calibration.open(run_dir).run(evaluator, progress)
