"""What the studies share: runs made of many searches over one journal of evaluations.

A study is a run like a calibration (DESIGN.md, "Runs: one shape for every kind"): a run
directory (`calibrate.runs.journal.RunDir`) whose run.json also names its kind ("kind") and
holds the study's settings ("study"), the same journal of `Evaluation` records, a result.json
and an export.  Two kinds are built on this module:

- `calibrate.runs.loo` — leave-one-out cross-validation: one search per held-out scheme
  (a fold) and link kind, every evaluation told to every fold of its link kind;
- `calibrate.runs.ablation` — nested models: one search per step (and per candidate parameter
  of a greedy step), each warm-started from the previous step's best point.

An evaluation is exactly a calibration's: every scheme of the problem run `replicates` times
over one candidate emulator as Ray tasks (`calibrate.runs.config.tasks_of`), scored over the
whole problem (`score_runs`), appended to the journal and fsync'ed before anything new is
proposed.  Its record's "study" tags say which search proposed it ("search") and which searches'
models ruled out improvement after it ("confident"), plus what the kind adds; a search's own f
of the record (a fold's f over its schemes) is computed again from the record's runs whenever
it is needed, so the journal holds the runs once and every reader scores them alike.

The loop (`Study.run`) is the calibration's (`calibrate.runs.loop`): whenever fewer tasks run
than Ray has emulator slots, the open search that comes first (`Study.priority`) proposes one
candidate — its warm start, its Sobol design, its model's pick, and in the last `REFINE_SHARE` of
its budget (or once its model rules out improvement elsewhere) its incumbent's neighbours
(`calibrate.refinement`) — with the same stop rule and the same journal.  A proposal that is
exactly a point already running for the same searches is not run again: the search keeps it
pending and is told it with the others when it finishes.  When no search is open and nothing
runs, the study may open new searches (`Study.advance`: an ablation's next step).

Resume is reading the journal: `open` rebuilds every search by telling it, in journal order,
the records it was told (the optimizers' proposals are a pure function of their history), with
the "confident" flags the records carry.  As in a calibration, every proposal is recorded before
its runs start (`RunDir.propose`, tagged with its search), so the candidates that were running
when a study stopped are the first its searches run again, with the same ids and points.
Results and exports view each search as a calibration (`Study.view`: a `Calibration` over that
search's space and scored problem), so they have a calibration's shape and its export.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from calibrate import refinement
from calibrate.evaluation import Evaluator, RunMetrics, lost
from calibrate.objective import ReplicationError
from calibrate.optimizers.base import find_point
from calibrate.ranges import ranges_of
from calibrate.runs.config import (
    Problem,
    RunConfig,
    emulator_of,
    emulator_seed,
    host_schemes,
    registry_of,
    scheme_table,
    score_runs,
    tasks_of,
)
from calibrate.runs.journal import Evaluation, Proposal, RunDir, json_number
from calibrate.runs.loop import (
    CONVERGED,
    POLL_S,
    REFINE_SHARE,
    STOP_AFTER,
    Calibration,
    Candidate,
    Progress,
    ProgressInfo,
    Search,
)
from calibrate.schemes import Scheme
from calibrate.space import SearchSpace

#: what `_propose` answers when it submitted nothing
WAIT = "wait"  # nothing to propose until a running candidate is told (or the search ended)
SHARED = "shared"  # its proposal is running already for the searches it shares evaluations with


@dataclass(eq=False, kw_only=True)
class StudySearch(Search):
    """One optimizer of a study over its own space, scoring its own problem: a fold of a link
    kind (leave-one-out), a step's model (ablation).  `records` are what it was told, in order,
    each with its own f; the first `carried` of them were another search's evaluations (an
    ablation's warm start) and do not count against its `budget`."""

    name: str  # unique in the study; the journal's "search" tag
    space: SearchSpace
    problem: Problem  # what its f scores
    budget: int  # evaluations it may count
    order: int = 0  # ties of `Study.priority`
    carried: int = 0
    proposed: int = 0  # candidates it proposed (journaled or running)

    @property
    def counted(self) -> int:
        return len(self.records) - self.carried


def rescored(record: Evaluation, problem: Problem, config: RunConfig) -> Evaluation:
    """The record with f, its noise and table over `problem`'s schemes only (a fold's view),
    from the record's runs; as the journal would hold it."""
    error = score_part(problem, config, runs_of(record))
    return Evaluation.from_json(replace(
        record, f=error.f, noise=json_number(error.noise), floor=json_number(error.floor),
        errors_pct={"tput": error.throughput, "delay": error.delay, "loss": error.loss},
        schemes=tuple(scheme_table(error)),
        penalized={str(k): v for k, v in error.penalized.items()}).to_json())


def runs_of(record: Evaluation) -> list[RunMetrics]:
    return [RunMetrics.from_json(record.candidate, run) for run in record.runs]


def score_part(problem: Problem, config: RunConfig, runs: Sequence[RunMetrics]) -> ReplicationError:
    """`score_runs` over a part of a problem's schemes (`part_of`): the runs of the others are
    left out."""
    groups = problem.sharing()
    return score_runs(problem, config, [m for m in runs if m.label in groups])


def part_of(problem: Problem, labels: Sequence[str]) -> Problem:
    """The problem scored over the target labels `labels` only (same space, same runs)."""
    keep = set(labels)
    return replace(problem,
                   real={k: v for k, v in problem.real.items()
                         if (k[0] if isinstance(k, tuple) else k) in keep},
                   schemes={label: name for label, name in problem.schemes.items() if label in keep})


@dataclass
class Study:
    """A study's run directory, its searches and the loop that fills its journal (module
    docstring).  A kind supplies its searches and how a journaled record is told to them."""

    kind: ClassVar[str]

    directory: RunDir
    records: list[Evaluation] = field(default_factory=list)  # the journal, in order
    elapsed_before: float = 0.0
    _next_id: int = 0
    _running: dict[int, tuple[Candidate, StudySearch]] = field(default_factory=dict)
    _latest: list[dict[str, Any]] = field(default_factory=list)
    _schemes: Mapping[str, Scheme] | None = None
    _unfinished: list[Proposal] = field(default_factory=list)  # running when it stopped (resume)

    @property
    def config(self) -> RunConfig:
        return self.directory.config

    @property
    def problem(self) -> Problem:
        return self.directory.problem

    @property
    def settings(self) -> Mapping[str, Any]:
        """The study's settings as run.json holds them."""
        return self.directory.meta.get("study", {})

    def schemes(self) -> Mapping[str, Scheme]:
        """This host's programs for the schemes scored, looked up when first needed."""
        if self._schemes is None:
            self._schemes = host_schemes(self.problem, registry_of(self.config))
        return self._schemes

    # -- what a kind supplies

    @classmethod
    def open(cls, run_dir: Path | str, *, read_only: bool = False) -> Study:
        """Reopen a study of this kind to continue it, under its writer lock (`RunDir.writing`):
        a journal line torn by a crash is cut off, and the candidates that were running when it
        stopped are run again first.  `read_only` takes no lock and leaves the files as they
        are: the study may still be writing."""
        directory = RunDir.open(run_dir, cls.kind)
        if read_only:
            return cls.of(directory, directory.evaluations())
        with directory.writing():
            records = directory.evaluations(repair=True)
            return cls.of(directory, records, directory.unfinished(records, repair=True))

    @classmethod
    def of(cls, directory: RunDir, records: Sequence[Evaluation],
           unfinished: Sequence[Proposal] = ()) -> Study:
        """The study as the journal `records` leave it; the `unfinished` proposals
        (`RunDir.unfinished`) are their searches' first candidates."""
        raise NotImplementedError

    def _resumed(self, records: Sequence[Evaluation], unfinished: Sequence[Proposal]) -> None:
        """What every kind's `of` sets from the journal."""
        self.elapsed_before = max((r.elapsed_s for r in records), default=0.0)
        self._next_id = max([r.candidate for r in records] + [p.candidate for p in unfinished],
                            default=-1) + 1
        self._unfinished = list(unfinished)

    def interrupted_of(self, search: StudySearch) -> list[Proposal]:
        """The proposals `search` made that were running when the study stopped."""
        return [p for p in self._unfinished
                if p.study.get("search") == search.name and p.link == search.link]

    def searches(self) -> list[StudySearch]:
        """Every search made so far, in the order results list them."""
        raise NotImplementedError

    def open_searches(self) -> list[StudySearch]:
        """The searches that may propose now."""
        return [s for s in self.searches() if s.stopped is None and self.left(s) > 0]

    def priority(self, search: StudySearch) -> tuple[Any, ...]:
        """Which open search proposes first (lowest)."""
        return (search.counted + len(self.running_for(search)), search.order)

    def running_for(self, search: StudySearch) -> list[Candidate]:
        """The running candidates `search` will be told when they finish."""
        return [c for c, s in self._running.values() if s is search]

    def tell(self, record: Evaluation, proposer: StudySearch) -> dict[str, Any]:
        """Tell a journaled-to-be record to the searches it concerns; the tags it adds."""
        raise NotImplementedError

    def advance(self) -> bool:
        """Open new searches once every search is done and nothing runs; False: the study is
        over."""
        return False

    def result(self) -> dict[str, Any]:
        raise NotImplementedError

    # -- the searches' bookkeeping

    def left(self, search: StudySearch) -> int:
        return search.budget - search.counted - len(self.running_for(search))

    def learn(self, search: StudySearch, record: Evaluation, *, x: Any = None, counted: bool = True,
              confident: bool | None = None) -> None:
        """Tell `search` one record (already its view: its own f) at `x` (default: the record's
        point): its optimizer, its records, and its stop rule — checked (`confident` None: a
        live tell) or as the journal says."""
        search.optimizer.tell([record.x if x is None else x], [record.f],
                              [math.nan if record.noise is None else record.noise])
        search.records.append(record)
        if not counted:
            search.carried += 1
        if confident is not None:
            search.confident = search.confident or confident
        elif not search.confident and STOP_AFTER * search.budget <= search.counted < search.budget:
            search.confident = search.optimizer.improvement_ruled_out()

    def replay(self, search: StudySearch, records: Sequence[Evaluation]) -> None:
        """Tell a rebuilt search the journal's `records` (its views, points of its space) in
        order, with the "confident" flags they carry."""
        for record in records:
            self.learn(search, record, confident=search.name in record.study.get("confident", ()))
            if record.study.get("search") == search.name:
                search.proposed += 1

    # -- the loop

    def _refining(self, search: StudySearch) -> bool:
        opt = search.optimizer
        return (opt.model_based and opt.design_done
                and (search.confident or self.left(search) <= round(REFINE_SHARE * search.budget)))

    def _propose(self, search: StudySearch, evaluator: Evaluator) -> Candidate | str:
        """Ask `search` for one candidate and submit its tasks — one that was running when the
        study stopped first (resume); or WAIT (nothing to propose now: it converged, or its
        refinement waits for running candidates), or SHARED (the point already runs for it)."""
        while search.interrupted:
            again = search.interrupted.pop(0)
            x = np.asarray(again.x, dtype=float)
            if search.optimizer.ask_among([x]):  # pending again; [] if evaluated or running
                return self._submit(search, evaluator, again.candidate, x, again.phase, again)
        refining = self._refining(search)
        xs = refinement.propose(search.optimizer, search.space) if refining else []
        if refining and not xs and search.confident:
            if not self.running_for(search):
                search.stopped = CONVERGED
            return WAIT
        x = xs[0] if xs else search.optimizer.ask(1)[0]
        if find_point(x, [c.x for c in self.running_for(search)]) >= 0:
            return SHARED  # pending in its optimizer, told with the running candidate
        self._next_id += 1
        return self._submit(search, evaluator, self._next_id - 1, x, "refine" if xs else "search")

    def _submit(self, search: StudySearch, evaluator: Evaluator, candidate_id: int, x: np.ndarray,
                phase: str, recorded: Proposal | None = None) -> Candidate:
        """Record the proposal (unless `recorded` already), then submit its tasks."""
        values = search.space.to_values(x)
        emulator = emulator_of(values, search.link, emulator_seed(self.config.seed, search.link))
        candidate = Candidate(candidate_id, search.link, x, values, emulator, {}, phase)
        if recorded is None:
            self.directory.propose(Proposal(
                candidate_id, search.link, tuple(float(v) for v in x), values, phase,
                dt.datetime.now(dt.UTC).isoformat(), {"search": search.name}))
        for task in tasks_of(self.problem, self.config, self.schemes(), candidate.id, emulator):
            candidate.tasks[evaluator.submit(task)] = task
        self._running[candidate.id] = (candidate, search)
        search.proposed += 1
        return candidate

    def _finish(self, candidate: Candidate, search: StudySearch, session_start: float) -> None:
        """Score a finished candidate over the whole problem, tell the searches it concerns,
        journal it (fsync) — before anything new is proposed."""
        del self._running[candidate.id]
        error = score_runs(self.problem, self.config, candidate.results)
        finished = time.time()
        record = Evaluation(
            index=len(self.records), link=search.link, candidate=candidate.id,
            x=tuple(float(v) for v in candidate.x), params=candidate.values,
            emulator=candidate.emulator.mahimahi_command(), seed=candidate.emulator.trace_seed,
            loss_seeds=tuple(sorted({s for m in candidate.results for s in m.loss_seeds})),
            f=error.f, noise=json_number(error.noise), floor=json_number(error.floor),
            errors_pct={"tput": error.throughput, "delay": error.delay, "loss": error.loss},
            schemes=tuple(scheme_table(error)),
            penalized={str(k): v for k, v in error.penalized.items()},
            runs=tuple(m.to_json() for m in sorted(candidate.results, key=lambda m: (m.label, m.replicate))),
            started_at=dt.datetime.fromtimestamp(candidate.started, dt.UTC).isoformat(),
            finished_at=dt.datetime.fromtimestamp(finished, dt.UTC).isoformat(),
            seconds=round(finished - candidate.started, 3),
            elapsed_s=round(self.elapsed_before + time.monotonic() - session_start, 3),
            phase=candidate.phase, study={"search": search.name})
        # as the journal holds it, so a study that runs on and one resumed see the same
        record = Evaluation.from_json(record.to_json())
        tags = self.tell(record, search)
        record = Evaluation.from_json(replace(record, confident=search.confident,
                                              study={**record.study, **tags}).to_json())
        self.directory.append(record)
        self.records.append(record)
        evidence = self.directory.target.evidence
        if evidence is not None:  # only what the search fits: a fold never reads its held-out scheme
            evidence = evidence.of_schemes(search.problem.schemes)
        search.ranges = ranges_of(search.optimizer, search.space, evidence)
        self._latest.append({"link": search.name, "n": len(self.records), "f": record.f,
                             "noise": record.noise, "emulator": record.emulator})

    def _deadline_passed(self, session_start: float) -> bool:
        limit = self.config.time_limit_s
        return limit is not None and self.elapsed_before + time.monotonic() - session_start >= limit

    def run(self, evaluator: Evaluator, progress: Progress | None = None) -> dict[str, Any]:
        """Evaluate until every search is stopped (budget, time, converged) and the study has
        nothing more to open; write result.json."""
        with self.directory.writing():
            return self._run(evaluator, progress)

    def _run(self, evaluator: Evaluator, progress: Progress | None) -> dict[str, Any]:
        session_start = time.monotonic()
        owner: dict[Any, Candidate] = {}  # ObjectRef -> its candidate
        timed_out = False
        try:
            while True:
                if self._deadline_passed(session_start):
                    timed_out = True
                    for s in self.searches():
                        s.stopped = s.stopped or "time limit"
                waiting: set[str] = set()  # searches with nothing to propose until a tell
                shared: dict[str, int] = {}  # proposals of a search that were running already
                while len(owner) < evaluator.slots:
                    # a search whose point already runs asks again, at most once per running point
                    open_ = [s for s in self.open_searches() if s.name not in waiting
                             and shared.get(s.name, 0) <= len(self.running_for(s))]
                    if not open_:
                        break
                    search = min(open_, key=self.priority)
                    answer = self._propose(search, evaluator)
                    if isinstance(answer, Candidate):
                        owner.update({ref: answer for ref in answer.tasks})
                    elif answer == SHARED:
                        shared[search.name] = shared.get(search.name, 0) + 1
                    else:
                        waiting.add(search.name)
                if not owner:
                    if not timed_out and self.advance():
                        continue
                    break
                for ref, metrics in evaluator.wait(list(owner), timeout=POLL_S):
                    candidate = owner.pop(ref)
                    task = candidate.tasks.pop(ref)
                    candidate.results.append(metrics if metrics is not None else lost(task))
                    if candidate.done:
                        self._finish(candidate, self._running[candidate.id][1], session_start)
                if progress:
                    progress(self._progress(len(owner), session_start))
        except BaseException:
            # Ctrl-C, an input or host error: the running candidates are abandoned (a resume
            # proposes them again)
            evaluator.cancel(list(owner))
            self._running.clear()
            raise
        for s in self.searches():
            s.stopped = s.stopped or "budget"
        if progress:
            progress(self._progress(0, session_start))
        result = self.result()
        self.directory.write_result(result)
        return result

    def _progress(self, running_tasks: int, session_start: float) -> ProgressInfo:
        elapsed = self.elapsed_before + time.monotonic() - session_start
        searches = self.searches()
        left = sum(max(self.left(s), 0) for s in searches if s.stopped is None)
        done = len(self.records)
        eta = elapsed / done * left if done and left else None
        latest, self._latest = self._latest, []
        return ProgressInfo({s.name: s.counted for s in searches},
                            max((s.budget for s in searches), default=0),
                            {s.name: s.best_f for s in searches}, running_tasks, len(self._running),
                            elapsed, eta, {s.name: s.stopped for s in searches}, latest,
                            {s.name: self._refining(s) for s in searches},
                            {s.name: s.ranges for s in searches})

    # -- results

    def view(self, searches: Mapping[str, StudySearch], problem: Problem) -> Calibration:
        """The searches (link kind -> search) as a calibration over `problem` and their space:
        `Calibration.result` gives their result, `calibrate.export` exports it."""
        space = next(iter(searches.values())).space
        meta = {**self.directory.meta, "space": {"bounds": {k: list(v) for k, v in space.bounds.items()},
                                                 "fixed": dict(space.fixed), "free": list(space.free)}}
        directory = replace(self.directory, problem=replace(problem, space=space), meta=meta)
        return Calibration(directory, dict(searches), self.elapsed_before)

    def wall_s(self) -> float:
        return round(max((r.elapsed_s for r in self.records), default=0.0), 3)


def common_result(study: Study, fmt: str) -> dict[str, Any]:
    """What every study's result.json starts with."""
    return {"format": fmt, "version": 1, "kind": study.kind, "target": study.config.target,
            "evaluations": len(study.records), "wall_s": study.wall_s(),
            "replicates": study.config.replicates, "runtime_s": study.config.runtime_s,
            "budget": study.config.budget, "dropped": dict(study.problem.dropped)}
