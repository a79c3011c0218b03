"""The replication error against hand-computed values, and its noise estimate."""

import math

import numpy as np
import pytest

from calibrate.errors import InputError
from calibrate.metrics import Stats
from calibrate.objective import Failure, replication_error

REAL = {"cubic": Stats(10.0, 50.0, 0.01), "vegas": Stats(2.0, 40.0, 0.0)}


def test_paper_formula_by_hand():
    emulated = {"cubic": [Stats(12.0, 45.0, 0.02)], "vegas": [Stats(1.5, 40.0, 0.004)]}
    r = replication_error(REAL, emulated)
    # cubic: (|12-10|/10 + |45-50|/50) / 2 = (0.2 + 0.1) / 2 = 0.15
    # vegas: (|1.5-2|/2 + 0) / 2 = 0.125;  f = 100 x mean(0.15, 0.125)
    assert r.f == pytest.approx(13.75)
    assert r.throughput == pytest.approx(22.5)  # mean(20 %, 25 %)
    assert r.delay == pytest.approx(5.0)  # mean(10 %, 0 %)
    # loss: cubic |0.02 - 0.01| / 0.01 = 1; vegas |0.004 - 0| / max(0, 0.1 %) = 4
    assert r.loss == pytest.approx(250.0)
    assert [s.key for s in r.schemes] == ["cubic", "vegas"]
    assert r.schemes[0].throughput == pytest.approx(0.2)
    assert r.dropped == () and r.penalized == {}


def test_loss_enters_f_only_when_asked():
    emulated = {"cubic": [Stats(12.0, 45.0, 0.02)], "vegas": [Stats(1.5, 40.0, 0.004)]}
    with_loss = replication_error(REAL, emulated, include_loss=True)
    # cubic (0.2 + 0.1 + 1) / 3, vegas (0.25 + 0 + 4) / 3
    assert with_loss.f == pytest.approx(100 * ((1.3 / 3) + (4.25 / 3)) / 2)
    assert with_loss.loss == replication_error(REAL, emulated).loss


def test_replicates_are_aggregated_by_mean_or_median():
    emulated = {"cubic": [Stats(9.0, 50.0, 0.01), Stats(10.0, 50.0, 0.01), Stats(14.0, 50.0, 0.01)],
                "vegas": [Stats(2.0, 40.0, 0.0)] * 3}
    mean = replication_error(REAL, emulated)
    assert mean.schemes[0].emulated.throughput == pytest.approx(11.0)
    assert mean.f == pytest.approx(100 * (0.1 / 2 + 0) / 2)
    median = replication_error(REAL, emulated, aggregate="median")
    assert median.schemes[0].emulated.throughput == 10.0
    assert median.f == 0.0
    with pytest.raises(InputError):
        replication_error(REAL, emulated, aggregate="mode")


def test_only_common_schemes_count_and_dropped_are_reported():
    real = {**REAL, "sprout": Stats(3.0, 60.0, 0.0)}
    emulated = {"cubic": [Stats(10.0, 50.0, 0.01)], "vegas": [Stats(2.0, 40.0, 0.0)],
                "bbr": [Stats(1.0, 1.0, 0.0)]}
    r = replication_error(real, emulated)
    assert r.f == 0.0
    assert r.dropped == ("sprout",) and r.ignored == ("bbr",)
    with pytest.raises(InputError, match="no scheme"):
        replication_error({"sprout": Stats(3.0, 60.0, 0.0)}, emulated)


def test_failed_schemes_are_penalized_with_their_reason():
    emulated = {"cubic": [Failure("sender crashed"), Failure("sender crashed")],
                "vegas": [Stats(2.0, 40.0, 0.0)]}
    r = replication_error(REAL, emulated, penalty=2.0)
    assert r.penalized == {"cubic": "sender crashed; sender crashed"}
    assert r.schemes[0].emulated is None
    assert r.f == pytest.approx(100 * (2.0 + 0.0) / 2)  # (2 + 2) / 2 for cubic, 0 for vegas
    # invalid numbers count as failures too
    r = replication_error(REAL, {"cubic": [Stats(0.0, math.nan, 0.0)], "vegas": [Stats(2, 40, 0)]})
    assert "cubic" in r.penalized and "invalid run" in r.penalized["cubic"]


def test_partial_failure_uses_the_valid_replicates_and_records_it():
    emulated = {"cubic": [Stats(12.0, 45.0, 0.01), Failure("timeout")],
                "vegas": [Stats(2.0, 40.0, 0.0)]}
    r = replication_error(REAL, emulated)
    assert r.penalized == {}
    assert r.schemes[0].replicates == 1 and r.schemes[0].failures == ("timeout",)
    assert r.f == pytest.approx(100 * 0.15 / 2)


def test_multi_flow_keys_are_averaged_like_schemes():
    real = {("cubic", 1): Stats(5.0, 50.0, 0.0), ("cubic", 2): Stats(5.0, 50.0, 0.0),
            ("vegas", 1): Stats(2.0, 40.0, 0.0)}
    emulated = {("cubic", 1): [Stats(6.0, 50.0, 0.0)], ("cubic", 2): [Stats(5.0, 50.0, 0.0)]}
    r = replication_error(real, emulated)
    assert r.f == pytest.approx(100 * (0.1 + 0.0) / 2)  # flow 1: (0.2 + 0) / 2; flow 2: 0
    assert r.dropped == (("vegas", 1),) and r.dropped_schemes == ("vegas",)


def test_target_must_be_scoreable():
    with pytest.raises(InputError):
        replication_error({"cubic": Stats(0.0, 50.0, 0.0)}, {"cubic": [Stats(1.0, 1.0, 0.0)]})


def test_noise_by_delta_method_by_hand():
    emulated = {
        "cubic": [Stats(9.0, 55.0, 0.01), Stats(11.0, 65.0, 0.01), Stats(10.0, 60.0, 0.01)],
        "vegas": [Stats(2.5, 40.0, 0.0), Stats(2.5, 40.0, 0.0)],
    }
    r = replication_error(REAL, emulated)
    # cubic: var(T) = 1, var(D) = 25, cov = 5; gradient (1/10, 1/50) / 2 (both Δ ≥ 0)
    # per replicate 0.05² + 0.01²·25 + 2·0.05·0.01·5 = 0.01; of the mean 0.01 / 3
    # vegas: no scatter -> 0;  noise = 100 / 2 · sqrt(0.01 / 3)
    assert r.noise == pytest.approx(50 * math.sqrt(0.01 / 3))
    # floor: sqrt(2/π) (sd_T / T + sd_D / D) / 2 with sd = sqrt(var / 3), averaged over 2 keys
    floor_cubic = math.sqrt(2 / math.pi) * (math.sqrt(1 / 3) / 10 + math.sqrt(25 / 3) / 50) / 2
    assert r.floor == pytest.approx(100 * floor_cubic / 2)
    single = replication_error(REAL, {"cubic": [Stats(9.0, 55.0, 0.01)]})
    assert math.isnan(single.noise)


def test_noise_and_floor_match_monte_carlo():
    """The reported noise is the spread of f over repeated evaluations; the floor is the mean f
    of an exact emulator."""
    rng = np.random.default_rng(0)
    real = {f"s{i}": Stats(t, d, 0.01) for i, (t, d) in enumerate([(10, 50), (3, 80), (6, 40)])}

    def evaluate(offset: float):
        emulated = {k: [Stats(s.throughput * (1 + offset) + rng.normal(0, 0.05 * s.throughput),
                              s.delay * (1 - offset) + rng.normal(0, 0.08 * s.delay), 0.01)
                        for _ in range(3)] for k, s in real.items()}
        return replication_error(real, emulated)

    far = [evaluate(0.3) for _ in range(2000)]  # far from the optimum: |Δ| is smooth
    spread = np.std([r.f for r in far])
    assert np.mean([r.noise for r in far]) == pytest.approx(spread, rel=0.2)
    exact = [evaluate(0.0) for _ in range(2000)]  # the exact emulator
    assert np.mean([r.floor for r in exact]) == pytest.approx(np.mean([r.f for r in exact]), rel=0.2)


def test_a_delay_of_zero_means_the_same_everywhere() -> None:
    """One rule for a delay of 0: an emulator may have none (mm-delay 0 is no mm-delay), a run
    over it may measure a p95 of 0 ms (whole-ms timestamps at a fast link), and that run is
    scored; only the target's own delay cannot be 0, since the delay error divides by it."""
    from calibrate.emulator import EmulatorConfig
    from calibrate.metrics import Stats
    from calibrate.parameters import PARAMETER_TABLE
    from calibrate.physics import bounds_from_target
    from calibrate.space import SearchSpace

    assert EmulatorConfig(rate_mbps=100.0, delay_ms=0).delay_ms == 0
    assert EmulatorConfig.parse("mm-delay 0 mm-link 100mbps.trace 100mbps.trace").delay_ms == 0
    assert PARAMETER_TABLE["delay"].limits[0] == 0
    space = SearchSpace.from_bounds({"rate": (1, 100), "queue": (1, 100), "loss": (0, 0.1)}, {"delay": 0})
    assert space.fixed["delay"] == 0
    assert Stats(95.0, 0.0, 0.0).problem() is None  # a measurement a target may hold

    emulated = Stats(95.0, 0.0, 0.0)
    assert emulated.problem("emulated") is None
    error = replication_error({"cubic": (95.0, 1.0, 0.0)}, {"cubic": [emulated]})
    row = error.schemes[0]
    assert row.replicates == 1 and not row.failures
    assert row.delay == pytest.approx(1.0)  # |0 − 1| / 1

    assert "divides by it" in Stats(95.0, 0.0, 0.0).problem("reference")
    with pytest.raises(InputError, match="delay error divides by it"):
        replication_error({"cubic": (95.0, 0.0, 0.0)}, {"cubic": [emulated]})
    with pytest.raises(InputError, match="cubic are not usable: no delay measured"):
        bounds_from_target({"cubic": (95.0, 0.0, 0.0)})


def test_a_target_scheme_with_a_delay_of_zero_is_dropped_with_the_reason(tmp_path) -> None:
    """A target may hold a p95 of 0 ms (a measurement at whole-ms resolution); the run drops
    that scheme, naming why, and scores the others, instead of refusing the whole target."""
    from calibrate.runs.config import RunConfig
    from calibrate.runs.problem import problem_of
    from calibrate.targets.load import load_target

    table = tmp_path / "zero.csv"
    table.write_text("scheme,runs,tput_mbps_mean,tput_mbps_std,delay_p95_ms_mean,delay_p95_ms_std,"
                     "loss_pct_mean,loss_pct_std\n"
                     "cubic,3,95.0,0.5,0,0,0.0,0.0\n"
                     "bbr,3,94.0,0.5,12.0,0.4,0.1,0.0\n")
    target = load_target(str(table))  # a delay of 0 is a measurement
    problem = problem_of(target, RunConfig(target=str(table)))
    assert list(problem.schemes) == ["bbr"]
    assert "no delay measured" in problem.dropped["cubic"]
    assert "divides by it" in problem.dropped["cubic"]
