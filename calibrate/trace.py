"""Delivery-opportunity traces (Mahimahi's format): generated, written and checked here.

A trace line is one opportunity of one 1500-byte IP packet (1504 bytes with the TUN header)
at an integer millisecond; the schedule repeats with period = the last value.

* Constant rate: Pantheon's traces, exactly: ``N = round(R * 5000)`` opportunities at
  ``linspace(0, 60000, N, endpoint=False)`` truncated to integers (this reproduces the constant
  traces of StanfordSNR/pantheon-traces, e.g. 77.72mbps.trace, byte for byte).
* Poisson deliveries: cumulative sums of exponential gaps rounded to whole milliseconds, with
  mean ``12 / R`` ms, seeded, until the sum reaches 60 000 ms (the method of
  ``train_and_gen_poisson_trace.py`` in StanfordLPNG/replication_with_emulation).

Validation of trace files (Mahimahi's rules) lives in one place, the engine, which reads them:
``describe()`` asks it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calibrate import binaries
from calibrate.errors import InputError

PERIOD_MS = 60_000
#: 1 Mbit/s of 1500-byte packets is 1e6 / 12000 = 83.3 packets/s, i.e. 5000 per minute.
OPPORTUNITIES_PER_MINUTE_PER_MBPS = 5000
MIN_RATE_MBPS = 0.001


def _check_rate(rate_mbps: float) -> None:
    if not (math.isfinite(rate_mbps) and rate_mbps >= MIN_RATE_MBPS):
        raise InputError(f"a trace rate must be at least {MIN_RATE_MBPS} Mbit/s, got {rate_mbps!r}")


def constant(rate_mbps: float) -> np.ndarray:
    """Pantheon's constant-rate trace for ``rate_mbps`` (one minute, isochronous)."""
    _check_rate(rate_mbps)
    # Python 2's round() (half away from zero), as in the generator that made Pantheon's traces.
    count = int(math.floor(rate_mbps * OPPORTUNITIES_PER_MINUTE_PER_MBPS + 0.5))
    return np.linspace(0, PERIOD_MS, count, endpoint=False).astype(np.int64)


def poisson(rate_mbps: float, seed: int) -> np.ndarray:
    """A Poisson-delivery trace delivering ``rate_mbps`` on average.

    Pantheon's method (above): a running sum of exponential gaps rounded to whole
    ms.  Rounding makes such a trace deliver more than the rate its gaps were drawn for
    (`poisson_effective_rate`: +0.26 % at 3 Mbit/s, +28 % at 30, ×7.7 at 100, and past
    ~150 Mbit/s nearly every gap is 0 and the sum never reaches a minute), so the gaps are drawn
    for `poisson_nominal_rate(rate_mbps)`: at Pantheon's Poisson rates (0.57–3.04 Mbit/s) the
    same traces, and at any rate one that delivers what it says."""
    _check_rate(rate_mbps)
    mean_gap_ms = 12.0 / poisson_nominal_rate(rate_mbps)
    rng = np.random.default_rng(seed)
    # Gaps of at least one ms: about PERIOD / E[round gap] of the draws move time forward.
    expected = int(PERIOD_MS * rate_mbps / 12.0 * 1.05) + 64
    gaps = np.empty(0, dtype=np.int64)
    total = 0
    while total < PERIOD_MS:
        more = np.rint(rng.exponential(mean_gap_ms, size=expected)).astype(np.int64)
        gaps = np.concatenate([gaps, more])
        total = int(gaps.sum())
    times = np.cumsum(gaps)
    # Keep opportunities up to the first one at or past a minute: that one sets the period.
    return times[: int(np.searchsorted(times, PERIOD_MS, side="left")) + 1]


def poisson_effective_rate(rate_mbps: float) -> float:
    """The mean rate, in Mbit/s, of a trace of exponential gaps drawn for ``rate_mbps`` and
    rounded to whole ms (Pantheon's method).

    Gaps are exponential with mean μ = 12 / R ms, and E[round X] = Σ_k P(X ≥ k + ½) =
    e^(−1/2μ) / (1 − e^(−1/μ)), so the trace delivers 12 / E[round X] = 24 · sinh(R / 24) Mbit/s.
    """
    gap_ms = PERIOD_MS / OPPORTUNITIES_PER_MINUTE_PER_MBPS  # 12 ms at 1 Mbit/s
    return float(2 * gap_ms * math.sinh(rate_mbps / (2 * gap_ms)))


def poisson_nominal_rate(effective_mbps: float) -> float:
    """The rate R whose rounded exponential gaps deliver ``effective_mbps``
    (`poisson_effective_rate`'s inverse, 24 · asinh(effective / 24)); at most ``effective_mbps``."""
    gap_ms = PERIOD_MS / OPPORTUNITIES_PER_MINUTE_PER_MBPS
    return float(2 * gap_ms * math.asinh(effective_mbps / (2 * gap_ms)))


def write(times: np.ndarray, path: Path) -> Path:
    """Write a trace file atomically (a reader never sees half of it), readable by every user
    (Mahimahi's shells run as an unprivileged one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(str(int(t)) for t in times) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes it 0600
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


@dataclass(frozen=True)
class TraceInfo:
    path: Path
    opportunities: int
    period_ms: int
    rate_mbps: float


def describe(path: Path) -> TraceInfo:
    """Check a trace file with Mahimahi's rules and report its rate (asks the engine)."""
    result = subprocess.run(
        [str(binaries.find(binaries.LINK)), "trace-info", str(path)], capture_output=True, text=True
    )
    if result.returncode != 0:
        message = result.stderr.strip().removeprefix("calibrate-link: error: ")
        raise InputError(f"bad trace: {message}")
    (info,) = json.loads(result.stdout)
    return TraceInfo(Path(info["path"]), info["opportunities"], info["period_ms"], info["rate_mbps"])
