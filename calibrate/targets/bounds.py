"""The physical bounds of every number a target declares, in one table, and the one check.

A target's source declares numbers that size later work: the flows of a run (the search builds
one entry per flow), the runs of a scheme (a data directory expects one result per run), the
runtime and interval of a run, the ddof of its standard deviations, the format version, the run
ids and flow keys of its per-run values.  Each reader checks each such number with `declared`
where it reads it, before anything is made per flow or per run, so that no upload can make the
CLI or the service allocate for 10^30 flows; `calibrate.targets.model.check_values` checks a
finished Target against the same table.

The bounds are what Pantheon ran, with room to spare, and small enough that work per flow or run
stays trivial:

- flows 1..64: Pantheon's ``-f``; its published experiments ran 1 to 3 flows per scheme;
- runs 1..1000: Pantheon's ``--run-times`` (and a table's runs of a scheme); its experiments ran
  5 to 10;
- run id 0..100000: the number in ``<cc>_datalink_run<N>.log`` and pantheon_perf.json, counted
  from ``--start-run-id`` (1 by default), which may continue an earlier experiment;
- runtime (0, 600] s: Pantheon's ``-t`` (its test.py allows at most 60 s; a typed table may
  describe a longer measurement);
- interval 0..600 s: Pantheon's ``--interval`` between flow starts, within one run;
- std_ddof 0..1: numpy's ddof, 0 as Pantheon's np.std, 1 for a sample standard deviation;
- version 1..`FORMAT_VERSION` of calibrate's own target JSON, which `calibrate.targets.model`
  writes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from calibrate.errors import InputError

#: the version of calibrate's target JSON ("calibrate-target") that this calibrate writes
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Bound:
    """The values one declared number may have: `low` to `high` (`low` itself excluded when
    `above_low`), a whole number where `whole`."""

    low: float
    high: float
    whole: bool
    unit: str
    meaning: str  # what the number is, in Pantheon's words
    above_low: bool = False

    def text(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        kind = "a whole number" if self.whole else "a number"
        if self.above_low:
            return f"{kind} above {self.low:g} and at most {self.high:g}{unit}"
        if self.low == self.high:
            return f"{self.low:g}{unit}"
        return f"{kind} from {self.low:g} to {self.high:g}{unit}"


BOUNDS: dict[str, Bound] = {
    "flows": Bound(1, 64, True, "", "flows per run, Pantheon's -f"),
    "runs": Bound(1, 1000, True, "", "runs per scheme, Pantheon's --run-times"),
    "run": Bound(0, 100_000, True, "", "a run id, counted from Pantheon's --start-run-id"),
    "runtime_s": Bound(0, 600, False, "s", "seconds of one run, Pantheon's -t", above_low=True),
    "interval_s": Bound(0, 600, False, "s", "seconds between flow starts, Pantheon's --interval"),
    "std_ddof": Bound(0, 1, True, "", "the ddof of the standard deviations, 0 as Pantheon's np.std"),
    "version": Bound(1, FORMAT_VERSION, True, "", "the version of a calibrate target JSON this "
                     "calibrate reads"),
}

#: the longest text read as a number (a float has 17 significant digits; an exponent is short)
_MAX_NUMBER_TEXT = 40


def declared(field: str, value: Any, where: str, fix: str) -> Any:
    """`value` (a number, or its text) as the number `field` declares, an int where the bound is
    whole; InputError, one line naming the field, the value, the bound and `fix`, where it is not
    a number within `BOUNDS[field]`."""
    bound = BOUNDS[field]
    number = _as_float(value)
    inside = number is not None and (
        (bound.low < number if bound.above_low else bound.low <= number) and number <= bound.high
        and (not bound.whole or number.is_integer()))
    if not inside:
        shown = repr(value) if isinstance(value, str) else str(value)
        if len(shown) > _MAX_NUMBER_TEXT:
            shown = shown[:_MAX_NUMBER_TEXT] + "..."
        raise InputError(f"{where}: {field} {shown} is not {bound.text()} ({bound.meaning}); "
                         f"{fix}".replace("\n", " "))
    assert number is not None
    return int(number) if bound.whole else number


def _as_float(value: Any) -> float | None:
    """A finite float of a number or its text; None for anything else (bool, nan, inf, words)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        if len(value) > _MAX_NUMBER_TEXT:
            return None
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int past a float's range
        return None
    return number if math.isfinite(number) else None
