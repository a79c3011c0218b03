"""What a run reports while it runs: the live display's numbers, and how long it has left.

`calibrate.runs.controller` hands a `ProgressInfo` to its progress callback after every wait
for results; the CLI's display (`calibrate.cli.run.Display`) and the service's job summary
(`calibrate.service.views`) estimate the time left with the same `eta_s`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from calibrate.ranges import Ranges


@dataclass(frozen=True)
class Finished:
    """One evaluation journaled since the display last asked: the search that proposed it, its
    number among that search's evaluations, and its outcome."""

    search: str
    n: int
    f: float
    noise: float | None
    emulator: str


@dataclass(frozen=True)
class ProgressInfo:
    """What the live display shows, per search (a calibration's searches are its link kinds)."""

    done: Mapping[str, int]  # search -> evaluations it counts
    budget: int
    best: Mapping[str, float | None]  # search -> best f so far (%)
    running_tasks: int
    running_candidates: int
    elapsed_s: float
    eta_s: float | None
    stopped: Mapping[str, str | None]
    latest: Sequence[Finished] = ()  # evaluations finished since the last call
    refining: Mapping[str, bool] = field(default_factory=dict)  # search -> in its local refinement
    ranges: Mapping[str, Ranges | None] = field(default_factory=dict)  # search -> after its last tell


Progress = Callable[[ProgressInfo], None]


def eta_s(elapsed_s: float, done: int, left: int) -> float | None:
    """The time a run has left, roughly: its average time per evaluation so far times the
    evaluations its budget has left (None before the first evaluation)."""
    return elapsed_s / done * left if done else None
