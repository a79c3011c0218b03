"""Per-packet evidence: what a target's logs show that per-run throughput, p95 and loss cannot.

A Pantheon data dir may hold two kinds of per-packet log per run:

- the merged tunnel log `<cc>_datalink_run<N>.log` (Pantheon's `merge_tunnel_logs.py`): every
  delivered packet's one-way delay, so the **smallest one-way delay** any packet saw — the
  propagation delay plus at least one delivery slot, a far tighter statement than a p95;
- Mahimahi's link log `<cc>_mm_datalink_run<N>.log` (mm-link's `--uplink-log`): `T # 1504` every
  delivery opportunity, `T + S` an arrival, `T - S D` a departure after D ms in the link
  (queueing and serialisation; the `mm-delay` after the link is not in D), `T d N B` a queue drop.
  From it: the **link's capacity** (opportunities per second × 1500 bytes) and whether its
  deliveries are **constant or Poisson** (the spread of opportunities per window); the **queue**
  (the log is written in event order, so the packets in the link at every moment are a running
  count of arrivals − departures − drops; a DropTail queue of Q packets drops an arrival exactly
  when Q packets are waiting, so the count at a drop pins Q to within the one packet that may be
  in transit); the **largest time in the link**; and, with the run's p95 one-way delay, the
  **propagation delay** (every packet's one-way delay is its time in the link + the mm-delay D
  + the tunnel's own time ≥ 0, so D ≤ p95 one-way − p95 of the time in the link).

`RunEvidence` holds one run's findings (serialisable; a target from a perf JSON or a table has
none); `PathEvidence` pools a target's runs into the statements the search space uses.  Both
logs may be gzipped (`.log.gz`); link logs are parsed with pandas (a 30 s run at 30 Mbit/s is
about 220 000 lines: ~25 ms).
"""

from __future__ import annotations

import gzip
import io
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

import numpy as np

from calibrate.errors import InputError
from calibrate.metrics import DELAY_PERCENTILE, MAX_LOG_BYTES, DatalinkLog, percentile_nearest
from calibrate.trace import OPPORTUNITIES_PER_MINUTE_PER_MBPS

Deliveries = Literal["constant", "poisson", "variable"]

#: Opportunities are counted in windows holding at least this many on average (and at least
#: 100 ms): a constant trace's counts then vary by at most one, i.e. a dispersion (variance /
#: mean) ≤ 0.25 / 10, while Poisson deliveries have a dispersion of 1.
DISPERSION_WINDOW_OPPORTUNITIES = 10
DISPERSION_WINDOW_MS = 100.0
#: dispersion below this: constant deliveries; within POISSON_DISPERSION: Poisson; else variable
CONSTANT_DISPERSION = 0.25
POISSON_DISPERSION = (0.6, 1.6)
#: Standard errors of an empirical quantile kept between the run's p95 one-way delay and the
#: quantile of its time in the link that is subtracted from it: Pantheon's p95 is over the
#: packets mm-loss let through, a random subset of the link's departures, whose p95 can sit a
#: little below the full set's.
QUANTILE_MARGIN_SE = 4.0
#: The smallest time a packet spends in a Mahimahi link: it leaves at the next whole-millisecond
#: opportunity (Mahimahi's `link_queue.cc`), so the smallest one-way delay is the mm-delay + ~1 ms.
LINK_TICK_MS = 1.0
#: ms a Mahimahi host may add to a packet's p95 one-way delay beyond its time in the link and the
#: mm-delay D: the delay stage releases packets at whole milliseconds and wakes late (tcpdump per
#: hop in real Mahimahi: its 20 ms stage took 19.15–20.87 ms, 1st–99th percentile), and
#: Pantheon's p95 is read from whole-ms timestamps.  It makes the lower end of
#: `PathEvidence.propagation_interval_ms`, a statement about which delays the logs tell apart
#: (the reported ranges, `calibrate.ranges`), never a search bound: those hold whatever the host.
HOST_ALLOWANCE_MS = 2.0

_KINDS = ("#", "+", "-", "d")


# ----------------------------------------------------------------------------------------------
# Reading


def read_log_bytes(path: Path | str) -> bytes:
    """A log's bytes, gunzipped when the name ends in .gz; too large or unreadable: InputError."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_LOG_BYTES:
            raise InputError(f"{path}: {path.stat().st_size} bytes is far more than a log of a "
                             "<=60 s run; check the file")
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                data = f.read(MAX_LOG_BYTES + 1)
            if len(data) > MAX_LOG_BYTES:
                raise InputError(f"{path}: unpacks to more than {MAX_LOG_BYTES} bytes, far more "
                                 "than a log of a <=60 s run; check the file")
            return data
        return path.read_bytes()
    except OSError as error:  # gzip.BadGzipFile is an OSError
        raise InputError(f"{path}: cannot read the log: {error.strerror or error}") from None


@dataclass(frozen=True)
class LinkLog:
    """A parsed Mahimahi link log: its events in the order written (which is event order)."""

    time_ms: np.ndarray  # int64
    kind: np.ndarray  # one of "#", "+", "-", "d" per event
    size: np.ndarray  # bytes (for `d`: packets dropped)
    delay_ms: np.ndarray  # `-`: ms in the link; NaN otherwise

    @property
    def opportunities(self) -> np.ndarray:
        return self.time_ms[self.kind == "#"]

    @property
    def departure_delays(self) -> np.ndarray:
        return self.delay_ms[self.kind == "-"]


def parse_link_log(path: Path | str, data: bytes | None = None) -> LinkLog:
    """Parse a Mahimahi `--uplink-log` (as `link_queue.cc` writes it), plain or gzipped; `data` may
    pass the bytes already read (path is then only a label)."""
    source = str(path)
    data = read_log_bytes(path) if data is None else data
    start = 0
    while data.startswith(b"#", start):  # the header: `# mahimahi mm-link ...`, `# init ...`
        end = data.find(b"\n", start)
        start = len(data) if end < 0 else end + 1
    import pandas as pd  # here, not at the top: every `calibrate` command imports this module

    expected = ("expected lines 'T # 1504', 'T + S', 'T - S D' and 'T d N B' after the '# ' "
                "header (mm-link's --uplink-log); is this a Mahimahi link log?")
    try:
        frame = pd.read_csv(io.BytesIO(data[start:]), sep=" ", header=None,
                            names=["t", "k", "s", "d"], engine="c",
                            dtype={"t": np.float64, "k": str, "s": np.float64, "d": np.float64})
    except pd.errors.EmptyDataError:
        frame = pd.DataFrame({"t": [], "k": [], "s": [], "d": []})
    except (ValueError, pd.errors.ParserError):
        raise _first_bad_line(data, start, source, expected) from None
    time_ms = frame["t"].to_numpy(dtype=np.float64)
    kind = frame["k"].to_numpy(dtype=object).astype(str)
    size = frame["s"].to_numpy(dtype=np.float64)
    delay = frame["d"].to_numpy(dtype=np.float64)
    bad = ~np.isin(kind, _KINDS) | np.isnan(time_ms) | np.isnan(size)
    bad |= np.isin(kind, ("-", "d")) & np.isnan(delay)
    if bad.any():
        raise _first_bad_line(data, start, source, expected)
    return LinkLog(time_ms.astype(np.int64), kind, size.astype(np.int64), delay)


#: fields after the time and the kind: `#` and `+` a size, `-` a size and a delay, `d` two counts
_FIELDS = {"#": 1, "+": 1, "-": 2, "d": 2}


def _first_bad_line(data: bytes, start: int, source: str, expected: str) -> InputError:
    """The error naming the first line that is not link-log grammar (slow; only for errors)."""
    first = data[:start].count(b"\n") + 1
    for number, raw in enumerate(data[start:].split(b"\n"), start=first):
        fields = raw.split()
        if not fields:
            continue
        ok = len(fields) >= 2 and fields[1].decode(errors="replace") in _FIELDS
        if ok:
            ok = len(fields) == 2 + _FIELDS[fields[1].decode()]
            try:
                [float(f) for f in fields[:1] + fields[2:]]
            except ValueError:
                ok = False
        if not ok:
            shown = raw.decode(errors="replace").strip()
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            return InputError(f"{source}:{number}: malformed Mahimahi link log line {shown!r}; "
                              f"{expected}")
    return InputError(f"{source}: malformed Mahimahi link log; {expected}")


# ----------------------------------------------------------------------------------------------
# One run


@dataclass(frozen=True)
class RunEvidence:
    """What one run's per-packet logs show.  Every field is None where no log gives it.

    Pantheon tunnel log: `min_delay_ms`.  Mahimahi link log: the rest (`propagation_*` also need
    the run's p95 one-way delay).  Opportunities come from either log, the link log first.
    """

    label: str
    run: int
    packets: int  # departures logged
    min_delay_ms: float | None = None  # smallest one-way delay of any delivered packet
    max_link_delay_ms: float | None = None  # longest time a packet spent in the link
    propagation_ms: float | None = None  # the run's p95 one-way − p95 of the time in the link
    propagation_max_ms: float | None = None  # the same with a quantile margin: a bound on D
    max_in_link: int | None = None  # most packets in the link at once (waiting + in transit)
    drops: int | None = None  # packets the queue dropped
    in_link_at_drops: tuple[int, int] | None = None  # (fewest, most) in the link at a drop
    opportunities: int | None = None  # delivery opportunities logged
    capacity_mbps: float | None = None  # opportunities per second × 1500 bytes
    dispersion: float | None = None  # variance / mean of opportunities per window

    @property
    def deliveries(self) -> Deliveries | None:
        return None if self.dispersion is None else classify_deliveries(self.dispersion)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.in_link_at_drops is not None:
            out["in_link_at_drops"] = list(self.in_link_at_drops)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunEvidence:
        known = {f.name: data[f.name] for f in fields(cls) if data.get(f.name) is not None}
        if "in_link_at_drops" in known:
            low, high = known["in_link_at_drops"]
            known["in_link_at_drops"] = (int(low), int(high))
        return cls(**known)


def classify_deliveries(dispersion: float) -> Deliveries:
    """Constant, Poisson or otherwise variable deliveries from the dispersion of opportunities."""
    if dispersion < CONSTANT_DISPERSION:
        return "constant"
    low, high = POISSON_DISPERSION
    return "poisson" if low <= dispersion <= high else "variable"


def opportunity_summary(times_ms: np.ndarray) -> tuple[int, float | None, float | None]:
    """(opportunities, capacity Mbit/s, dispersion) of a log's delivery-opportunity times."""
    n = int(times_ms.size)
    if n < 2:
        return n, None, None
    t = np.sort(np.asarray(times_ms, dtype=np.float64))
    span = float(t[-1] - t[0])
    if span <= 0:
        return n, None, None
    # n opportunities span n - 1 gaps; 5000 opportunities a minute are 1 Mbit/s (calibrate.trace)
    capacity = (n - 1) / span * 60_000.0 / OPPORTUNITIES_PER_MINUTE_PER_MBPS
    window = max(DISPERSION_WINDOW_MS, DISPERSION_WINDOW_OPPORTUNITIES * span / (n - 1))
    full = int(span // window)
    dispersion = None
    if full >= 20:
        counts = np.bincount(((t - t[0]) // window).astype(np.int64), minlength=full + 1)[:full]
        dispersion = float(counts.var() / counts.mean()) if counts.mean() > 0 else None
    return n, capacity, dispersion


def quantile_margin_pp(n: int) -> float:
    """Percentage points below 95 at which the link's delays are taken for the delay bound:
    `QUANTILE_MARGIN_SE` standard errors of an empirical 95th percentile of n packets."""
    q = DELAY_PERCENTILE / 100.0
    return 100.0 * QUANTILE_MARGIN_SE * math.sqrt(q * (1.0 - q) / max(n, 1))


def link_evidence(log: LinkLog) -> dict[str, Any]:
    """The link-log fields of a RunEvidence (no propagation: that needs the run's p95)."""
    kind = log.kind
    plus, minus, drop = kind == "+", kind == "-", kind == "d"
    # A DropTail drop is logged right after the arrival it refuses, which never entered the
    # link: neither line changes the count.  (A drop with no arrival before it, as DropHead's,
    # removes packets that were in.)
    refused = plus & np.append(drop[1:], False)
    refusal = drop & np.append(False, plus[:-1])
    step = plus.astype(np.int64) - minus.astype(np.int64) - np.where(drop, log.size, 0)
    step[refused | refusal] = 0
    in_link = np.cumsum(step)
    drop_rows = np.flatnonzero(drop)
    at_drops = in_link[drop_rows]  # packets in the link when the refused arrival came
    delays = log.departure_delays
    n, capacity, dispersion = opportunity_summary(log.opportunities)
    return {
        "packets": int(minus.sum()),
        "max_link_delay_ms": float(delays.max()) if delays.size else None,
        "max_in_link": int(in_link.max()) if in_link.size else 0,
        "drops": int(log.size[drop].sum()),
        "in_link_at_drops": (int(at_drops.min()), int(at_drops.max())) if at_drops.size else None,
        "opportunities": n if n else None, "capacity_mbps": capacity, "dispersion": dispersion,
    }


def run_evidence(label: str, run: int, *, datalink: DatalinkLog | None = None,
                 link: LinkLog | None = None, one_way_p95_ms: float | None = None) -> RunEvidence:
    """One run's evidence from whichever of its two logs are given."""
    values: dict[str, Any] = {"packets": 0}
    if datalink is not None:
        delays = datalink.departure_delay
        values["packets"] = int(delays.size)
        values["min_delay_ms"] = float(delays.min()) if delays.size else None
        n, capacity, dispersion = opportunity_summary(datalink.opportunity_ts)
        if n:
            values.update(opportunities=n, capacity_mbps=capacity, dispersion=dispersion)
    if link is not None:
        found = link_evidence(link)
        if not found["opportunities"]:  # keep the tunnel log's, if it had some
            for key in ("opportunities", "capacity_mbps", "dispersion"):
                found.pop(key)
        values.update(found)
        delays = link.departure_delays
        if one_way_p95_ms is not None and delays.size:
            q = DELAY_PERCENTILE - quantile_margin_pp(delays.size)
            values["propagation_ms"] = one_way_p95_ms - percentile_nearest(delays)
            values["propagation_max_ms"] = one_way_p95_ms - percentile_nearest(delays, max(q, 50.0))
    return RunEvidence(label, run, **values)


# ----------------------------------------------------------------------------------------------
# A target's runs, pooled


@dataclass(frozen=True)
class PathEvidence:
    """A target's per-run evidence and what it says about the path, pooled over every run.

    Each pooled value is a physical statement (documented on it) or None where no log gives it.
    """

    runs: tuple[RunEvidence, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "runs", tuple(sorted(self.runs, key=lambda r: (r.label, r.run))))

    def of_schemes(self, labels: Collection[str]) -> PathEvidence:
        """The evidence of these target labels' runs only."""
        keep = set(labels)
        return PathEvidence(tuple(r for r in self.runs if r.label in keep))

    @property
    def labels(self) -> list[str]:
        return list(dict.fromkeys(r.label for r in self.runs))

    def _values(self, name: str) -> list[Any]:
        return [getattr(r, name) for r in self.runs if getattr(r, name) is not None]

    @property
    def min_delay_ms(self) -> float | None:
        """The smallest one-way delay any packet saw: the propagation delay is at most this."""
        return min(self._values("min_delay_ms"), default=None)

    @property
    def propagation_max_ms(self) -> float | None:
        """Upper bound on the propagation (mm-delay) delay from the link logs (module docstring)."""
        return min(self._values("propagation_max_ms"), default=None)

    @property
    def propagation_ms(self) -> float | None:
        """The propagation delay's estimate: the median over runs of p95 one-way − p95 in link."""
        values = self._values("propagation_ms")
        return float(np.median(values)) if values else None

    @property
    def propagation_interval_ms(self) -> tuple[float, float] | None:
        """The propagation delays the link logs do not tell apart: from the estimate
        (`propagation_ms`) less what the host may add (`HOST_ALLOWANCE_MS`) to the bound
        (`propagation_max_ms`); None without link logs and the runs' p95."""
        estimate, bound = self.propagation_ms, self.propagation_max_ms
        if estimate is None or bound is None:
            return None
        return max(min(estimate - HOST_ALLOWANCE_MS, bound), 0.0), bound

    @property
    def max_link_delay_ms(self) -> float | None:
        return max(self._values("max_link_delay_ms"), default=None)

    @property
    def link_logged_runs(self) -> int:
        return len(self._values("drops"))

    @property
    def dropping_runs(self) -> int:
        return sum(1 for d in self._values("drops") if d > 0)

    @property
    def drops(self) -> int | None:
        values = self._values("drops")
        return sum(values) if values else None

    @property
    def queue_at_least(self) -> int | None:
        """The DropTail limit is at least this many packets: the queue never held more than its
        limit, and the link's count can include one packet in transit; at a drop the queue held
        exactly its limit."""
        counts = self._values("max_in_link") + [high for _, high in self._values("in_link_at_drops")]
        return max(max(counts) - 1, 0) if counts else None

    @property
    def queue_at_most(self) -> int | None:
        """The DropTail limit is at most this (only where the queue dropped): an arrival is
        dropped only when the limit's worth of packets wait."""
        return min((low for low, _ in self._values("in_link_at_drops")), default=None)

    @property
    def capacity_mbps(self) -> float | None:
        """The link's mean delivery rate over the logged runs."""
        values = self._values("capacity_mbps")
        return float(np.mean(values)) if values else None

    @property
    def capacity_noise(self) -> float | None:
        """Relative standard error of a run's capacity, 1/√(its opportunities) (Poisson counts;
        the runs replay one trace, so they are not pooled)."""
        counts = [r.opportunities for r in self.runs if r.capacity_mbps is not None and r.opportunities]
        return 1.0 / math.sqrt(min(counts)) if counts else None

    @property
    def deliveries(self) -> Deliveries | None:
        """Constant, Poisson or variable, from the median dispersion over the runs."""
        values = self._values("dispersion")
        return classify_deliveries(float(np.median(values))) if values else None

    def to_json(self) -> dict[str, Any]:
        """The runs, and the pooled statements (`summary`) for a reader's convenience; only the
        runs are read back."""
        return {"runs": [r.to_json() for r in self.runs], "path": self.summary()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PathEvidence:
        return cls(tuple(RunEvidence.from_json(r) for r in data["runs"]))

    def summary(self) -> dict[str, Any]:
        """The pooled statements, for `calibrate target show --json` and reports."""
        return {"min_delay_ms": self.min_delay_ms, "propagation_ms": self.propagation_ms,
                "propagation_max_ms": self.propagation_max_ms,
                "max_link_delay_ms": self.max_link_delay_ms,
                "queue_at_least": self.queue_at_least, "queue_at_most": self.queue_at_most,
                "drops": self.drops, "dropping_runs": self.dropping_runs,
                "link_logged_runs": self.link_logged_runs, "capacity_mbps": self.capacity_mbps,
                "capacity_noise": self.capacity_noise, "deliveries": self.deliveries}
