"""One evaluation of a candidate emulator: its runs, and their score.

An evaluation is every scored scheme of the problem (`calibrate.runs.problem.Problem`) run
`replicates` times over the candidate (`tasks_of`, one Ray task each: `calibrate.evaluation`),
scored by the Pantheon paper's replication error (`score_runs`; `scheme_table` is its per-scheme
table as the journal and result.json hold it).  `host_schemes` finds this host's programs of
the schemes the problem recorded: the only part of an evaluation that reads the host.
`score_emulator` runs and scores one given emulator outside any search (`calibrate score`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from calibrate.emulator import EmulatorConfig
from calibrate.errors import InputError
from calibrate.evaluation import RunMetrics, RunTask, lost
from calibrate.metrics import TOTAL
from calibrate.objective import ReplicationError, replication_error
from calibrate.runs.config import RunConfig
from calibrate.runs.problem import Problem
from calibrate.schemes import Registry, Scheme

if TYPE_CHECKING:  # a type only: the Ray client is imported by whoever starts a run, not here,
    # so that reading a run directory never loads it (tests/test_runs.py)
    from calibrate.cluster.evaluator import Evaluator


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


def scheme_table(error: ReplicationError) -> list[dict[str, Any]]:
    """Per key: real vs emulated, the error terms (%), replicates and failures."""
    rows = []
    for s in error.schemes:
        label, flow = (s.key if isinstance(s.key, tuple) else (s.key, TOTAL))
        rows.append({"scheme": label, "flow": flow, "real": None if s.real is None else s.real.to_json(),
                     "emulated": None if s.emulated is None else s.emulated.to_json(), "replicates": s.replicates,
                     "error_pct": {"tput": 100 * s.throughput, "delay": 100 * s.delay,
                                   "loss": 100 * s.loss},
                     "failures": list(s.failures)})
    return rows
