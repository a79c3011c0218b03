"""A calibration: the kind of run with one search per link kind, over the whole problem.

One calibration searches each link kind (constant, Poisson deliveries) as its own search, with
its own optimizer over the same space, and compares the two at the end (the Pantheon paper's
method: one calibrated emulator per link kind, the better one wins).  Both searches share the
evaluator's slots through the run controller (`calibrate.runs.controller`): the search with
fewer evaluations proposes first, so candidates are proposed while others still run and no slot
idles.

The path of one evaluation: optimizer.ask(1) → unit point → `SearchSpace.to_values` →
`EmulatorConfig` → one Ray task per (scheme, replicate) (`calibrate.evaluation`) → when the
candidate's last task is back: `replication_error` → optimizer.tell → one `Evaluation`
appended to the journal and fsync'ed (`calibrate.runs.journal`) → only then the next ask.

Its result (`calibration_result`, typed in `calibrate.runs.result`) is per link kind the
incumbent and the values indistinguishable from it; the studies report each of their models as
the same result over that model's searches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from calibrate.evidence import PathEvidence
from calibrate.objective import ReplicationError
from calibrate.optimizers import make_optimizer
from calibrate.ranges import ranges_of
from calibrate.runs.config import LINK_KINDS, emulator_of, emulator_seed
from calibrate.runs.controller import Run, Search
from calibrate.runs.evaluate import score_emulator
from calibrate.runs.journal import CALIBRATION, Evaluation
from calibrate.runs.problem import Problem
from calibrate.runs.result import CalibrationResult, LinkResult

if TYPE_CHECKING:  # a type only: the Ray client is imported by whoever starts a run, not here,
    # so that reading a run directory never loads it (tests/test_runs.py)
    from calibrate.cluster.evaluator import Evaluator


def search_result(search: Search, evidence: PathEvidence | None) -> LinkResult:
    """One search's incumbent (the optimizer's choice: lowest model mean for GPs), its table,
    the ranges of values indistinguishable from it (`calibrate.ranges`, read with `evidence`),
    how many evaluations the refinement made and whether the stop rule held."""
    if not search.records:
        return LinkResult(0, search.stopped)
    best = search.optimizer.best()
    record = search.records[best.index]
    return LinkResult(
        evaluations=len(search.records), stopped=search.stopped, candidate=record.candidate,
        params=dict(record.params), emulator=record.emulator, seed=record.seed, f=record.f,
        model_mean=best.mean, noise=record.noise, floor=record.floor,
        errors_pct=dict(record.errors_pct), schemes=tuple(record.schemes),
        best_observed_f=search.best_f, refined=sum(r.phase == "refine" for r in search.records),
        confident=search.confident,
        ranges=ranges_of(search.optimizer, search.space, evidence).to_json())


def calibration_result(searches: Mapping[str, Search], target: str, problem: Problem,
                       evidence: PathEvidence | None) -> CalibrationResult:
    """The result of searches keyed by link kind: each one's `search_result`; the winner is the
    link kind whose incumbent has the lower observed f."""
    records = [r for s in searches.values() for r in s.records]
    return CalibrationResult(
        target, {link: search_result(s, evidence) for link, s in searches.items()},
        evaluations=sum(len(s.records) for s in searches.values()),
        wall_s=round(max((r.elapsed_s for r in records), default=0.0), 3),
        dropped=dict(problem.dropped))


@dataclass
class Calibration(Run):
    """A calibration run (module docstring): `start` a new one or `open` one, then `run` it."""

    kind = CALIBRATION
    noun = "calibration"
    search_noun = "link kind"
    ranges_on_resume = True

    @property
    def title(self) -> str:
        return self.noun

    searches: dict[str, Search] = field(default_factory=dict)  # link kind -> its search

    def rebuild(self) -> None:
        """One search per link kind, each told the journal's records of its link kind."""
        config, problem = self.config, self.problem
        start = problem.space.from_values(problem.warm_start, clip=True)
        for link in config.links:
            optimizer = make_optimizer(config.optimizer, problem.space.dim, seed=config.seed,
                                       warm_start=[start],
                                       n_initial=config.initial_design(problem.space.dim))
            search = Search(name=link, link=link, optimizer=optimizer, space=problem.space,
                            problem=problem, budget=config.budget, evidence=self.target.evidence,
                            order=LINK_KINDS.index(link))
            self.replay(search, [r for r in self.records if r.link == link])
            search.interrupted = self.interrupted_of(search)
            self.searches[link] = search

    def tags(self, search: Search) -> dict[str, Any]:
        return {}  # a calibration's journal has no study tags: a record's link names its search

    def every_search(self) -> list[Search]:
        return list(self.searches.values())

    def tell(self, record: Evaluation, proposer: Search) -> dict[str, Any]:
        self.learn(proposer, record)
        return {}

    def outcome(self) -> CalibrationResult:
        return calibration_result(self.searches, self.config.target, self.problem,
                                  self.target.evidence)

    def result(self) -> dict[str, Any]:
        return self.outcome().to_json()

    def evaluate(self, evaluator: Evaluator, values: Mapping[str, float], link: str) -> ReplicationError:
        """Score one given point now, outside the search (not journaled, no optimizer told),
        with the search's seeds: e.g. the known true emulator of a synthetic target, whose f
        is the measured noise floor."""
        return score_emulator(self.problem, self.config, self.schemes(), evaluator,
                              emulator_of(values, link, emulator_seed(self.config.seed, link)))
