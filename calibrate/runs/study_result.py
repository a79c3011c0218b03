"""The studies' results (result.json, and the export's loo.json and ablation.json), typed: what
every study's result starts with (`StudyHead`), leave-one-out's folds (`LooResult`) and an
ablation's steps (`AblationResult`).

`to_json` is the JSON the study writes, key for key and in the same order as the dicts it wrote
before these types, and `from_json` reads it back.  The study builds it
(`calibrate.runs.loo.LeaveOneOut.outcome`, `calibrate.runs.ablation.Ablation.outcome`); the
CLI's tables (`calibrate.cli.studies`) and the ablation's export (`calibrate.study_export`)
read it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from calibrate.runs.result import CalibrationResult

VERSION = 1


@dataclass(frozen=True)
class StudyHead:
    """What every study's result.json starts with."""

    format: str  # the study's result format ("calibrate-loo", "calibrate-ablation")
    kind: str  # the kind of run (`calibrate.runs.kinds.KINDS`)
    target: str
    evaluations: int
    wall_s: float
    replicates: int
    runtime_s: float
    budget: int
    dropped: Mapping[str, str]
    version: int = VERSION

    def to_json(self) -> dict[str, Any]:
        return {"format": self.format, "version": self.version, "kind": self.kind,
                "target": self.target, "evaluations": self.evaluations, "wall_s": self.wall_s,
                "replicates": self.replicates, "runtime_s": self.runtime_s, "budget": self.budget,
                "dropped": dict(self.dropped)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StudyHead:
        return cls(format=data["format"], kind=data["kind"], target=data["target"],
                   evaluations=data["evaluations"], wall_s=data["wall_s"],
                   replicates=data["replicates"], runtime_s=data["runtime_s"],
                   budget=data["budget"], dropped=dict(data["dropped"]),
                   version=data.get("version", VERSION))


@dataclass(frozen=True)
class Summary:
    """How many folds count, and their mean and median (None: none counts)."""

    n: int
    mean: float | None
    median: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        return cls(len(values), statistics.fmean(values) if values else None,
                   statistics.median(values) if values else None)

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "mean": self.mean, "median": self.median}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Summary:
        return cls(data["n"], data["mean"], data["median"])


@dataclass(frozen=True)
class FoldError:
    """A fold's emulator scored over part of the problem: its fitted schemes (in-sample) or its
    held-out scheme (held-out, with that scheme's table)."""

    f: float
    noise: float | None
    errors_pct: Mapping[str, float | None]
    schemes: tuple[Mapping[str, Any], ...] | None = None  # held-out only: per scheme and flow

    def to_json(self) -> dict[str, Any]:
        out = {"f": self.f, "noise": self.noise, "errors_pct": dict(self.errors_pct)}
        return out if self.schemes is None else {**out, "schemes": list(self.schemes)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FoldError:
        schemes = data.get("schemes")
        return cls(data["f"], data.get("noise"), dict(data["errors_pct"]),
                   None if schemes is None else tuple(schemes))


@dataclass(frozen=True)
class FoldResult:
    """One fold: its calibration (without its held-out scheme) and, once it has evaluations,
    its winner's emulator with its in-sample and held-out errors."""

    fold: str
    labels: tuple[str, ...]
    calibration: CalibrationResult
    failed: str | None  # why the fold does not count (no evaluation yet; its held-out scheme failed)
    link: str | None = None  # None: no evaluation yet (the fields below are None too)
    candidate: int | None = None
    params: Mapping[str, float] | None = None
    emulator: str | None = None
    in_sample: FoldError | None = None
    held_out: FoldError | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"fold": self.fold, "labels": list(self.labels),
                               "calibration": self.calibration.to_json()}
        if self.held_out is None or self.in_sample is None:
            return {**out, "failed": self.failed}
        return {**out, "link": self.link, "candidate": self.candidate,
                "params": dict(self.params or {}), "emulator": self.emulator,
                "in_sample": self.in_sample.to_json(), "held_out": self.held_out.to_json(),
                "failed": self.failed}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FoldResult:
        calibration = CalibrationResult.from_json(data["calibration"], f"fold {data['fold']}")
        common = {"fold": data["fold"], "labels": tuple(data["labels"]), "calibration": calibration,
                  "failed": data.get("failed")}
        if not data.get("held_out"):
            return cls(**common)
        return cls(**common, link=data["link"], candidate=data["candidate"],
                   params=dict(data["params"]), emulator=data["emulator"],
                   in_sample=FoldError.from_json(data["in_sample"]),
                   held_out=FoldError.from_json(data["held_out"]))


@dataclass(frozen=True)
class Sharing:
    """Scheme runs the shared evaluations made, and what independent folds would have made."""

    evaluations: Mapping[str, int]  # per link kind
    folds: int
    replicates: int
    scheme_runs: int
    independent_scheme_runs: int

    @property
    def saved(self) -> int:
        return self.independent_scheme_runs - self.scheme_runs

    def to_json(self) -> dict[str, Any]:
        return {"evaluations": dict(self.evaluations), "folds": self.folds,
                "replicates": self.replicates, "scheme_runs": self.scheme_runs,
                "independent_scheme_runs": self.independent_scheme_runs, "saved": self.saved}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Sharing:
        return cls(dict(data["evaluations"]), data["folds"], data["replicates"],
                   data["scheme_runs"], data["independent_scheme_runs"])


@dataclass(frozen=True)
class LooResult:
    """A leave-one-out study's result: every fold, and the held-out and in-sample errors over
    the folds that count (those whose held-out scheme ran at their emulator)."""

    head: StudyHead
    links: tuple[str, ...]
    folds: tuple[FoldResult, ...]
    held_out: Summary
    in_sample: Summary
    sharing: Sharing

    @classmethod
    def of(cls, head: StudyHead, links: Sequence[str], folds: Sequence[FoldResult],
           sharing: Sharing) -> LooResult:
        """The result of these folds: the summaries over those that count."""
        scored = [f for f in folds if f.held_out is not None and f.in_sample is not None
                  and not f.failed]
        return cls(head, tuple(links), tuple(folds),
                   Summary.of([f.held_out.f for f in scored if f.held_out is not None]),
                   Summary.of([f.in_sample.f for f in scored if f.in_sample is not None]), sharing)

    @property
    def failed(self) -> list[str]:
        """The folds that do not count."""
        return [f.fold for f in self.folds if f.failed]

    def to_json(self) -> dict[str, Any]:
        return {**self.head.to_json(), "links": list(self.links),
                "folds": [f.to_json() for f in self.folds],
                "held_out": self.held_out.to_json(), "in_sample": self.in_sample.to_json(),
                "failed": self.failed, "sharing": self.sharing.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LooResult:
        return cls(StudyHead.from_json(data), tuple(data["links"]),
                   tuple(FoldResult.from_json(f) for f in data["folds"]),
                   Summary.from_json(data["held_out"]), Summary.from_json(data["in_sample"]),
                   Sharing.from_json(data["sharing"]))


@dataclass(frozen=True)
class AblationTrial:
    """One search of an ablation step: its model with one parameter (or link kind) added."""

    adds: str  # the parameter it frees ("rate" at step 0), or the link kind
    label: str
    search: str
    f: float | None  # None: no evaluation yet
    noise: float | None
    evaluations: int
    stopped: str | None
    chosen: bool  # the step's model: the trial that reached the lowest f

    def to_json(self) -> dict[str, Any]:
        return {"adds": self.adds, "label": self.label, "search": self.search, "f": self.f,
                "noise": self.noise, "evaluations": self.evaluations, "stopped": self.stopped,
                "chosen": self.chosen}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AblationTrial:
        return cls(data["adds"], data["label"], data["search"], data.get("f"), data.get("noise"),
                   data["evaluations"], data.get("stopped"), data["chosen"])


@dataclass(frozen=True)
class AblationStep:
    """One step of an ablation: its trials and, once one has evaluations, the chosen trial's
    model (its calibration, best point and the change of f from the step before)."""

    step: int
    link: str
    trials: tuple[AblationTrial, ...]
    calibration: CalibrationResult | None = None  # None: no evaluation yet (nor the fields below)
    adds: str | None = None
    label: str | None = None
    free: tuple[str, ...] = ()
    fixed: Mapping[str, float] | None = None
    search: str | None = None
    f: float | None = None
    noise: float | None = None
    floor: float | None = None
    params: Mapping[str, float] | None = None
    emulator: str | None = None
    candidate: int | None = None
    evaluations: int = 0  # the chosen trial's
    warm_started: bool = False
    stopped: str | None = None
    change: float | None = None  # f minus the previous evaluated step's f
    change_noise: float | None = None  # the two steps' noises combined
    rise: bool | None = None  # nested steps: a rise beyond that noise

    @property
    def all_evaluations(self) -> int:
        """Every trial's evaluations."""
        return sum(t.evaluations for t in self.trials)

    def to_json(self) -> dict[str, Any]:
        trials = [t.to_json() for t in self.trials]
        if self.calibration is None:
            return {"step": self.step, "link": self.link, "adds": None, "trials": trials, "f": None}
        return {"step": self.step, "adds": self.adds, "label": self.label, "link": self.link,
                "free": list(self.free), "fixed": dict(self.fixed or {}), "search": self.search,
                "f": self.f, "noise": self.noise, "floor": self.floor,
                "params": dict(self.params or {}), "emulator": self.emulator,
                "candidate": self.candidate, "evaluations": self.evaluations,
                "warm_started": self.warm_started, "stopped": self.stopped, "trials": trials,
                "calibration": self.calibration.to_json(), "change": self.change,
                "change_noise": self.change_noise, "rise": self.rise}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AblationStep:
        trials = tuple(AblationTrial.from_json(t) for t in data["trials"])
        if data.get("calibration") is None:
            return cls(data["step"], data["link"], trials)
        return cls(data["step"], data["link"], trials,
                   CalibrationResult.from_json(data["calibration"], f"step {data['step']}"),
                   adds=data["adds"], label=data["label"], free=tuple(data["free"]),
                   fixed=dict(data["fixed"]), search=data["search"], f=data["f"],
                   noise=data.get("noise"), floor=data.get("floor"), params=dict(data["params"]),
                   emulator=data["emulator"], candidate=data["candidate"],
                   evaluations=data["evaluations"], warm_started=data["warm_started"],
                   stopped=data.get("stopped"), change=data.get("change"),
                   change_noise=data.get("change_noise"), rise=data.get("rise"))


@dataclass(frozen=True)
class AblationResult:
    """An ablation study's result: its order and the emulator's defaults step 0 keeps, and
    every step (`calibrate.runs.ablation`)."""

    head: StudyHead
    order: str | tuple[str, ...]  # "greedy", or the parameters in the order they are added
    defaults: Mapping[str, float]
    defaults_text: str | None
    links: tuple[str, ...]
    steps: tuple[AblationStep, ...]

    @property
    def order_text(self) -> str:
        return self.order if isinstance(self.order, str) else ",".join(self.order)

    @property
    def best_step(self) -> int | None:
        """The step whose model reached the lowest f (None: none has evaluations)."""
        scored = [s for s in self.steps if s.f is not None]
        return min(scored, key=lambda s: s.f or 0.0).step if scored else None

    def to_json(self) -> dict[str, Any]:
        return {**self.head.to_json(),
                "order": self.order if isinstance(self.order, str) else list(self.order),
                "defaults": dict(self.defaults), "defaults_text": self.defaults_text,
                "links": list(self.links), "steps": [s.to_json() for s in self.steps],
                "best_step": self.best_step}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AblationResult:
        order = data["order"]
        return cls(StudyHead.from_json(data), order if isinstance(order, str) else tuple(order),
                   dict(data["defaults"]), data.get("defaults_text"), tuple(data["links"]),
                   tuple(AblationStep.from_json(s) for s in data["steps"]))
