"""Ablation: which emulator features does a path need?  Nested models, one parameter added a step.

The Pantheon paper's Figure 5 adds the emulator's parameters one by one "in the order of their
contribution" (China wired: rate only 211.8 % → + delay 189.7 % → + buffer 32.3 % → + loss
17.7 %) and compares constant with Poisson deliveries (Colombia cellular: 23.7 % → 13.0 %).
`Ablation` does it for any target:

- Step 0: the rate alone, every other parameter at the emulator's default (`DEFAULTS`): no added
  delay (0 ms), an unlimited queue, no loss, constant deliveries — `mm-link` and nothing else.
- Each next step frees one more parameter.  With the greedy order (the default) a step tries
  every parameter not yet added, each as its own search, and keeps the one whose model reaches
  the lowest f (the others are reported as the step's trials); with a given order
  (``rate,delay,queue,loss``) it adds the next one.
- The last step searches the same parameters with the other link kind's deliveries (Poisson
  after constant), warm-started from the last constant model's best point.

Every step's search is a calibration's search (the same evaluation, refinement and stop rule:
`calibrate.runs.controller`) with `--budget` evaluations of its own, and each step is warm-started
from the previous step's best point: its optimizer is told that evaluation first (not run
again); its first proposals are the same point with the added parameter at the target's
analytic guess (`calibrate.physics.warm_start`, the calibration's warm start), and that guess of
every parameter the step frees.  That point lies inside the larger model, because a parameter's range always contains
its default (delay from 0 ms, loss from 0, and the queue up to `UNLIMITED_QUEUE`, which is
Mahimahi's unlimited queue: the queue is searched on a log scale from the target's lower bound
up to there, a DropTail queue deeper than any run fills behaving like no limit).  So f cannot
rise from one step to the next except by noise; the result marks a rise larger than the two
steps' measured noise combined (√(σ₁² + σ₂²); any rise when no noise was measured).  The
deliveries step is not nested in the one before, so its change is reported, not marked.

Every evaluation scores every scheme of the target (f over the whole problem), and each step's
emulator is exported like a calibration's (`calibrate.study_export`).  The result is typed
(`calibrate.runs.study_result.AblationResult`, built by `Ablation.outcome`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from calibrate.errors import InputError
from calibrate.optimizers import make_optimizer
from calibrate.optimizers.base import find_point
from calibrate.parameters import PARAMETERS, by_key
from calibrate.runs.calibration import calibration_result
from calibrate.runs.config import UNLIMITED_QUEUE, RunConfig
from calibrate.runs.controller import CONVERGED, Run, Search
from calibrate.runs.journal import Evaluation
from calibrate.runs.problem import Problem
from calibrate.runs.result import CalibrationResult, LinkResult
from calibrate.runs.study import common_result
from calibrate.runs.study_result import AblationResult, AblationStep, AblationTrial
from calibrate.schemes import Registry
from calibrate.space import LOSS_KNEE, SearchSpace
from calibrate.targets.model import Target

KIND = "ablation"
RESULT_FORMAT = "calibrate-ablation"
GREEDY = "greedy"

#: what step 0 leaves out: each parameter's value in Mahimahi when its shell is not used
DEFAULTS: Mapping[str, float] = {"delay": 0, "queue": UNLIMITED_QUEUE, "loss": 0.0}
ADDED = tuple(DEFAULTS)  # the parameters a step adds, after the rate
LABELS = {"rate": "rate only", "delay": "+ delay", "queue": "+ queue (DropTail)", "loss": "+ loss"}


def defaults_text(link: str) -> str:
    """The emulator's defaults, as the output states them."""
    return f"no added delay (0 ms), unlimited queue, no loss, {link} deliveries"


def parse_order(text: str) -> str | tuple[str, ...]:
    """`--order`: "greedy", or the parameters in the order they are added, the rate first."""
    text = text.strip()
    if text == GREEDY:
        return GREEDY
    order = tuple(p.strip() for p in text.split(",") if p.strip())
    if (not order or order[0] != "rate" or len(set(order)) != len(order)
            or any(p not in PARAMETERS for p in order)):
        raise InputError(f"--order {text!r}: give greedy, or distinct parameters of "
                         f"{', '.join(PARAMETERS)} starting with rate (e.g. rate,delay,queue,loss)")
    return order


def ablation_space(space: SearchSpace) -> SearchSpace:
    """The calibration's space with every range stretched to contain its default (module
    docstring), so each step's model contains the one before."""
    b = space.bounds
    return SearchSpace.from_bounds({
        "rate": b["rate"],
        "delay": (0.0, max(b["delay"][1], 1.0)),
        "queue": (b["queue"][0], float(UNLIMITED_QUEUE)),
        "loss": (0.0, max(b["loss"][1], LOSS_KNEE)),
    })


@dataclass
class Step:
    """One model of the sequence: a search per parameter it may add (one unless greedy)."""

    index: int
    link: str
    adds: list[str]  # per trial: the parameter it frees ("rate" at step 0), or the link kind
    trials: list[Search]

    def label(self, j: int) -> str:
        return LABELS.get(self.adds[j]) or f"+ {self.adds[j].capitalize()} deliveries"


@dataclass
class Ablation(Run):
    """An ablation study: `start` a new one or `open` one, then `run` it (module docstring)."""

    kind = KIND
    steps: list[Step] = field(default_factory=list)
    _chosen: dict[int, int] = field(default_factory=dict)  # step -> its chosen trial (cache)

    # -- making and reopening

    @classmethod
    def start(cls, run_dir: Path | str, config: RunConfig, target: Target,
              order: str | Sequence[str] = GREEDY, *, registry: Registry | None = None,
              **options: Any) -> Ablation:
        """Derive the problem (its space stretched: `ablation_space`) and write a new run
        directory; `order` as `parse_order` reads it, or its parameters."""
        return super().start(run_dir, config, target, registry=registry,
                             order=order if isinstance(order, str) else ",".join(order), **options)

    @classmethod
    def check(cls, config: RunConfig, **options: Any) -> None:
        if config.fixed:
            raise InputError("an ablation fixes and frees the parameters itself; drop --fix")
        parse_order(options["order"])

    @classmethod
    def derive(cls, problem: Problem, config: RunConfig,
               **options: Any) -> tuple[Problem, Mapping[str, Any] | None]:
        space = ablation_space(problem.space)
        problem = replace(problem, space=space,
                          warm_start=space.to_values(space.from_values(problem.warm_start, clip=True)))
        order = parse_order(options["order"])
        return problem, {"order": order if order == GREEDY else list(order), "defaults": dict(DEFAULTS),
                         "defaults_text": defaults_text(config.links[0])}

    def rebuild(self) -> None:
        """Every step that has evaluations (and step 0), each search told its own records in
        journal order after its warm start; a later step's interrupted proposals are its first
        once it is made."""
        self.steps.append(self._next_step())  # type: ignore[arg-type]  # step 0 always exists
        while any(r.study.get("step") == len(self.steps) for r in self.records):
            self._close(self.steps[-1])
            step = self._next_step()
            if step is None:
                raise InputError(f"{self.directory.journal} has evaluations of step {len(self.steps)}, "
                                 f"which this study does not have; the journal is damaged")
            self.steps.append(step)

    @property
    def order(self) -> str | tuple[str, ...]:
        order = self.settings.get("order", GREEDY)
        return GREEDY if order == GREEDY else tuple(order)

    # -- the steps

    def _make_step(self, index: int, link: str, free: Sequence[str], adds: Sequence[str],
                   start: Mapping[str, float], carried: Evaluation | None) -> Step:
        config = self.config
        trials = []
        for j, p in enumerate(adds):
            now = {*free, p} & set(PARAMETERS)
            space = self.problem.space.fix(**{n: DEFAULTS[n] for n in ADDED if n not in now})
            x0 = space.from_values(start, clip=True)
            warm = [x0]
            guess = self.problem.warm_start
            hints = [{**start, p: guess[p]}] if p in ADDED else []
            hints.append({**start, **{n: guess[n] for n in space.free}})
            for values in hints:  # the target's analytic guesses: of what it adds, of all it frees
                hint = space.from_values(values, clip=True)
                warm += [] if find_point(hint, warm) >= 0 else [hint]
            opt = make_optimizer(config.optimizer, space.dim, seed=config.seed, warm_start=warm,
                                 n_initial=config.initial_design(space.dim))
            name = f"step {index} rate" if p == "rate" else f"step {index} +{p}"
            evidence = self.target.evidence
            search = Search(name=name, link=link, optimizer=opt, space=space, problem=self.problem,
                            budget=config.budget, order=j,
                            evidence=None if evidence is None else evidence.of_schemes(self.problem.schemes))
            if carried is not None:  # the previous step's best point, a point of this model
                self.learn(search, carried, x=x0, counted=False, confident=False)
            self.replay(search, [r for r in self.records if r.study.get("search") == name])
            search.interrupted = self.interrupted_of(search)
            trials.append(search)
        return Step(index, link, list(adds), trials)

    def _next_step(self) -> Step | None:
        """The step after the last one (or step 0), from the last one's chosen model."""
        links = self.config.links
        if not self.steps:
            start = {"rate": self.problem.warm_start["rate"], **DEFAULTS}
            return self._make_step(0, links[0], (), ["rate"], start, None)
        last = self.steps[-1]
        j = self.chosen(last)
        if j is None:
            return None
        search = last.trials[j]
        best = self.trial_result(search)
        record = next(r for r in self.records if r.candidate == best.candidate)
        free = list(search.space.free)
        if last.link == links[0]:
            if self.order == GREEDY:
                adds = [p for p in ADDED if p not in free]
            else:
                adds = [p for p in self.order if p not in free][:1]
            if adds:
                return self._make_step(last.index + 1, last.link, free, adds, best.params or {}, record)
            if len(links) > 1:
                return self._make_step(last.index + 1, links[1], free, [links[1]], best.params or {}, None)
        return None

    def chosen(self, step: Step) -> int | None:
        """The trial of `step` whose model reached the lowest f (None: none has evaluations)."""
        if step.index not in self._chosen:
            fs = [(self.trial_result(search).f, j) for j, search in enumerate(step.trials)
                  if search.records]
            if not fs:
                return None
            if all(s.stopped is not None for s in step.trials):
                self._chosen[step.index] = min(fs)[1]
            else:
                return min(fs)[1]
        return self._chosen[step.index]

    def trial_view(self, search: Search) -> CalibrationResult:
        """One trial's model as a calibration's result over its one search."""
        return calibration_result({search.link: search}, self.config.target, self.problem,
                                  self.target.evidence)

    def trial_result(self, search: Search) -> LinkResult:
        return self.trial_view(search).links[search.link]

    def _close(self, step: Step) -> None:
        """Mark a finished step's searches with why they ended."""
        for s in step.trials:
            s.stopped = s.stopped or ("budget" if s.counted >= s.budget else CONVERGED)

    # -- the loop's hooks

    def every_search(self) -> list[Search]:
        return [s for step in self.steps for s in step.trials]

    def open_searches(self) -> list[Search]:
        return [s for s in self.steps[-1].trials if s.stopped is None and self.left(s) > 0]

    def tell(self, record: Evaluation, proposer: Search) -> dict[str, Any]:
        self.learn(proposer, record)
        step = next(st for st in self.steps if proposer in st.trials)
        return {"step": step.index, "adds": step.adds[step.trials.index(proposer)],
                "confident": [proposer.name] if proposer.confident else []}

    def advance(self) -> bool:
        self._close(self.steps[-1])
        step = self._next_step()
        if step is None:
            return False
        self.steps.append(step)
        return True

    # -- the outcome

    def outcome(self) -> AblationResult:
        steps: list[AblationStep] = []
        for step in self.steps:
            j = self.chosen(step)
            trials = []
            for i, search in enumerate(step.trials):
                res = self.trial_result(search) if search.records else None
                trials.append(AblationTrial(step.adds[i], step.label(i), search.name,
                                            None if res is None else res.f,
                                            None if res is None else res.noise,
                                            search.counted, search.stopped, i == j))
            if j is None:
                steps.append(AblationStep(step.index, step.link, tuple(trials)))
                continue
            search = step.trials[j]
            view = self.trial_view(search)
            best = view.links[search.link]
            entry = AblationStep(
                step.index, step.link, tuple(trials), view, adds=step.adds[j], label=step.label(j),
                free=tuple(search.space.free), fixed=dict(search.space.fixed), search=search.name,
                f=best.f, noise=best.noise, floor=best.floor, params=dict(best.params or {}),
                emulator=best.emulator, candidate=best.candidate, evaluations=search.counted,
                warm_started=search.carried > 0, stopped=search.stopped)
            previous = next((s for s in reversed(steps) if s.f is not None), None)
            if previous is not None:
                entry = replace(entry, **change({"f": previous.f, "noise": previous.noise},
                                                {"f": entry.f, "noise": entry.noise},
                                                nested=step.link == previous.link))
            steps.append(entry)
        order = self.settings.get("order", GREEDY)
        return AblationResult(common_result(self, RESULT_FORMAT),
                              order if isinstance(order, str) else tuple(order), dict(DEFAULTS),
                              self.settings.get("defaults_text"), tuple(self.config.links),
                              tuple(steps))

    def result(self) -> dict[str, Any]:
        return self.outcome().to_json()


def change(before: Mapping[str, Any], after: Mapping[str, Any], *, nested: bool) -> dict[str, Any]:
    """How f changed from one step to the next ("f" and "noise" of each): the change, the two
    noises combined (√(σ₁² + σ₂²); None when either is unknown), and for nested steps whether
    it is a rise beyond that noise (any rise when the noise is unknown)."""
    delta = after["f"] - before["f"]
    noises = (after.get("noise"), before.get("noise"))
    combined = math.sqrt(sum(n * n for n in noises)) if None not in noises else None  # type: ignore[operator]
    rise = delta > (combined if combined is not None else 0.0) if nested else None
    return {"change": delta, "change_noise": combined, "rise": rise}


def rows(result: AblationResult | Mapping[str, Any]) -> list[dict[str, Any]]:
    """One flat row per step (the CSV's and the table's), of the result or its JSON."""
    if not isinstance(result, AblationResult):
        result = AblationResult.from_json(result)
    out = []
    for s in result.steps:
        p = dict(s.params or {})
        queue = p.get("queue")
        out.append({"step": s.step, "adds": s.adds, "label": s.label,
                    "link": s.link, "f": s.f, "noise": s.noise,
                    "change": s.change, "change_noise": s.change_noise,
                    "rise_beyond_noise": s.rise,
                    **by_key({**p, "queue": None if queue is None or queue >= UNLIMITED_QUEUE else queue}),
                    "emulator": s.emulator,
                    "evaluations": s.all_evaluations,
                    "trials": " ".join(f"{t.adds}={t.f:.1f}" for t in s.trials if t.f is not None)})
    return out


__all__ = ["ADDED", "DEFAULTS", "GREEDY", "KIND", "Ablation", "Step", "ablation_space", "change",
           "defaults_text", "parse_order", "rows"]
