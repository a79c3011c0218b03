"""Leave-one-out cross-validation: does an emulator calibrated on some schemes predict another?

The Pantheon paper (§5) checked its calibrated emulators this way: calibrated on all schemes but
one, an emulator predicted the held-out scheme within about 20 %.  `LeaveOneOut` does it for
every scheme of a target: fold s is the calibration on the other schemes, and its emulator's
error on s alone (throughput, p95 delay, and f of s) is the held-out error, reported beside the
in-sample error — f of the same emulator on the schemes it was fitted on.

Folds.  A fold holds out one scheme that runs here, with every target label it runs for
(`Problem.sharing`: Nepal's saturator and greg_saturator are both our saturator, and holding out
one while fitting the other's runs would predict a scheme from itself).  A study needs at least
two.

Folds share evaluations.  Every evaluation runs every scheme (as a calibration's does), so a
point measured for one fold serves them all: each link kind's folds take turns proposing
(the fold with the fewest proposals of its own first), and every finished evaluation is told to
every fold of its link kind, each with its own f — f over its fitted schemes, computed from the
same runs (`calibrate.runs.study.rescored`).  One journal holds each evaluation once; `--budget`
is the number of evaluations per link kind, which every fold's optimizer is told, as many as a
calibration with that budget.  Independent folds would have run each of those evaluations once
per fold, without the held-out scheme, and the held-out scheme once more at each fold's
emulator: the closing table says how many scheme runs the sharing saved.

What a fold fits.  A fold's proposals (after the shared warm start and Sobol design) and its
incumbent — the emulator whose held-out error is reported — are chosen from its own f only,
which never reads the held-out scheme's target numbers; the held-out error is computed from the
held-out scheme's runs at that emulator (`held_out`).  Two things are common to all folds, so
that a point is the same point for every fold: the space and the warm start, derived from every
scheme (the bounds are physical and contain the path whatever the schemes), and the history:
points another fold proposed were chosen with the held-out scheme in its objective.  The paper's
folds were independent; sharing trades that for G−1 times fewer runs (G schemes).  A fold's
reported ranges read the per-packet logs of its fitted schemes only.

A fold whose held-out scheme produced no valid run at its emulator says so ("failed", with the
reasons) and is left out of the mean and median rather than counted as 0 (or as the penalty).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from calibrate.errors import InputError
from calibrate.optimizers import make_optimizer
from calibrate.parameters import by_key
from calibrate.runs.calibration import calibration_result
from calibrate.runs.config import RunConfig
from calibrate.runs.controller import Candidate, Run, Search
from calibrate.runs.evaluate import scheme_table
from calibrate.runs.journal import Evaluation
from calibrate.runs.problem import Problem
from calibrate.runs.study import common_result, part_of, rescored, runs_of, score_part
from calibrate.runs.study_result import FoldError, FoldResult, LooResult, Sharing

KIND = "leave-one-out"
RESULT_FORMAT = "calibrate-loo"


@dataclass(frozen=True)
class Fold:
    """One held-out scheme: the target labels it runs for, which the fold does not fit."""

    name: str
    labels: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "labels": list(self.labels)}


def folds_of(problem: Problem) -> list[Fold]:
    """One fold per scheme the problem runs (module docstring: Folds)."""
    folds = [Fold("+".join(labels), tuple(labels)) for labels in problem.sharing().values()]
    if len(folds) < 2:
        raise InputError(f"leave-one-out needs at least two schemes that run here; this target "
                         f"has {', '.join(problem.schemes) or 'none'} (see `calibrate schemes`)")
    return folds


def fitted(problem: Problem, fold: Fold) -> Problem:
    """What fold `fold` scores: every scheme but the held-out one."""
    return part_of(problem, [label for label in problem.schemes if label not in fold.labels])


def held_out(problem: Problem, fold: Fold) -> Problem:
    """The held-out scheme alone."""
    return part_of(problem, fold.labels)


@dataclass
class LeaveOneOut(Run):
    """A leave-one-out study: `start` a new one or `open` one, then `run` it (module docstring)."""

    kind = KIND
    folds: list[Fold] = field(default_factory=list)
    by_link: dict[str, list[Search]] = field(default_factory=dict)  # link -> a search per fold

    # -- making and reopening

    @classmethod
    def derive(cls, problem: Problem, config: RunConfig,
               **options: Any) -> tuple[Problem, Mapping[str, Any] | None]:
        """The calibration's problem, and its folds (refused with fewer than two)."""
        return problem, {"folds": [f.to_json() for f in folds_of(problem)]}

    def rebuild(self) -> None:
        """Every fold told every evaluation of its link kind, in journal order."""
        config, problem = self.config, self.problem
        self.folds = [Fold(str(f["name"]), tuple(f["labels"])) for f in self.settings["folds"]]
        start = problem.space.from_values(problem.warm_start, clip=True)
        evidence = self.target.evidence
        for link in config.links:
            searches = []
            for i, fold in enumerate(self.folds):
                # one seed for all folds: their warm start and Sobol design are the same points,
                # which one proposes and all are told
                opt = make_optimizer(config.optimizer, problem.space.dim, seed=config.seed,
                                     warm_start=[start], n_initial=config.initial_design(problem.space.dim))
                name = fold.name if len(config.links) == 1 else f"{fold.name}/{link}"
                scored = fitted(problem, fold)
                # a fold's ranges read only what it fits: never its held-out scheme's packets
                search = Search(name=name, link=link, optimizer=opt, space=problem.space,
                                problem=scored, budget=config.budget, order=i,
                                evidence=None if evidence is None else evidence.of_schemes(scored.schemes))
                self.replay(search, [rescored(r, search.problem, config) for r in self.records
                                     if r.link == link])
                search.interrupted = self.interrupted_of(search)
                searches.append(search)
            self.by_link[link] = searches

    # -- the loop's hooks

    def every_search(self) -> list[Search]:
        return [s for searches in self.by_link.values() for s in searches]

    def running_for(self, search: Search) -> list[Candidate]:
        """Every running candidate of its link kind: each is told to every fold."""
        return [c for c, _ in self._running.values() if c.link == search.link]

    def priority(self, search: Search) -> tuple[Any, ...]:
        """The link kind with fewer evaluations first (as a calibration), then the fold that
        proposed least."""
        return (search.counted + len(self.running_for(search)), search.proposed, search.order)

    def tell(self, record: Evaluation, proposer: Search) -> dict[str, Any]:
        for search in self.by_link[record.link]:
            self.learn(search, rescored(record, search.problem, self.config))
        return {"confident": [s.name for s in self.by_link[record.link] if s.confident]}

    # -- the outcome

    def fold_result(self, i: int) -> FoldResult:
        """Fold i's calibration (a calibration's result, per link kind and the winner) and its
        held-out error at the winner's incumbent."""
        fold = self.folds[i]
        searches = {link: s[i] for link, s in self.by_link.items()}
        outcome = calibration_result(searches, self.config.target, fitted(self.problem, fold),
                                     self.target.evidence)
        best = outcome.best
        if best is None or best.f is None:
            return FoldResult(fold.name, fold.labels, outcome, "no evaluation yet")
        record = next(r for r in self.records if r.candidate == best.candidate)
        held = score_part(held_out(self.problem, fold), self.config, runs_of(record))
        failed = held.penalized
        return FoldResult(
            fold.name, fold.labels, outcome,
            failed=("; ".join(f"{k}: {v}" for k, v in failed.items())
                    if len(failed) == len(held.schemes) else None),
            link=outcome.winner, candidate=record.candidate, params=dict(record.params),
            emulator=record.emulator,
            in_sample=FoldError(best.f, best.noise, dict(best.errors_pct)),
            held_out=FoldError(held.f, None if math.isnan(held.noise) else held.noise,
                               {"tput": held.throughput, "delay": held.delay, "loss": held.loss},
                               tuple(scheme_table(held))))

    def sharing(self) -> Sharing:
        """Scheme runs made, and what independent folds would have made (module docstring)."""
        groups, reps = len(self.folds), self.config.replicates
        made = sum(len(r.runs) for r in self.records)
        per_link = {link: sum(r.link == link for r in self.records) for link in self.by_link}
        independent = sum(n * groups * (groups - 1) * reps for n in per_link.values()) + groups * reps
        return Sharing(per_link, groups, reps, made, independent)

    def outcome(self) -> LooResult:
        return LooResult.of(common_result(self, RESULT_FORMAT), list(self.by_link),
                            [self.fold_result(i) for i in range(len(self.folds))], self.sharing())

    def result(self) -> dict[str, Any]:
        return self.outcome().to_json()


def rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One flat row per fold (the CSV's and the table's)."""
    out = []
    for fold in result["folds"]:
        held, ins = fold.get("held_out") or {}, fold.get("in_sample") or {}
        herr = held.get("errors_pct") or {}
        params = fold.get("params") or {}
        out.append({"held_out": fold["fold"], "labels": " ".join(fold["labels"]),
                    "link": fold.get("link"), "held_out_f": held.get("f"),
                    "held_out_noise": held.get("noise"), "held_out_tput_pct": herr.get("tput"),
                    "held_out_delay_pct": herr.get("delay"), "held_out_loss_pct": herr.get("loss"),
                    "in_sample_f": ins.get("f"), "in_sample_noise": ins.get("noise"),
                    **by_key(params),
                    "emulator": fold.get("emulator"), "failed": fold.get("failed")})
    return out


__all__ = ["KIND", "Fold", "LeaveOneOut", "fitted", "folds_of", "held_out", "rows"]
