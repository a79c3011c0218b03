"""Trace generation (Pantheon's constant traces exactly, seeded Poisson deliveries) and checks."""

import math

import numpy as np
import pytest

from calibrate import trace
from calibrate.errors import InputError


@pytest.mark.parametrize("rate, lines", [(12, 60_000), (100.42, 502_100), (77.72, 388_600), (114.68, 573_400),
                                         (50, 250_000)])
def test_constant_traces_are_pantheons(rate, lines):
    times = trace.constant(rate)
    assert len(times) == lines
    assert times[0] == 0
    assert np.all(np.diff(times) >= 0)
    # linspace(0, 60000, N, endpoint=False) truncated: the k-th opportunity is k * 60000 / N
    # rounded down (up to float rounding), and the period is 59 999 ms as in Pantheon's files.
    exact = np.arange(len(times)) * 60_000 / lines
    assert np.all((exact - times > -1e-6) & (exact - times <= 1))
    assert times[-1] == 59_999


def test_12_mbps_is_one_opportunity_per_millisecond():
    assert np.array_equal(trace.constant(12), np.arange(60_000))


def test_poisson_traces_are_seeded_exponential_deliveries():
    a = trace.poisson(3.04, seed=1)
    assert np.array_equal(a, trace.poisson(3.04, seed=1))
    assert not np.array_equal(a, trace.poisson(3.04, seed=2))
    assert a[-1] >= 60_000 and a[-2] < 60_000
    rate = len(a) * 12 / a[-1]  # opportunities per ms * 12 = Mbit/s
    assert abs(rate - 3.04) / 3.04 < 0.03
    gaps = np.diff(a)
    mean = 12 / 3.04
    assert abs(gaps.std() / gaps.mean() - 1) < 0.08  # exponential: CV = 1
    # Rounded exponential gaps: P(gap = 0) = 1 - exp(-0.5 / mean).
    assert abs((gaps == 0).mean() - (1 - np.exp(-0.5 / mean))) < 0.02


def test_written_traces_are_accepted_by_the_engine(tmp_path):
    path = trace.write(trace.poisson(0.57, seed=3), tmp_path / "p.trace")
    info = trace.describe(path)
    assert info.opportunities == len(trace.poisson(0.57, seed=3))
    assert abs(info.rate_mbps - 0.57) / 0.57 < 0.05
    constant = trace.describe(trace.write(trace.constant(100.42), tmp_path / "c.trace"))
    assert constant.period_ms == 59_999
    assert abs(constant.rate_mbps - 100.42) < 0.01


def test_bad_traces_and_rates_are_refused(tmp_path):
    bad = tmp_path / "bad.trace"
    bad.write_text("3\n2\n")
    with pytest.raises(InputError, match="monotonically nondecreasing"):
        trace.describe(bad)
    with pytest.raises(InputError, match="at least"):
        trace.constant(0)
    with pytest.raises(InputError, match="at least"):
        trace.poisson(float("nan"), seed=0)


@pytest.mark.parametrize("rate", [0.57, 3.04, 12.0, 48.0, 100.0, 300.0])
def test_a_poisson_trace_delivers_the_rate_it_is_given(rate):
    """Rounded exponential gaps (Pantheon's method) drawn for the rate itself would deliver
    24·sinh(R/24): +28 % at 30 Mbit/s, ×7.7 at 100, and never end past ~150. The gaps are drawn
    for the rate that delivers R, so a Poisson emulator's rate means what a constant one's does."""
    times = trace.poisson(rate, seed=11)
    delivered = len(times) * 12.0 / times[-1]
    # a minute holds rate x 5000 opportunities, a Poisson count: 4 of its standard errors
    assert delivered == pytest.approx(rate, rel=max(0.01, 4 / math.sqrt(rate * 5000)))
    assert trace.poisson_effective_rate(trace.poisson_nominal_rate(rate)) == pytest.approx(rate)
