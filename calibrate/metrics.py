"""Pantheon's analysis math: the one implementation, for real archives and emulated runs alike.

A run's merged datalink log (Pantheon's `src/experiments/merge_tunnel_logs.py` writes it) becomes
per-flow and total ("all") throughput, 95th percentile one-way delay and loss, exactly as Pantheon's
`src/analysis/tunnel_graph.py` computes them; runs are judged valid or not as `src/analysis/plot.py`
does; valid runs are aggregated.  The same module writes and reads the two files Pantheon derives
from the logs, `<cc>_stats_run<N>.log` (plot.py appends its `# Datalink statistics` block) and
`pantheon_perf.json` (plot.py, since May 2018), so emulated runs land in Pantheon's data-dir layout
with these numbers.

Units everywhere: throughput Mbit/s, delay ms, loss a fraction in [0, 1] (logs print it in %),
sizes bytes as logged (Pantheon's: outer tunnel datagrams, the inner packet + 36 bytes).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from calibrate.errors import InputError
from calibrate.jsonfile import read_json
from calibrate.targets.bounds import BOUNDS, declared

# plot.py discards a run whose departure window is shorter than this fraction of the runtime
# (0.75 in Jan 2017, 0.8 since June 2017).
RUN_VALIDITY_FRACTION = 0.8
DELAY_PERCENTILE = 95.0
# Population std, as Pantheon's compare_two_experiments.py (np.std) and the bundled table use,
# so our spreads are comparable with published ones.
STD_DDOF = 0
TOTAL = "all"  # the key Pantheon uses for the aggregate of all flows

# A datalink log is small text; past this it is not a log of a <=60 s run, and reading it whole
# would exhaust memory (a 100 Mbit/s run for 60 s is about 30 MB).
MAX_LOG_BYTES = 2 * 1024**3


# ----------------------------------------------------------------------------------------------
# Values


Role = Literal["measurement", "emulated", "reference"]


@dataclass(frozen=True)
class Stats:
    """One measurement, the three numbers every Pantheon source gives per run and flow: a run's,
    a flow's, or an aggregate over runs.  Its JSON spelling is Pantheon's (pantheon_perf.json's)
    and the only one: a target's runs, run.json, the run journal, result.json and emulator.json."""

    throughput: float  # Mbit/s
    delay: float | None  # p95 one-way delay of delivered packets, ms; None if none was delivered
    loss: float | None  # byte-weighted fraction, not percent; None if nothing entered the path

    def to_json(self) -> dict[str, float | None]:
        return {"tput": self.throughput, "delay": self.delay, "loss": self.loss}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Stats:
        """The inverse of `to_json`; a value's own bounds are `problem`'s to judge."""
        return cls(float(data["tput"]), _opt_float(data.get("delay")), _opt_float(data.get("loss")))

    def problem(self, role: Role = "measurement") -> str | None:
        """Why these numbers cannot play `role`, or None when they can.

        - "measurement": numbers no measurement can have (`impossible`, the one physical rule);
          a flow that delivered nothing has no delay, one that sent nothing no loss.
        - "emulated" (an emulated run, to be scored): besides, every metric measured and some
          throughput.  A p95 of 0 ms (an emulator without delay, at whole-ms resolution) counts.
        - "reference" (the target's side of f): besides, a delay above 0, which f divides by.
        """
        try:
            values = tuple(None if v is None else float(v)
                           for v in (self.throughput, self.delay, self.loss))
        except (TypeError, ValueError):
            return f"non-numeric statistics {(self.throughput, self.delay, self.loss)}"
        physical = impossible(*values)
        if physical or role == "measurement":
            return physical
        tput, delay, loss = values
        if delay is None or loss is None:
            return f"not every metric was measured {values}"
        assert tput is not None
        if tput <= 0:
            return f"no throughput ({tput} Mbit/s)"
        if role == "reference" and delay <= 0:
            return f"no delay measured ({delay} ms): the delay error divides by it"
        return None


def impossible(tput: float | None, delay: float | None, loss: float | None) -> str | None:
    """Why (throughput Mbit/s, p95 one-way delay ms, loss fraction) cannot be measured values,
    or None: a throughput or delay is a finite number >= 0, a loss a fraction in [0, 1]."""
    if tput is not None and not (math.isfinite(tput) and tput >= 0):
        return f"throughput {tput:g} Mbit/s is impossible (a throughput is finite and >= 0)"
    if delay is not None and not (math.isfinite(delay) and delay >= 0):
        return f"p95 one-way delay {delay:g} ms is impossible (a delay is finite and >= 0)"
    if loss is not None and not (math.isfinite(loss) and 0 <= loss <= 1):
        return (f"loss {100 * loss:g} % is impossible (a loss is 0-100 %; summary tables hold "
                f"it in %, pantheon_perf.json and target JSON as a fraction)")
    return None


@dataclass(frozen=True)
class FlowStats:
    """One flow (or the total) of one run, with the counts the metrics were made from."""

    tput_mbps: float
    delay_ms: float | None
    loss: float | None
    arrived_bytes: int
    departed_bytes: int
    departed_packets: int
    window_ms: float  # first to last departure; throughput's denominator

    @property
    def metrics(self) -> Stats:
        return Stats(self.tput_mbps, self.delay_ms, self.loss)


@dataclass(frozen=True)
class RunStats:
    """Everything Pantheon derives from one merged datalink log."""

    total: FlowStats
    flows: Mapping[int, FlowStats]  # flow id -> stats; id 0 = a log without flow column
    capacity_mbps: float | None  # from `#` delivery-opportunity lines (emulated links only)
    init_timestamp_ms: float | None  # epoch ms of the log's time zero, when the header has it

    @property
    def duration_ms(self) -> float:
        """Pantheon's `duration`: the global departure window."""
        return self.total.window_ms

    @property
    def utilization(self) -> float | None:
        if not self.capacity_mbps:
            return None
        return self.total.tput_mbps / self.capacity_mbps

    def metrics(self) -> dict[str, Stats]:
        """Keyed like pantheon_perf.json: "all" plus one string key per flow id other than 0."""
        out = {TOTAL: self.total.metrics}
        out.update({str(flow): stats.metrics for flow, stats in sorted(self.flows.items()) if flow})
        return out


@dataclass(frozen=True)
class Validity:
    valid: bool
    reason: str | None = None  # why the run is invalid, for a person


@dataclass(frozen=True)
class Aggregate:
    """A metric over the valid runs.  `n` counts the runs that had a value."""

    mean: float | None
    median: float | None
    std: float | None
    n: int
    ddof: int = STD_DDOF

    def to_json(self) -> dict[str, float | int | None]:
        return {"mean": self.mean, "median": self.median, "std": self.std, "n": self.n,
                "ddof": self.ddof}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Aggregate:
        return cls(_opt_float(data.get("mean")), _opt_float(data.get("median")),
                   _opt_float(data.get("std")), int(data.get("n", 0)), int(data.get("ddof", STD_DDOF)))


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


# ----------------------------------------------------------------------------------------------
# Math


def percentile_nearest(values: np.ndarray, q: float = DELAY_PERCENTILE) -> float:
    """numpy's `nearest` percentile: element round_half_even(q/100*(n-1)) of the sorted values.

    Pantheon calls np.percentile(..., interpolation='nearest'); that keyword is gone in NumPy 2
    (and plot.py, catching the TypeError, then marks every run invalid), `method=` is its replacement."""
    if len(values) == 0:
        raise ValueError("percentile of no values")
    return float(np.percentile(values, q, method="nearest"))


def aggregate(values: Iterable[float | None], ddof: int = STD_DDOF) -> Aggregate:
    """Mean (Pantheon's report and the paper), median (the 2017 calibration scorer) and std."""
    data = np.array([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)
    if data.size == 0:
        return Aggregate(None, None, None, 0, ddof)
    std = float(np.std(data, ddof=ddof)) if data.size > ddof else None
    return Aggregate(float(np.mean(data)), float(np.median(data)), std, int(data.size), ddof)


def check_run(stats: RunStats, runtime_s: float) -> Validity:
    """plot.py's rule: a run whose departures span less than 80 % of the runtime is discarded."""
    if stats.total.departed_packets == 0:
        return Validity(False, "no packet was delivered")
    needed_ms = RUN_VALIDITY_FRACTION * runtime_s * 1000.0
    if stats.duration_ms < needed_ms:
        return Validity(False, f"departures span {stats.duration_ms / 1000:.2f} s, less than "
                               f"{RUN_VALIDITY_FRACTION:.0%} of the {runtime_s:g} s runtime")
    return Validity(True)


def _flow_stats(arrived_bytes: int, dep_ts: np.ndarray, dep_bytes: np.ndarray,
                dep_delay: np.ndarray) -> FlowStats:
    departed = int(dep_bytes.sum())
    window = float(dep_ts.max() - dep_ts.min()) if dep_ts.size else 0.0
    # bits per microsecond = Mbit/s; N packets over N-1 gaps, as Pantheon (first packet counted).
    tput = departed * 8 / (1000.0 * window) if window > 0 else 0.0
    delay = percentile_nearest(dep_delay) if dep_delay.size else None
    loss = 1.0 - departed / arrived_bytes if arrived_bytes > 0 else None
    return FlowStats(tput, delay, loss, int(arrived_bytes), departed, int(dep_ts.size), window)


@dataclass(frozen=True)
class DatalinkLog:
    """A parsed merged datalink log: one array per column and event kind."""

    arrival_ts: np.ndarray
    arrival_bytes: np.ndarray
    arrival_flow: np.ndarray
    departure_ts: np.ndarray
    departure_bytes: np.ndarray
    departure_delay: np.ndarray
    departure_flow: np.ndarray
    opportunity_ts: np.ndarray
    opportunity_bytes: np.ndarray
    init_timestamp_ms: float | None


def run_stats(log: DatalinkLog) -> RunStats:
    """tunnel_graph.py's per-run metrics on a parsed log."""
    flow_ids = sorted(set(np.unique(log.arrival_flow).tolist())
                      | set(np.unique(log.departure_flow).tolist()))
    flows: dict[int, FlowStats] = {}
    for flow in flow_ids:
        arr = log.arrival_flow == flow
        dep = log.departure_flow == flow
        flows[int(flow)] = _flow_stats(int(log.arrival_bytes[arr].sum()), log.departure_ts[dep],
                                       log.departure_bytes[dep], log.departure_delay[dep])
    # "all" is the aggregate over the global window and pooled delays, not a sum of flow rates.
    total = _flow_stats(int(log.arrival_bytes.sum()), log.departure_ts, log.departure_bytes,
                        log.departure_delay)
    capacity = None
    if log.opportunity_ts.size >= 2:
        span = float(log.opportunity_ts.max() - log.opportunity_ts.min())
        if span > 0:
            capacity = float(log.opportunity_bytes.sum()) * 8 / (1000.0 * span)
    return RunStats(total, flows, capacity, log.init_timestamp_ms)


def analyze_datalink_log(path: Path | str) -> RunStats:
    """Parse a merged datalink log and compute its statistics."""
    return run_stats(parse_datalink_log(path))


# ----------------------------------------------------------------------------------------------
# Datalink log parsing

_NUM = rb"-?(?:\d+(?:\.\d*)?|\.\d+)"
# ts kind bytes [delay-or-flow] [flow]; `d` (drop) lines appear only in raw mm-link logs.
_EVENT_RE = re.compile(
    rb"^[ \t]*(" + _NUM + rb")[ \t]+([-+#d])[ \t]+(\d+)(?:[ \t]+(" + _NUM + rb"))?"
    rb"(?:[ \t]+(" + _NUM + rb"))?[ \t]*\r?$", re.M)
_COMMENT_OR_BLANK_RE = re.compile(rb"^[ \t]*(?:#[^\n]*)?$", re.M)
_INIT_RE = re.compile(rb"^#[ \t]*init timestamp:[ \t]*(" + _NUM + rb")", re.M)
_BASE_RE = re.compile(rb"^#[ \t]*base timestamp:[ \t]*(" + _NUM + rb")", re.M)
_NUM_FULL = re.compile(_NUM.decode() + "$")
_INT_FULL = re.compile(r"\d+$")


def _line_problem(line: str) -> str | None:
    """Why one line is not valid datalink-log grammar (slow path, used only to report errors)."""
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return None
    fields = stripped.split()
    if len(fields) < 3:
        return "expected 'TIME KIND BYTES ...', got fewer than 3 fields"
    ts, kind, size, rest = fields[0], fields[1], fields[2], fields[3:]
    if not _NUM_FULL.match(ts):
        return f"timestamp {ts!r} is not a number"
    if kind not in ("+", "-", "#", "d"):
        return f"event kind {kind!r} is none of '+' (sent), '-' (delivered), '#' (opportunity)"
    if not _INT_FULL.match(size):
        return f"size {size!r} is not a whole number of bytes"
    allowed = {"+": (0, 1), "-": (1, 2), "#": (0, 0), "d": (0, 1)}[kind]
    if not allowed[0] <= len(rest) <= allowed[1]:
        shapes = {"+": "TIME + BYTES [FLOW]", "-": "TIME - BYTES DELAY [FLOW]", "#": "TIME # BYTES",
                  "d": "TIME d PACKETS [BYTES]"}
        return f"a '{kind}' line has the form '{shapes[kind]}', got {len(fields)} fields"
    for value in rest:
        if not _NUM_FULL.match(value):
            return f"{value!r} is not a number"
    # flow ids must be whole numbers
    flow = rest[-1] if (kind == "+" and rest) or (kind == "-" and len(rest) == 2) else None
    if flow is not None and not _INT_FULL.match(flow):
        return f"flow id {flow!r} is not a whole number"
    return None


def _first_problem(data: bytes, source: str) -> InputError:
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("ascii")
        except UnicodeDecodeError:
            return InputError(f"{source}:{number}: not a datalink log line (non-ASCII bytes); "
                              "is this a Pantheon datalink log?")
        why = _line_problem(line)
        if why:
            shown = line.strip()
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            return InputError(f"{source}:{number}: malformed datalink log line {shown!r}: {why}")
    return InputError(f"{source}: malformed datalink log (no single bad line found); "
                      "is this a Pantheon datalink log?")


def parse_datalink_log(path: Path | str, data: bytes | None = None) -> DatalinkLog:
    """Parse a Pantheon merged datalink log (or a raw mm-link log, whose lines lack the flow
    column and count as flow 0).  Both the `%.3f` float form and the pre-2017 integer-ms form
    with a `# base timestamp` header are accepted.  Any malformed line raises InputError naming
    the file and line.  `data` may pass the bytes already read (path is then only a label)."""
    source = str(path)
    if data is None:
        try:
            n_bytes = Path(path).stat().st_size
            if n_bytes > MAX_LOG_BYTES:
                raise InputError(f"{source}: {n_bytes} bytes is far more than a datalink log of a "
                                 "<=60 s run; check the file")
            data = Path(path).read_bytes()
        except OSError as error:
            raise InputError(f"{source}: cannot read datalink log: "
                             f"{error.strerror or error}") from None
    body = data[:-1] if data.endswith(b"\n") else data
    n_lines = body.count(b"\n") + 1 if body else 0
    events = _EVENT_RE.findall(body)
    comments = len(_COMMENT_OR_BLANK_RE.findall(body)) if body else 0
    if len(events) + comments != n_lines:
        raise _first_problem(body, source)

    if events:
        table = np.array(events, dtype=np.bytes_)
    else:
        table = np.empty((0, 5), dtype="S1")
    ts = table[:, 0].astype(np.float64)
    kind = table[:, 1]
    size = table[:, 2].astype(np.int64)
    has4 = table[:, 3] != b""
    has5 = table[:, 4] != b""
    plus, minus, opp = kind == b"+", kind == b"-", kind == b"#"
    # Structural rules the regex cannot express: '+' has at most a flow, '-' needs a delay,
    # '#' has nothing after the size.
    bad = (plus & has5) | (minus & ~has4) | (opp & (has4 | has5))
    if bad.any():
        raise _first_problem(body, source)
    col4 = np.zeros(len(table))
    col4[has4] = table[has4, 3].astype(np.float64)
    col5 = np.zeros(len(table))
    col5[has5] = table[has5, 4].astype(np.float64)
    flow_plus, flow_minus = col4[plus], col5[minus]
    if np.any(flow_plus != np.floor(flow_plus)) or np.any(flow_minus != np.floor(flow_minus)):
        raise _first_problem(body, source)
    largest_flow = max(flow_plus.max(initial=0), flow_minus.max(initial=0))
    if largest_flow > BOUNDS["flows"].high:
        declared("flows", largest_flow, f"{source}: its largest flow id", "check the file")

    init = _INIT_RE.search(body) or _BASE_RE.search(body)
    return DatalinkLog(
        arrival_ts=ts[plus], arrival_bytes=size[plus], arrival_flow=flow_plus.astype(np.int64),
        departure_ts=ts[minus], departure_bytes=size[minus], departure_delay=col4[minus],
        departure_flow=flow_minus.astype(np.int64),
        opportunity_ts=ts[opp], opportunity_bytes=size[opp],
        init_timestamp_ms=float(init.group(1)) if init else None)


# ----------------------------------------------------------------------------------------------
# <cc>_stats_run<N>.log

_STATS_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def format_stats_block(stats: RunStats, generated_at: dt.datetime | None = None) -> str:
    """The `# Datalink statistics` block plot.py appends to a stats log."""
    when = (generated_at or dt.datetime.now(dt.UTC)).strftime(_STATS_TIME_FORMAT)
    flows = {k: v for k, v in sorted(stats.flows.items()) if k} or dict(stats.flows)
    n = max(len(flows), 1)
    lines = [f"# Below is generated by calibrate at {when}", "# Datalink statistics",
             f"-- Total of {n} flow{'s' if n != 1 else ''}:"]
    if stats.capacity_mbps:
        lines.append(f"Average capacity: {stats.capacity_mbps:.2f} Mbit/s")
        util = stats.utilization or 0.0
        lines.append(f"Average throughput: {stats.total.tput_mbps:.2f} Mbit/s "
                     f"({100 * util:.1f}% utilization)")
    else:
        lines.append(f"Average throughput: {stats.total.tput_mbps:.2f} Mbit/s")
    lines += _metric_lines(stats.total)
    for flow, flow_stats in flows.items():
        if not flow:
            continue
        lines.append(f"-- Flow {flow}:")
        lines.append(f"Average throughput: {flow_stats.tput_mbps:.2f} Mbit/s")
        lines += _metric_lines(flow_stats)
    return "\n".join(lines) + "\n"


def _metric_lines(stats: FlowStats) -> list[str]:
    delay = "nan" if stats.delay_ms is None else f"{stats.delay_ms:.3f}"
    loss = "nan" if stats.loss is None else f"{100 * stats.loss:.2f}"
    return [f"95th percentile per-packet one-way delay: {delay} ms", f"Loss rate: {loss}%"]


def write_stats_log(path: Path | str, *, start_at: dt.datetime, end_at: dt.datetime,
                    stats: RunStats | None = None, validity: Validity | None = None,
                    clock_offsets_ms: tuple[float, float] | None = None) -> None:
    """Write `<cc>_stats_run<N>.log` as test.py and plot.py leave it.  An invalid run (or one
    without stats) gets no statistics block, as in Pantheon, plus a comment saying why."""
    lines = [f"Start at: {start_at.strftime(_STATS_TIME_FORMAT)}",
             f"End at: {end_at.strftime(_STATS_TIME_FORMAT)}"]
    if clock_offsets_ms is not None:
        lines.append(f"Local clock offset: {clock_offsets_ms[0]} ms")
        lines.append(f"Remote clock offset: {clock_offsets_ms[1]} ms")
    text = "\n".join(lines) + "\n"
    if stats is not None and (validity is None or validity.valid):
        text += "\n" + format_stats_block(stats)
    else:
        reason = validity.reason if validity and validity.reason else "no statistics"
        text += f"\n# Run discarded: {reason}\n"
    Path(path).write_text(text)


@dataclass(frozen=True)
class StatsLog:
    """What a stats log says: times, and the per-flow metrics if the run was analysed and valid."""

    start_at: dt.datetime | None
    end_at: dt.datetime | None
    flows: Mapping[str, Stats] | None  # None: no statistics block (run discarded)
    capacity_mbps: float | None
    discarded_reason: str | None


_FLOAT = r"(-?(?:\d+(?:\.\d*)?|\.\d+)|nan|-?inf)"
_TOTAL_HEAD = re.compile(r"^-- Total of (\d+) flows?:\s*$")
_FLOW_HEAD = re.compile(r"^-- Flow (\d+):\s*$")
_TPUT = re.compile(r"^Average throughput: " + _FLOAT + r" Mbit/s")
_DELAY = re.compile(r"^95th percentile per-packet one-way delay: " + _FLOAT + r" ms\s*$")
_LOSS = re.compile(r"^Loss rate: " + _FLOAT + r"%\s*$")
_CAPACITY = re.compile(r"^Average capacity: " + _FLOAT + r" Mbit/s\s*$")
_TIME = re.compile(r"^(Start|End) at: (.+?)\s*$")


def parse_stats_log(path: Path | str, text: str | None = None) -> StatsLog:
    """Read a Pantheon stats log (any era).  Lines we do not know (clock offsets, comments) are
    skipped; a known line with a bad value raises InputError naming the file and line."""
    source = str(path)
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError as error:
            raise InputError(f"{source}: cannot read stats log: {error.strerror or error}") from None
    start = end = None
    current: str | None = None
    values: dict[str, dict[str, float | None]] = {}
    capacity = None
    seen_block = False
    reason = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if (m := _TIME.match(line)) and current is None:
            try:
                when = dt.datetime.strptime(m.group(2), _STATS_TIME_FORMAT)
            except ValueError:
                raise InputError(f"{source}:{number}: '{m.group(1)} at' time {m.group(2)!r} is "
                                 f"not of the form YYYY-MM-DD HH:MM:SS") from None
            start, end = (when, end) if m.group(1) == "Start" else (start, when)
            continue
        if line.startswith("# Datalink statistics"):
            seen_block = True
            continue
        if line.startswith("# Run discarded:"):
            reason = line.split(":", 1)[1].strip()
            continue
        if not seen_block:
            continue
        if line.startswith("# "):  # the acklink block, if any, ends the datalink block
            if line.startswith("# Acklink"):
                break
            continue
        if _TOTAL_HEAD.match(line):
            current = TOTAL
        elif m := _FLOW_HEAD.match(line):
            current = str(int(m.group(1)))
        elif current is None:
            continue
        elif m := _CAPACITY.match(line):
            capacity = _stats_value(m.group(1), source, number)
        elif m := _TPUT.match(line):
            values.setdefault(current, {})["tput"] = _stats_value(m.group(1), source, number)
        elif m := _DELAY.match(line):
            values.setdefault(current, {})["delay"] = _stats_value(m.group(1), source, number)
        elif m := _LOSS.match(line):
            loss = _stats_value(m.group(1), source, number)
            values.setdefault(current, {})["loss"] = None if loss is None else loss / 100.0
        elif line.startswith(("Average throughput", "95th percentile", "Loss rate")):
            raise InputError(f"{source}:{number}: malformed statistics line {line!r}; expected "
                             "e.g. 'Average throughput: 9.12 Mbit/s', '95th percentile per-packet "
                             "one-way delay: 45.123 ms' or 'Loss rate: 0.52%'")
    if not seen_block:
        return StatsLog(start, end, None, None, reason)
    if TOTAL not in values:
        raise InputError(f"{source}: the '# Datalink statistics' block has no '-- Total of N "
                         "flow' section; the file is truncated or not a Pantheon stats log")
    flows = {}
    for key, vals in values.items():
        missing = [name for name in ("tput", "delay", "loss") if name not in vals]
        if missing:
            raise InputError(f"{source}: flow {key!r} in the statistics block lacks "
                             f"{', '.join(missing)}; the file is truncated or edited")
        tput = vals["tput"]
        flows[key] = Stats(tput if tput is not None else float("nan"), vals["delay"],
                                 vals["loss"])
    return StatsLog(start, end, flows, capacity, reason)


def _stats_value(text: str, source: str, number: int) -> float | None:
    value = float(text)
    return None if math.isnan(value) else value


# ----------------------------------------------------------------------------------------------
# pantheon_perf.json


def perf_json(runs: Mapping[str, Mapping[int, RunStats | Mapping[str, Stats] | None]]
              ) -> dict[str, dict[str, dict[str, dict[str, float | None]]]]:
    """`{cc: {run: {"all"|flow: {tput, delay, loss}}}}` with string keys (plot.py's `pantheon_perf.json`).
    Pass only valid runs, or None for a discarded one (left out, as Pantheon does)."""
    out: dict[str, dict[str, dict[str, dict[str, float | None]]]] = {}
    for cc, by_run in runs.items():
        out[cc] = {}
        for run, stats in sorted(by_run.items()):
            if stats is None:
                continue
            flows = stats.metrics() if isinstance(stats, RunStats) else stats
            out[cc][str(run)] = {key: m.to_json() for key, m in flows.items()}
    return out


def write_perf_json(path: Path | str,
                    runs: Mapping[str, Mapping[int, RunStats | Mapping[str, Stats] | None]]
                    ) -> None:
    Path(path).write_text(json.dumps(perf_json(runs), sort_keys=True, indent=4) + "\n")


def read_perf_json(path: Path | str) -> dict[str, dict[int, dict[str, Stats]]]:
    """Read pantheon_perf.json; a value of the wrong shape raises InputError naming where."""
    data = read_json(path, what="pantheon_perf.json")
    return perf_from_json(data, source=str(path))


def perf_from_json(data: object, source: str) -> dict[str, dict[int, dict[str, Stats]]]:
    def fail(where: str, what: str) -> InputError:
        return InputError(f"{source}: {where}: {what}; expected "
                          '{"<scheme>": {"<run>": {"all": {"tput": .., "delay": .., "loss": ..}}}}')

    if not isinstance(data, dict):
        raise fail("top level", f"is a {type(data).__name__}, not an object")
    out: dict[str, dict[int, dict[str, Stats]]] = {}
    for cc, by_run in data.items():
        if not isinstance(by_run, dict):
            raise fail(f"[{cc!r}]", "is not an object of runs")
        out[cc] = {}
        for run, flows in by_run.items():
            where = f"[{cc!r}][{str(run)[:20]!r}]"
            if not str(run).isdigit():
                raise fail(where, "run ids are whole numbers")
            run_id = declared("run", run, f"{source}: [{cc!r}]", "correct or delete that run")
            if not isinstance(flows, dict) or TOTAL not in flows:
                raise fail(where, f"has no {TOTAL!r} entry")
            entry = {}
            for flow, vals in flows.items():
                if not isinstance(vals, dict):
                    raise fail(f"{where}[{flow!r}]", "is not an object")
                nums = {}
                for key in ("tput", "delay", "loss"):
                    value = vals.get(key)
                    if key == "tput" and value is None:
                        raise fail(f"{where}[{flow!r}]", "'tput' is missing")
                    if value is not None and (isinstance(value, bool)
                                              or not isinstance(value, (int, float))):
                        raise fail(f"{where}[{flow!r}][{key!r}]", f"{value!r} is not a number")
                    nums[key] = None if value is None else float(value)
                tput = nums["tput"]
                assert tput is not None  # a missing 'tput' raised above
                entry[str(flow)] = Stats(tput, nums["delay"], nums["loss"])
            out[cc][run_id] = entry
    return out
