"""The run controller: the one loop that fills a run directory, for every kind of run.

A run is a set of searches over one journal of evaluations.  Each search (`Search`) is an
optimizer over a space, scoring a problem, with a budget; a kind of run (`Run`'s subclasses,
registered in `calibrate.runs.kinds`) says which searches it has, how a finished evaluation is
told to them, and what its result is:

- a calibration (`calibrate.runs.calibration`): one search per link kind, over the whole problem;
- leave-one-out (`calibrate.runs.loo`): one search per held-out scheme and link kind, every
  evaluation told to every search of its link kind;
- an ablation (`calibrate.runs.ablation`): nested models, one step's searches at a time.

The loop (`Run.run`) works on candidates, each known by its id: whenever fewer tasks run than
the evaluator has emulator slots, the open search that comes first (`Run.priority`) proposes one
candidate (`_propose`): its warm start, its Sobol design, its model's pick, and in the last
`REFINE_SHARE` of its budget (or once its model rules out improvement elsewhere) its
incumbent's neighbours (`calibrate.refinement`).  The proposal is recorded (`RunDir.propose`)
before one Ray task per (scheme, replicate) is submitted (`calibrate.runs.evaluate.tasks_of`).
When a candidate's last task is back, `_finish` scores it over the whole problem, tells the
searches it concerns (`Run.tell`) and appends one `Evaluation` to the journal, fsync'ed, before
anything new is proposed.  A proposal that is exactly a point already running for the same
search is not run again: the search keeps it pending and is told it with the running one.
When no search is open and nothing runs, the kind may open new searches (`Run.advance`).

How a search spends its budget: it searches the whole space with its optimizer until (a)
`REFINE_SHARE` of its budget is left (rounded; the last 5 of 24), or (b) earlier, its model is
confident that no point beats the incumbent by more than the measured noise
(`Optimizer.improvement_ruled_out`, in `calibrate.optimizers.base`), checked after each
evaluation once `STOP_AFTER` of the budget is spent (a GP fitted on a handful of points can be
confidently wrong).  It never stops merely because the expected improvement at its proposals is
small.  What is left of the budget goes to the local refinement: the incumbent's not yet
evaluated neighbours, the model's lowest posterior means first, following the incumbent as it
moves.  When every neighbour of the incumbent has been evaluated, a search that reached (b)
ends (`CONVERGED`); one that reached (a) takes its optimizer's proposals again.  Random search
has no model: no (b), no refinement, its whole budget is its own sequence.  Each journal record
says its phase ("search" or "refine") and whether (b) held after it ("confident").

Resume is reading the journal: `Run.open` rebuilds every search by telling it, in journal
order, the records it was told (the optimizers' proposals, and the refinement's, are a pure
function of their history and pending points), with the "confident" flags the records carry.
The candidates that were running when the run stopped are in proposals.jsonl but not in the
journal: each search runs its own again first, with the same ids and points (pending in its
optimizer again, `Optimizer.ask_among`), then proposes as the original would have.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from calibrate import refinement
from calibrate.emulator import EmulatorConfig
from calibrate.evaluation import RunMetrics, RunTask, lost
from calibrate.evidence import PathEvidence
from calibrate.objective import ReplicationError
from calibrate.optimizers import Optimizer
from calibrate.optimizers.base import find_point
from calibrate.ranges import Ranges, ranges_of
from calibrate.runs.config import RunConfig, emulator_of, emulator_seed
from calibrate.runs.evaluate import host_schemes, scheme_table, score_runs, tasks_of
from calibrate.runs.journal import Evaluation, Proposal, RunDir, json_number
from calibrate.runs.problem import Problem, problem_of, registry_of
from calibrate.runs.progress import Finished, Progress, ProgressInfo, eta_s
from calibrate.schemes import Registry, Scheme
from calibrate.space import SearchSpace
from calibrate.targets.model import Target

if TYPE_CHECKING:  # a type only: the Ray client is imported by whoever starts a run, not here,
    # so that reading a run directory never loads it (tests/test_runs.py)
    from calibrate.cluster.evaluator import Evaluator

#: seconds between checks of the deadline and progress while tasks run
POLL_S = 0.5

#: the share of its budget after which a search's stop rule is checked, and the share it keeps
#: for its local refinement (module docstring)
STOP_AFTER = 0.5
REFINE_SHARE = 0.2
CONVERGED = "converged: improvement ruled out and the incumbent's neighbours evaluated"

#: what `_propose` answers when it submitted nothing
WAIT = "wait"  # nothing to propose until a running candidate is told (or the search ended)
SHARED = "shared"  # its proposal is running already for this search


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


@dataclass(eq=False, kw_only=True)
class Search:
    """One optimizer over its own space, scoring its own problem, and what it was told.
    `records` are its views of the journal's records, in the order it was told them (each with
    its own f); the first `carried` of them were another search's evaluations (an ablation's
    warm start) and do not count against its `budget`."""

    name: str  # unique in the run; the journal's "search" tag of a study
    link: str  # the link kind of the emulators it proposes
    optimizer: Optimizer
    space: SearchSpace
    problem: Problem  # what its f scores
    budget: int  # evaluations it may count
    evidence: PathEvidence | None = None  # the per-packet logs its ranges read
    order: int = 0  # ties of `Run.priority`
    carried: int = 0
    proposed: int = 0  # candidates it proposed (journaled or running)
    records: list[Evaluation] = field(default_factory=list)
    stopped: str | None = None  # why it proposes no more
    confident: bool = False  # its model ruled out improvement elsewhere (after STOP_AFTER)
    ranges: Ranges | None = None  # values indistinguishable from the best, after the last tell
    interrupted: list[Proposal] = field(default_factory=list)  # to run again first (resume)

    @property
    def counted(self) -> int:
        return len(self.records) - self.carried

    @property
    def best_f(self) -> float | None:
        return min((r.f for r in self.records), default=None)


@dataclass
class Run:
    """A run directory, its searches and the loop that fills its journal (module docstring).
    `start` a new one or `open` an existing one, then `run` it with an `Evaluator`.  A kind
    supplies its searches (`of`, `every_search`), how a record is told to them (`tell`), and
    its result."""

    kind: ClassVar[str]
    #: what the CLI calls a run of this kind, and one of its searches
    noun: ClassVar[str] = "study"
    search_noun: ClassVar[str] = "search"

    @property
    def title(self) -> str:
        """What a run of this kind is called where its kind must be named ("loo study")."""
        return f"{self.kind} {self.noun}"
    #: a resumed run's display shows its searches' ranges from its first refresh
    ranges_on_resume: ClassVar[bool] = False

    directory: RunDir
    records: list[Evaluation] = field(default_factory=list)  # the journal, in order
    elapsed_before: float = 0.0  # seconds spent by earlier sessions (resume)
    _next_id: int = 0
    _running: dict[int, tuple[Candidate, Search]] = field(default_factory=dict)
    _latest: list[Finished] = field(default_factory=list)
    _schemes: Mapping[str, Scheme] | None = None  # this host's, found when first needed
    _unfinished: list[Proposal] = field(default_factory=list)  # running when it stopped (resume)

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

    @property
    def settings(self) -> Mapping[str, Any]:
        """The kind's own settings as run.json holds them ("study")."""
        return self.directory.meta.get("study", {})

    def schemes(self) -> Mapping[str, Scheme]:
        """This host's programs for the schemes the run scores (`host_schemes`), looked up when
        first needed: opening a run to export it never asks the host."""
        if self._schemes is None:
            self._schemes = host_schemes(self.problem, registry_of(self.config))
        return self._schemes

    # -- making and reopening

    @classmethod
    def start(cls, run_dir: Path | str, config: RunConfig, target: Target, *,
              registry: Registry | None = None, **options: Any) -> Self:
        """Derive the problem (`problem_of`, then the kind's `derive`) and write a new run
        directory; every input is checked before anything is written."""
        cls.check(config, **options)
        RunDir.check_new(run_dir)
        registry = registry or registry_of(config)
        problem, settings = cls.derive(problem_of(target, config, registry), config, **options)
        schemes = host_schemes(problem, registry)  # refused here, before anything is written
        run = cls.of(RunDir.create(run_dir, config, target, problem, kind=cls.kind, study=settings), [])
        run._schemes = schemes
        return run

    @classmethod
    def check(cls, config: RunConfig, **options: Any) -> None:
        """Refuse settings this kind cannot run, before the run directory is looked at."""

    @classmethod
    def derive(cls, problem: Problem, config: RunConfig,
               **options: Any) -> tuple[Problem, Mapping[str, Any] | None]:
        """The problem this kind searches, and its settings for run.json ("study"; None: none)."""
        return problem, None

    @classmethod
    def open(cls, run_dir: Path | str, *, read_only: bool = False) -> Self:
        """Reopen a run of this kind to continue it, under its writer lock (`RunDir.writing`):
        a journal line torn by a crash is cut off, and the candidates that were running when it
        stopped are run again first.  `read_only` (export, inspection) takes no lock and leaves
        the files as they are: the run may still be writing its last line."""
        directory = RunDir.open(run_dir, cls.kind)
        if read_only:
            return cls.of(directory, directory.evaluations())
        with directory.writing():
            records = directory.evaluations(repair=True)
            return cls.of(directory, records, directory.unfinished(records, repair=True))

    @classmethod
    def of(cls, directory: RunDir, records: Sequence[Evaluation],
           unfinished: Sequence[Proposal] = ()) -> Self:
        """The run as the journal `records` leave it; the `unfinished` proposals
        (`RunDir.unfinished`) are their searches' first candidates."""
        run = cls(directory, list(records))
        run.elapsed_before = max((r.elapsed_s for r in records), default=0.0)
        run._next_id = max([r.candidate for r in records] + [p.candidate for p in unfinished],
                           default=-1) + 1
        run._unfinished = list(unfinished)
        run.rebuild()
        return run

    def rebuild(self) -> None:
        """Make the kind's searches from the journal (`self.records`), each told its records
        (`replay`) and given its interrupted proposals (`interrupted_of`)."""
        raise NotImplementedError

    def tags(self, search: Search) -> dict[str, Any]:
        """What a proposal and a journal record of `search` are tagged with ("study")."""
        return {"search": search.name}

    def interrupted_of(self, search: Search) -> list[Proposal]:
        """The proposals `search` made that were running when the run stopped."""
        tags = self.tags(search).items()
        return [p for p in self._unfinished if p.link == search.link and tags <= p.study.items()]

    # -- what a kind supplies

    def every_search(self) -> list[Search]:
        """Every search made so far, in the order results list them."""
        raise NotImplementedError

    def open_searches(self) -> list[Search]:
        """The searches that may propose now."""
        return [s for s in self.every_search() if s.stopped is None and self.left(s) > 0]

    def priority(self, search: Search) -> tuple[Any, ...]:
        """Which open search proposes first (lowest)."""
        return (search.counted + len(self.running_for(search)), search.order)

    def running_for(self, search: Search) -> list[Candidate]:
        """The running candidates `search` will be told when they finish."""
        return [c for c, s in self._running.values() if s is search]

    def tell(self, record: Evaluation, proposer: Search) -> dict[str, Any]:
        """Tell a record about to be journaled to the searches it concerns; the tags it adds."""
        raise NotImplementedError

    def advance(self) -> bool:
        """Open new searches once every search is done and nothing runs; False: the run is
        over."""
        return False

    def result(self) -> dict[str, Any]:
        """The outcome, as result.json holds it."""
        raise NotImplementedError

    # -- the searches' bookkeeping

    def left(self, search: Search) -> int:
        return search.budget - search.counted - len(self.running_for(search))

    def learn(self, search: Search, record: Evaluation, *, x: Any = None, counted: bool = True,
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

    def replay(self, search: Search, records: Sequence[Evaluation]) -> None:
        """Tell a rebuilt search the journal's `records` (its views, points of its space) in
        order, with the "confident" flags they carry: a study's record lists the searches whose
        models were confident after it, a calibration's record says it of its own search."""
        for record in records:
            confident = (search.name in record.study.get("confident", ()) if record.study
                         else record.confident)
            self.learn(search, record, confident=confident)
            if record.study.get("search") == search.name:
                search.proposed += 1

    # -- the loop

    def _refining(self, search: Search) -> bool:
        """Whether the search's next candidate comes from its local refinement (module
        docstring)."""
        opt = search.optimizer
        return (opt.model_based and opt.design_done
                and (search.confident or self.left(search) <= round(REFINE_SHARE * search.budget)))

    def _propose(self, search: Search, evaluator: Evaluator) -> Candidate | str:
        """Ask `search` for one candidate and submit its tasks — one that was running when the
        run stopped first (resume); or WAIT (nothing to propose now: it converged, or its
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

    def _submit(self, search: Search, evaluator: Evaluator, candidate_id: int, x: np.ndarray,
                phase: str, recorded: Proposal | None = None) -> Candidate:
        """Record the proposal (unless `recorded` already), then submit its tasks."""
        values = search.space.to_values(x)
        emulator = emulator_of(values, search.link, emulator_seed(self.config.seed, search.link))
        candidate = Candidate(candidate_id, search.link, x, values, emulator, {}, phase)
        if recorded is None:
            self.directory.propose(Proposal(
                candidate_id, search.link, tuple(float(v) for v in x), values, phase,
                dt.datetime.now(dt.UTC).isoformat(), self.tags(search)))
        for task in self.tasks(candidate.id, emulator):
            candidate.tasks[evaluator.submit(task)] = task
        self._running[candidate.id] = (candidate, search)
        search.proposed += 1
        return candidate

    def tasks(self, candidate: int, emulator: EmulatorConfig) -> list[RunTask]:
        """One task per (scheme, replicate) of the problem for one candidate emulator."""
        return tasks_of(self.problem, self.config, self.schemes(), candidate, emulator)

    def score(self, results: Sequence[RunMetrics]) -> ReplicationError:
        """f of one candidate's runs over the whole problem."""
        return score_runs(self.problem, self.config, results)

    def _finish(self, candidate: Candidate, search: Search, session_start: float) -> None:
        """Score a finished candidate over the whole problem, tell the searches it concerns,
        journal it (fsync) — in that order, before anything new is proposed."""
        del self._running[candidate.id]
        error = self.score(candidate.results)
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
            phase=candidate.phase, study=self.tags(search))
        # as the journal holds it (NaN as None, plain numbers), so a run that goes on and one
        # resumed from the journal see the same
        record = Evaluation.from_json(record.to_json())
        tags = self.tell(record, search)
        record = Evaluation.from_json(replace(record, confident=search.confident,
                                              study={**record.study, **tags}).to_json())
        self.directory.append(record)
        self.records.append(record)
        search.ranges = ranges_of(search.optimizer, search.space, search.evidence)
        self._latest.append(Finished(search.name, search.counted, record.f, record.noise,
                                     record.emulator))

    def _deadline_passed(self, session_start: float) -> bool:
        limit = self.config.time_limit_s
        return limit is not None and self.elapsed_before + time.monotonic() - session_start >= limit

    def run(self, evaluator: Evaluator, progress: Progress | None = None) -> dict[str, Any]:
        """Evaluate until every search is stopped (budget, time, converged) and the kind has
        nothing more to open; write result.json."""
        with self.directory.writing():
            return self._run(evaluator, progress)

    def _run(self, evaluator: Evaluator, progress: Progress | None) -> dict[str, Any]:
        session_start = time.monotonic()
        owner: dict[Any, Candidate] = {}  # ObjectRef -> its candidate
        timed_out = False
        for search in self.every_search():
            if search.counted >= search.budget:
                search.stopped = "budget"
            if self.ranges_on_resume and search.records:
                search.ranges = ranges_of(search.optimizer, search.space, search.evidence)
        try:
            while True:
                if self._deadline_passed(session_start):
                    timed_out = True
                    for s in self.every_search():
                        s.stopped = s.stopped or "time limit"
                # propose while a slot would otherwise idle
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
            # proposes them again); their engines stop with their workers or at their deadline.
            evaluator.cancel(list(owner))
            self._running.clear()
            raise
        for s in self.every_search():
            s.stopped = s.stopped or "budget"
        if progress:
            progress(self._progress(0, session_start))
        result = self.result()
        self.directory.write_result(result)
        return result

    def _progress(self, running_tasks: int, session_start: float) -> ProgressInfo:
        elapsed = self.elapsed_before + time.monotonic() - session_start
        searches = self.every_search()
        left = sum(max(s.budget - s.counted, 0) for s in searches if s.stopped is None)
        latest, self._latest = self._latest, []
        return ProgressInfo({s.name: s.counted for s in searches},
                            max((s.budget for s in searches), default=0),
                            {s.name: s.best_f for s in searches}, running_tasks, len(self._running),
                            elapsed, eta_s(elapsed, len(self.records), left),
                            {s.name: s.stopped for s in searches}, latest,
                            {s.name: self._refining(s) for s in searches},
                            {s.name: s.ranges for s in searches})

    def wall_s(self) -> float:
        """The run's time so far, as its last journaled evaluation recorded it."""
        return round(max((r.elapsed_s for r in self.records), default=0.0), 3)
