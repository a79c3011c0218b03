"""The calibration loop: optimizer ↔ Ray evaluations → journal → result.

One calibration searches each link kind (constant, Poisson deliveries) as its own search, with
its own optimizer over the same space, and compares the two at the end (the Pantheon paper's
method: one calibrated emulator per link kind, the better one wins).  Both searches share the
Ray slots: whenever fewer tasks are unfinished than the cluster has emulator slots, the search
with fewer evaluations asks its optimizer for one more candidate, so candidates are proposed
while others still run (asynchronous batches) and no slot idles.

The path of one evaluation: optimizer.ask(1) → unit point → `SearchSpace.to_values` →
`EmulatorConfig` → one Ray task per (scheme, replicate) (`calibrate.evaluation`) → when the
candidate's last task is back: `replication_error` → optimizer.tell → one `Evaluation`
appended to the journal and fsync'ed (`calibrate.runs.journal`) → only then the next ask.

Resume is reading the journal: `Calibration.open` rebuilds each optimizer by telling it the
journal's evaluations in order (the optimizers' proposals, and the refinement's, are a pure
function of their history and pending points, `calibrate.optimizers.base`).  Candidates that
were running when the run stopped are not in the journal, but every proposal is recorded before
its runs start (`RunDir.propose`): a resumed search runs those first, with the same ids and
points (pending in its optimizer again, `Optimizer.ask_among`), then proposes as the original
would have with them pending.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from calibrate import refinement
from calibrate.emulator import EmulatorConfig
from calibrate.evaluation import Evaluator, RunMetrics, RunTask, lost
from calibrate.objective import ReplicationError
from calibrate.optimizers import Optimizer, make_optimizer
from calibrate.ranges import Ranges, ranges_of
from calibrate.runs.config import (
    LINK_KINDS,
    Problem,
    RunConfig,
    emulator_of,
    emulator_seed,
    host_schemes,
    problem_of,
    registry_of,
    scheme_table,
    score_emulator,
    score_runs,
    tasks_of,
)
from calibrate.runs.journal import Evaluation, Proposal, RunDir, json_number
from calibrate.schemes import Registry, Scheme
from calibrate.targets.model import Target

RESULT_FORMAT = "calibrate-result"
RESULT_VERSION = 1

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
#: budget is its own sequence.  Each journal record says its phase ("search" or "refine") and
#: whether (b) held after it ("confident"), so a resumed search continues in the same phase.
STOP_AFTER = 0.5
REFINE_SHARE = 0.2
CONVERGED = "converged: improvement ruled out and the incumbent's neighbours evaluated"


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
    records: list[Evaluation] = field(default_factory=list)
    running: dict[int, Candidate] = field(default_factory=dict)
    stopped: str | None = None  # why it proposes no more
    confident: bool = False  # the model ruled out improvement elsewhere (rule above STOP_AFTER)
    ranges: Ranges | None = None  # values indistinguishable from the best, after the last tell
    interrupted: list[Proposal] = field(default_factory=list)  # to run again first (resume)

    @property
    def best_f(self) -> float | None:
        return min((r.f for r in self.records), default=None)


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

    directory: RunDir
    searches: dict[str, Search]
    elapsed_before: float = 0.0  # seconds spent by earlier sessions (resume)
    _next_id: int = 0
    _latest: list[dict[str, Any]] = field(default_factory=list)
    _schemes: Mapping[str, Scheme] | None = None  # this host's, found when first needed

    @property
    def run_dir(self) -> Path:
        return self.directory.path

    @property
    def config(self) -> RunConfig:
        return self.directory.config

    @property
    def target(self) -> Target:
        return self.directory.target

    @property
    def problem(self) -> Problem:
        return self.directory.problem

    # -- making and reopening

    @classmethod
    def start(cls, run_dir: Path | str, config: RunConfig, target: Target,
              registry: Registry | None = None) -> Calibration:
        """Derive the problem (`problem_of`) and write a new run directory."""
        RunDir.check_new(run_dir)
        registry = registry or registry_of(config)
        problem = problem_of(target, config, registry)
        schemes = host_schemes(problem, registry)  # refused here, before anything is written
        calibration = cls.of(RunDir.create(run_dir, config, target, problem), [])
        calibration._schemes = schemes
        return calibration

    @classmethod
    def open(cls, run_dir: Path | str, *, read_only: bool = False) -> Calibration:
        """Reopen a run directory to continue it, under its writer lock (`RunDir.writing`): a
        journal line torn by a crash is cut off, and the candidates that were running when it
        stopped are run again first.  `read_only` (export, inspection) takes no lock and leaves
        the files as they are: the run may still be writing its last line."""
        directory = RunDir.open(run_dir)
        if read_only:
            return cls.of(directory, directory.evaluations())
        with directory.writing():
            records = directory.evaluations(repair=True)
            return cls.of(directory, records, directory.unfinished(records, repair=True))

    @classmethod
    def of(cls, directory: RunDir, records: Sequence[Evaluation],
           unfinished: Sequence[Proposal] = ()) -> Calibration:
        """The loop as the journal `records` leave it: each search's optimizer told its
        evaluations in the order the original was told (= journal order); the `unfinished`
        proposals (`RunDir.unfinished`) are its searches' first candidates."""
        config, problem = directory.config, directory.problem
        start = problem.space.from_values(problem.warm_start, clip=True)
        options = {"n_initial": config.initial_design(problem.space.dim)}
        searches = {}
        for link in config.links:
            opt = make_optimizer(config.optimizer, problem.space.dim, seed=config.seed,
                                 warm_start=[start], **options)
            search = Search(link, opt)
            mine = [r for r in records if r.link == link]
            if mine:
                opt.tell([r.x for r in mine], [r.f for r in mine], [r.noise for r in mine])
                search.records = mine
                search.confident = any(r.confident for r in mine)
            search.interrupted = [p for p in unfinished if p.link == link]
            searches[link] = search
        elapsed = max((r.elapsed_s for r in records), default=0.0)
        next_id = max([r.candidate for r in records] + [p.candidate for p in unfinished],
                      default=-1) + 1
        return cls(directory, searches, elapsed, next_id)

    def schemes(self) -> Mapping[str, Scheme]:
        """This host's programs for the schemes the run scores (`host_schemes`), looked up when
        first needed: opening a run to export it never asks the host."""
        if self._schemes is None:
            self._schemes = host_schemes(self.problem, registry_of(self.config))
        return self._schemes

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
        """Ask for one candidate and submit its tasks: a candidate that was running when the
        run stopped first (resume).  None when the search has nothing to propose now: it
        converged (`stopped` says so), or its refinement waits for its running neighbours to
        tell where the incumbent is."""
        while search.interrupted:
            again = search.interrupted.pop(0)
            x = np.asarray(again.x, dtype=float)
            if search.optimizer.ask_among([x]):  # pending again; [] if evaluated or running
                return self._submit(search, evaluator, again.candidate, x, again.phase, again)
        refining = self._refining(search)
        xs = refinement.propose(search.optimizer, self.problem.space) if refining else []
        if refining and not xs and search.confident:
            if not search.running:
                search.stopped = CONVERGED
            return None
        x = xs[0] if xs else search.optimizer.ask(1)[0]
        self._next_id += 1
        return self._submit(search, evaluator, self._next_id - 1, x, "refine" if xs else "search")

    def _submit(self, search: Search, evaluator: Evaluator, candidate_id: int, x: np.ndarray,
                phase: str, recorded: Proposal | None = None) -> Candidate:
        """Record the proposal (unless `recorded` already), then submit its tasks."""
        values = self.problem.space.to_values(x)
        emulator = emulator_of(values, search.link, emulator_seed(self.config.seed, search.link))
        candidate = Candidate(candidate_id, search.link, x, values, emulator, {}, phase)
        if recorded is None:
            self.directory.propose(Proposal(
                candidate_id, search.link, tuple(float(v) for v in x), values, phase,
                dt.datetime.now(dt.UTC).isoformat()))
        for task in self.tasks(candidate.id, emulator):
            candidate.tasks[evaluator.submit(task)] = task
        search.running[candidate.id] = candidate
        return candidate

    def tasks(self, candidate: int, emulator: EmulatorConfig) -> list[RunTask]:
        return tasks_of(self.problem, self.config, self.schemes(), candidate, emulator)

    def score(self, results: Sequence[RunMetrics]) -> ReplicationError:
        return score_runs(self.problem, self.config, results)

    def evaluate(self, evaluator: Evaluator, values: Mapping[str, float], link: str) -> ReplicationError:
        """Score one given point now, outside the search (not journaled, no optimizer told),
        with the search's seeds: e.g. the known true emulator of a synthetic target, whose f
        is the measured noise floor."""
        return score_emulator(self.problem, self.config, self.schemes(), evaluator,
                              emulator_of(values, link, emulator_seed(self.config.seed, link)))

    def _finish(self, candidate: Candidate, search: Search, session_start: float) -> None:
        """Score a finished candidate, tell the optimizer, journal it (fsync) — in that order,
        before anything new is proposed."""
        error = self.score(candidate.results)
        noise = json_number(error.noise)
        search.optimizer.tell([candidate.x], [error.f], [math.nan if noise is None else noise])
        told = len(search.records) + 1
        if not search.confident and STOP_AFTER * self.config.budget <= told < self.config.budget:
            search.confident = search.optimizer.improvement_ruled_out()
        finished = time.time()
        record = Evaluation(
            index=sum(len(s.records) for s in self.searches.values()),
            link=search.link,
            candidate=candidate.id,
            x=tuple(float(v) for v in candidate.x),
            params=candidate.values,
            emulator=candidate.emulator.mahimahi_command(),
            seed=candidate.emulator.trace_seed,
            loss_seeds=tuple(sorted({s for m in candidate.results for s in m.loss_seeds})),
            f=error.f,
            noise=noise,
            floor=json_number(error.floor),
            errors_pct={"tput": error.throughput, "delay": error.delay, "loss": error.loss},
            schemes=tuple(scheme_table(error)),
            penalized={str(k): v for k, v in error.penalized.items()},
            runs=tuple(m.to_json() for m in sorted(candidate.results, key=lambda m: (m.label, m.replicate))),
            started_at=dt.datetime.fromtimestamp(candidate.started, dt.UTC).isoformat(),
            finished_at=dt.datetime.fromtimestamp(finished, dt.UTC).isoformat(),
            seconds=round(finished - candidate.started, 3),
            elapsed_s=round(self.elapsed_before + time.monotonic() - session_start, 3),
            phase=candidate.phase,
            confident=search.confident,
        )
        # the record as the journal holds it (NaN as None, plain numbers), so a search that
        # runs on and one resumed from the journal see the same
        record = Evaluation.from_json(record.to_json())
        self.directory.append(record)
        search.records.append(record)
        search.ranges = ranges_of(search.optimizer, self.problem.space, self.target.evidence)
        self._latest.append({"link": search.link, "n": len(search.records), "f": error.f,
                             "noise": noise, "emulator": record.emulator})
        del search.running[candidate.id]

    def run(self, evaluator: Evaluator, progress: Progress | None = None) -> dict[str, Any]:
        """Evaluate until every search is stopped (budget, time, converged); write result.json."""
        with self.directory.writing():
            return self._run(evaluator, progress)

    def _run(self, evaluator: Evaluator, progress: Progress | None) -> dict[str, Any]:
        session_start = time.monotonic()
        owner: dict[Any, Candidate] = {}  # ObjectRef -> its candidate
        slots = evaluator.slots
        for search in self.searches.values():
            if len(search.records) >= self.config.budget:
                search.stopped = "budget"
            if search.records:  # a resumed search: the live display shows them from the start
                search.ranges = ranges_of(search.optimizer, self.problem.space, self.target.evidence)
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
        self.directory.write_result(result)
        return result

    def _progress(self, running_tasks: int, session_start: float) -> ProgressInfo:
        elapsed = self.elapsed_before + time.monotonic() - session_start
        done = {link: len(s.records) for link, s in self.searches.items()}
        total_done = sum(done.values())
        left = sum(max(self.config.budget - n, 0) for link, n in done.items()
                   if self.searches[link].stopped is None)
        # rough: the run's average time per evaluation so far, times what the budget has left
        eta = elapsed / total_done * left if total_done else None
        latest, self._latest = self._latest, []
        return ProgressInfo(done, self.config.budget, {link: s.best_f for link, s in self.searches.items()},
                            running_tasks, sum(len(s.running) for s in self.searches.values()),
                            elapsed, eta, {link: s.stopped for link, s in self.searches.items()}, latest,
                            {link: self._refining(s) for link, s in self.searches.items()},
                            {link: s.ranges for link, s in self.searches.items()})

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
                "candidate": record.candidate, "params": dict(record.params),
                "emulator": record.emulator, "seed": record.seed,
                "f": record.f, "model_mean": best.mean, "noise": record.noise,
                "floor": record.floor, "errors_pct": dict(record.errors_pct),
                "schemes": list(record.schemes), "best_observed_f": search.best_f,
                "refined": sum(r.phase == "refine" for r in search.records),
                "confident": search.confident,
                **ranges_of(search.optimizer, self.problem.space, self.target.evidence).to_json(),
            }
        scored = {link: v["f"] for link, v in links.items() if "f" in v}
        winner = min(scored, key=scored.__getitem__) if scored else None
        return {"format": RESULT_FORMAT, "version": RESULT_VERSION,
                "target": self.config.target, "winner": winner,
                "best": links.get(winner) if winner else None, "links": links,
                "dropped": dict(self.problem.dropped),
                "evaluations": sum(len(s.records) for s in self.searches.values()),
                "wall_s": round(max((r.elapsed_s for s in self.searches.values()
                                     for r in s.records), default=0.0), 3)}
