"""A calibration's result (result.json), typed: per link kind the incumbent of its search, and
the winner.

`CalibrationResult.to_json` is result.json's content and `from_json` reads it back, including
results written by earlier versions (format 1 runs, results from before the local refinement or
the ranges), whose absent keys read as None.  The calibration loop builds it
(`calibrate.runs.calibration`); the export, the CLI's table, the service's job summary and the
studies' per-search results read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from calibrate.errors import InputError
from calibrate.ranges import Ranges

FORMAT = "calibrate-result"
VERSION = 1


@dataclass(frozen=True)
class LinkResult:
    """One link kind's search: how far it got and, once it has evaluations, its incumbent (the
    optimizer's choice: lowest model mean for a GP) with that evaluation's numbers."""

    evaluations: int
    stopped: str | None
    candidate: int | None = None  # None: nothing evaluated yet (the fields below are None too)
    params: Mapping[str, float] | None = None  # rate, delay, queue, loss
    emulator: str | None = None  # its Mahimahi command line
    seed: int | None = None
    f: float | None = None
    model_mean: float | None = None
    noise: float | None = None
    floor: float | None = None
    errors_pct: Mapping[str, float | None] = field(default_factory=dict)
    schemes: tuple[Mapping[str, Any], ...] = ()  # per scheme and flow: real vs emulated
    best_observed_f: float | None = None
    refined: int | None = None  # evaluations its local refinement made
    confident: bool | None = None  # its model ruled out improvement elsewhere
    ranges: Mapping[str, Any] | None = None  # `Ranges.to_json`'s keys; None: not computed

    @property
    def scored(self) -> bool:
        return self.f is not None

    def ranges_of(self) -> Ranges:
        """The values indistinguishable from the incumbent (`calibrate.ranges`)."""
        return Ranges.from_json(self.ranges or {})

    def to_json(self) -> dict[str, Any]:
        if not self.scored:
            return {"evaluations": self.evaluations, "stopped": self.stopped}
        out = {"evaluations": self.evaluations, "stopped": self.stopped,
               "candidate": self.candidate, "params": dict(self.params or {}),
               "emulator": self.emulator, "seed": self.seed, "f": self.f,
               "model_mean": self.model_mean, "noise": self.noise, "floor": self.floor,
               "errors_pct": dict(self.errors_pct), "schemes": list(self.schemes),
               "best_observed_f": self.best_observed_f, "refined": self.refined,
               "confident": self.confident}
        return {**out, **(self.ranges or {})}

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> LinkResult:
        if "f" not in entry:
            return cls(int(entry.get("evaluations", 0)), entry.get("stopped"))
        ranges = {k: entry[k] for k in ("ranges", "ranges_note") if k in entry}
        return cls(
            evaluations=int(entry["evaluations"]), stopped=entry.get("stopped"),
            candidate=int(entry["candidate"]), params=dict(entry["params"]),
            emulator=entry.get("emulator"), seed=int(entry["seed"]), f=float(entry["f"]),
            model_mean=entry.get("model_mean"), noise=entry.get("noise"),
            floor=entry.get("floor"), errors_pct=dict(entry.get("errors_pct") or {}),
            schemes=tuple(entry.get("schemes") or ()),
            best_observed_f=entry.get("best_observed_f"), refined=entry.get("refined"),
            confident=entry.get("confident"), ranges=ranges or None)


@dataclass(frozen=True)
class CalibrationResult:
    """Every link kind's search and the winner: the link kind whose incumbent has the lower f."""

    target: str
    links: Mapping[str, LinkResult]
    evaluations: int
    wall_s: float | None
    dropped: Mapping[str, str] | None = None  # None: an older result that did not say

    @property
    def winner(self) -> str | None:
        scored = {link: v.f for link, v in self.links.items() if v.f is not None}
        return min(scored, key=scored.__getitem__) if scored else None

    @property
    def best(self) -> LinkResult | None:
        winner = self.winner
        return None if winner is None else self.links[winner]

    def to_json(self) -> dict[str, Any]:
        best = self.best
        return {"format": FORMAT, "version": VERSION, "target": self.target, "winner": self.winner,
                "best": None if best is None else best.to_json(),
                "links": {link: v.to_json() for link, v in self.links.items()},
                **({} if self.dropped is None else {"dropped": dict(self.dropped)}),
                "evaluations": self.evaluations, "wall_s": self.wall_s}

    @classmethod
    def from_json(cls, data: Any, where: str = "result.json") -> CalibrationResult:
        """result.json's content read back (any version this calibrate wrote)."""
        try:
            if not isinstance(data, Mapping):
                raise TypeError("not a JSON object")
            links = {str(k): LinkResult.from_json(v) for k, v in data["links"].items()}
            result = cls(str(data.get("target", "")), links, int(data["evaluations"]),
                         data.get("wall_s"), data.get("dropped"))
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(f"{where} is malformed ({type(error).__name__}: {error}); delete it "
                             f"and it is computed again from the journal") from None
        if data.get("winner") != result.winner:
            raise InputError(f"{where} names {data.get('winner')!r} the winner, but its link kinds' "
                             f"f say {result.winner!r}; delete it and it is computed again from the "
                             f"journal")
        return result
