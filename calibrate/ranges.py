"""How sure a calibration is: per parameter, the values statistically indistinguishable from the best.

Two runs of each scheme over a lossy path cannot pin a queue to a few packets; the result says
so.  `Optimizer.indistinguishable` (the range rule, documented with its constants in
`calibrate.optimizers.rules`) keeps the points of a dense sample of the search space, of 1-D
sweeps through the incumbent along each parameter and of the evaluated points where the model's
posterior mean of f exceeds its posterior mean at the incumbent by at most `RANGE_Z` standard
deviations of their difference (under the joint posterior; the replicates' noise enters through
the model); a parameter's range is its minimum and maximum over those points, in its own units.
A parameter the evaluations do not show f to depend on (the model refitted without it explains
them as well: `Optimizer.irrelevant`) has its whole search range: the model's shape along it is
extrapolation, not evidence.  A wide range is a finding, not a failure: the target does not tell
those values apart.

Where the target's per-packet logs tell values apart that its f cannot, the range is narrowed to
what they allow (`calibrate.evidence`).  Mahimahi link logs do this for the delay: every
packet's one-way delay is its time in the link plus the propagation delay plus what the host adds
(`HOST_ALLOWANCE_MS`), so the propagation delay lies in `PathEvidence.propagation_interval_ms`,
to about a millisecond, where f moves by less than its noise for several milliseconds.  Only
where the incumbent's value is one the logs allow: an incumbent they rule out (the losing link
kind's, say) keeps the model's range, which then says how far it is from the logs.

Without a model there is no range: random search has none, and a GP is not trusted before the
warm start and the initial design are told.  The result then says why instead of inventing one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from calibrate.evidence import PathEvidence
from calibrate.optimizers import Optimizer
from calibrate.optimizers.rules import RANGE_Z
from calibrate.parameters import PARAMETER_TABLE, PARAMETERS
from calibrate.space import SearchSpace

#: What the range of one parameter means, for readers of result.json and emulator.json.
MEANING = (f"values whose f the model cannot tell from the best's: posterior mean of f within "
           f"{RANGE_Z:g} standard deviations of its difference from the incumbent's; the delay's "
           f"also within what the target's link logs allow, where it has them")

#: Why an old result has none (result.json written before ranges were reported).
NOT_COMPUTED = ("not computed: this result was written before ranges were reported; delete "
                "RUN_DIR/result.json and export again to compute them from the journal")


def _pair(low: float, high: float, integer: bool) -> str:
    """'low–high' with the decimals of three significant digits of the larger, more when that
    would show two different values as one; zero is "0", equal values are one number."""
    decimals = 0
    top = max(abs(low), abs(high))
    if not integer and top > 0:
        decimals = max(0, 2 - math.floor(math.log10(top)))
        while low != high and f"{low:.{decimals}f}" == f"{high:.{decimals}f}" and decimals < 9:
            decimals += 1

    def number(value: float) -> str:
        return "0" if value == 0 else f"{value:.{decimals}f}"

    return number(low) if number(low) == number(high) else f"{number(low)}–{number(high)}"


@dataclass(frozen=True)
class Range:
    """One parameter's indistinguishable values, [low, high], in the units of its value
    (Mbit/s, ms, packets, loss as a fraction)."""

    name: str
    low: float
    high: float

    def text(self) -> str:
        """E.g. ``rate 11.6–12.3 Mbit/s``, ``loss 0–0.12 %``."""
        p = PARAMETER_TABLE[self.name]
        return f"{p.label} {_pair(p.shown(self.low), p.shown(self.high), p.integer)} {p.display_unit}"


@dataclass(frozen=True)
class Ranges:
    """Per free parameter its `Range`, or none and `note` saying why."""

    ranges: tuple[Range, ...] = ()
    note: str | None = None

    def text(self) -> str:
        """E.g. ``rate 11.6–12.3 Mbit/s, delay 28–31 ms``, or ``no range: WHY``."""
        return ", ".join(r.text() for r in self.ranges) if self.ranges else f"no range: {self.note}"

    def sentence(self) -> str:
        """`text` said in full: ``indistinguishable from the best: rate …``."""
        return f"indistinguishable from the best: {self.text()}" if self.ranges else self.text()

    def to_json(self) -> dict[str, Any]:
        """The keys a link kind's entry in result.json gets: ``ranges`` ({parameter: [low,
        high]} or null) and ``ranges_note`` (what they mean, or why there are none)."""
        return {"ranges": {r.name: [r.low, r.high] for r in self.ranges} if self.ranges else None,
                "ranges_note": MEANING if self.ranges else self.note}

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> Ranges:
        """From a link kind's entry in result.json (`to_json`'s keys; absent: an older result)."""
        if "ranges" not in entry:
            return cls(note=NOT_COMPUTED)
        values = entry["ranges"] or {}
        return cls(tuple(Range(name, float(v[0]), float(v[1])) for name, v in values.items()),
                   None if values else entry.get("ranges_note"))


def ranges_of(optimizer: Optimizer, space: SearchSpace, evidence: PathEvidence | None = None) -> Ranges:
    """The ranges of a search's free parameters from its optimizer's model, narrowed by the
    target's per-packet `evidence` where it has some (module docstring)."""
    if not optimizer.model_based:
        return Ranges(note=f"{optimizer.name} search has no model to tell values apart")
    points = optimizer.indistinguishable() if optimizer.design_done else None
    if points is None:
        return Ranges(note=f"too few evaluations for a model ({len(optimizer.history[1])}; the "
                           f"warm start and the initial design come first)")
    values = space.decode(points)  # the incumbent first
    allowed = {"delay": evidence.propagation_interval_ms} if evidence is not None else {}
    ranges = []
    for name in space.free:
        column = values[:, PARAMETERS.index(name)]
        low, high = float(column.min()), float(column.max())
        interval = allowed.get(name)
        if interval is not None and interval[0] <= column[0] <= interval[1]:
            low, high = max(low, interval[0]), min(high, interval[1])
        ranges.append(Range(name, low, high))
    return Ranges(tuple(ranges))
