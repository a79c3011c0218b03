"""What the studies share: a search's view of evaluations scored over part of the problem, and
the head of a study's result.

A study is a kind of run (`calibrate.runs.controller`) whose run.json also names its kind
("kind") and holds the study's settings ("study"): leave-one-out cross-validation
(`calibrate.runs.loo`) and ablations (`calibrate.runs.ablation`).  Every evaluation is exactly a
calibration's: every scheme of the problem run `replicates` times over one candidate emulator,
scored over the whole problem, journaled once.  A search that scores only part of the problem
(a leave-one-out fold) is told the same record with its own f, computed again from the record's
runs (`rescored`), so the journal holds the runs once and every reader scores them alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from calibrate.evaluation import RunMetrics
from calibrate.objective import ReplicationError
from calibrate.runs.config import RunConfig
from calibrate.runs.controller import Run
from calibrate.runs.evaluate import scheme_table, score_runs
from calibrate.runs.journal import Evaluation, json_number
from calibrate.runs.problem import Problem
from calibrate.runs.study_result import StudyHead


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


def common_result(study: Run, fmt: str) -> StudyHead:
    """What every study's result.json starts with."""
    return StudyHead(format=fmt, kind=study.kind, target=study.config.target,
                     evaluations=len(study.records), wall_s=study.wall_s(),
                     replicates=study.config.replicates, runtime_s=study.config.runtime_s,
                     budget=study.config.budget, dropped=dict(study.problem.dropped))
