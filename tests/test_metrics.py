"""Pantheon's analysis math (tunnel_graph.py, plot.py, pantheon_perf.json) in calibrate.metrics."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calibrate.errors import InputError
from calibrate.metrics import (
    STD_DDOF,
    Stats,
    aggregate,
    analyze_datalink_log,
    check_run,
    parse_datalink_log,
    parse_stats_log,
    percentile_nearest,
    read_perf_json,
    run_stats,
    write_perf_json,
    write_stats_log,
)
from pantheon_fixtures import WORKED_VECTOR_LOG, datalink_log_text


def test_worked_test_vector(tmp_path):
    path = tmp_path / "cubic_datalink_run1.log"
    path.write_text(WORKED_VECTOR_LOG)
    stats = analyze_datalink_log(path)
    assert stats.total.tput_mbps == pytest.approx(3100 * 8 / 1500)  # 16.53 Mbit/s
    assert round(stats.total.tput_mbps, 2) == 16.53
    assert stats.total.delay_ms == pytest.approx(20.000)
    assert round(100 * stats.total.loss, 2) == 32.61
    assert stats.capacity_mbps == pytest.approx(18.00)
    assert stats.duration_ms == pytest.approx(1.5)
    assert stats.init_timestamp_ms == 1499999999999.0
    assert stats.metrics()["1"] == stats.metrics()["all"]


@pytest.mark.parametrize("n, index", [(11, 10), (31, 28), (20, 18)])
def test_nearest_percentile_index_matches_spec(n, index):
    values = np.arange(n, dtype=float)[::-1].copy()  # unsorted on purpose
    assert percentile_nearest(values) == index


@given(st.lists(st.floats(-1e3, 1e4, allow_nan=False), min_size=1, max_size=300))
def test_nearest_percentile_is_round_half_even_index(values):
    expected = sorted(values)[round(0.95 * (len(values) - 1))]  # Python's round is half-even
    assert percentile_nearest(np.array(values)) == expected


def test_per_flow_windows_total_aggregate_and_unsent_loss(tmp_path):
    log = "\n".join([
        "# init timestamp: 1000.000",
        "0.000 + 1000 1", "1.000 + 1000 1", "2.000 + 1000 1",  # the third never departs
        "10.000 - 1000 10.000 1", "11.000 - 1000 10.000 1",
        "5.000 + 500 2", "25.000 - 500 20.000 2", "35.000 + 500 2", "45.000 - 500 10.000 2",
    ]) + "\n"
    path = tmp_path / "x_datalink_run1.log"
    path.write_text(log)
    s = analyze_datalink_log(path)
    f1, f2 = s.flows[1], s.flows[2]
    assert f1.tput_mbps == pytest.approx(2000 * 8 / 1000 / 1.0)  # own window: 10..11 ms
    assert f1.loss == pytest.approx(1 / 3)
    assert f2.tput_mbps == pytest.approx(1000 * 8 / 1000 / 20.0)  # 25..45 ms
    assert f2.loss == 0
    # "all" is over the global window 10..45 ms, not a sum of the flow rates
    assert s.total.tput_mbps == pytest.approx(3000 * 8 / 1000 / 35.0)
    assert s.total.loss == pytest.approx(1 - 3000 / 4000)
    assert s.total.delay_ms == 20.0  # nearest: index round(0.95*3)=3 of [10,10,10,20]
    assert s.capacity_mbps is None
    assert set(s.metrics()) == {"all", "1", "2"}


def test_single_departure_gives_zero_throughput_and_no_delivery_gives_none(tmp_path):
    path = tmp_path / "a.log"
    path.write_text("0 + 100 1\n5 - 100 5 1\n")
    assert analyze_datalink_log(path).total.tput_mbps == 0.0
    path.write_text("0 + 100 1\n")
    s = analyze_datalink_log(path)
    assert s.total.delay_ms is None and s.total.loss == 1.0
    assert check_run(s, 30).reason == "no packet was delivered"


def test_lines_without_flow_column_are_flow_zero_and_drops_ignored(tmp_path):
    path = tmp_path / "mm.log"
    path.write_text("# mahimahi mm-link (Uplink)\n# init timestamp: 5\n1 # 1504\n1 + 1504\n"
                    "2 d 1 1504\n3 + 1504\n5 - 1504 4\n9 # 1504\n")
    s = analyze_datalink_log(path)
    assert list(s.flows) == [0]
    assert s.total.loss == 0.5
    assert s.capacity_mbps == pytest.approx(2 * 1504 * 8 / 8000)
    assert set(s.metrics()) == {"all"}  # perf entries exist only for flow ids other than 0


def test_integer_ms_form_with_base_timestamp_matches_float_form(tmp_path):
    old = tmp_path / "old.log"
    old.write_text(datalink_log_text(seed=3, integer_ms=True))
    new = tmp_path / "new.log"
    new.write_text(datalink_log_text(seed=3, integer_ms=True).replace("# base timestamp", "# x"))
    assert analyze_datalink_log(old) == analyze_datalink_log(new)
    assert analyze_datalink_log(old).total.departed_packets > 1000


def test_validity_rule(tmp_path):
    path = tmp_path / "a.log"
    path.write_text(datalink_log_text(seed=1, runtime_ms=2000))
    stats = analyze_datalink_log(path)
    assert check_run(stats, runtime_s=2.0).valid
    verdict = check_run(stats, runtime_s=3.0)  # ~2 s of departures < 0.8 x 3 s
    assert not verdict.valid and "less than 80% of the 3 s runtime" in verdict.reason


def test_aggregate_states_ddof_and_ignores_missing():
    agg = aggregate([1.0, 2.0, None, 6.0])
    assert (agg.mean, agg.median, agg.n, agg.ddof) == (3.0, 2.0, 3, STD_DDOF)
    assert agg.std == pytest.approx(np.std([1, 2, 6]))
    assert aggregate([1.0, 3.0], ddof=1).std == pytest.approx(np.sqrt(2))
    assert aggregate([]).mean is None and aggregate([2.0], ddof=1).std is None


def test_stats_log_round_trip_and_discarded_run(tmp_path):
    log = tmp_path / "d.log"
    log.write_text(datalink_log_text(seed=2, flows=2))
    stats = analyze_datalink_log(log)
    start = dt.datetime(2018, 5, 20, 10, 0, 3)
    path = tmp_path / "cubic_stats_run1.log"
    write_stats_log(path, start_at=start, end_at=start + dt.timedelta(seconds=30), stats=stats)
    text = path.read_text()
    assert "-- Total of 2 flows:" in text and "Average capacity:" in text and "-- Flow 2:" in text
    parsed = parse_stats_log(path)
    assert parsed.start_at == start
    for key, m in stats.metrics().items():
        got = parsed.flows[key]
        assert got.throughput == pytest.approx(m.throughput, abs=0.005)
        assert got.delay == pytest.approx(m.delay, abs=0.0005)
        assert got.loss == pytest.approx(m.loss, abs=0.00005)
    from calibrate.metrics import Validity

    write_stats_log(path, start_at=start, end_at=start, stats=stats,
                    validity=Validity(False, "too short"))
    parsed = parse_stats_log(path)
    assert parsed.flows is None and parsed.discarded_reason == "too short"


def test_stats_log_bad_value_names_line(tmp_path):
    path = tmp_path / "s.log"
    path.write_text("Start at: 2018-05-20 10:00:03\n\n# Datalink statistics\n-- Total of 1 flow:\n"
                    "Average throughput: lots Mbit/s\n")
    with pytest.raises(InputError, match=r"s\.log:5: malformed statistics line"):
        parse_stats_log(path)


def test_perf_json_round_trip_and_errors(tmp_path):
    log = tmp_path / "d.log"
    log.write_text(datalink_log_text(seed=4))
    stats = analyze_datalink_log(log)
    path = tmp_path / "pantheon_perf.json"
    write_perf_json(path, {"cubic": {1: stats, 2: None}})
    perf = read_perf_json(path)
    assert list(perf["cubic"]) == [1]  # discarded runs are left out
    assert perf["cubic"][1]["all"] == stats.metrics()["all"]
    path.write_text('{"cubic": {"1": {"all": {"tput": 1.0,\n "delay": 2.0 "loss": 0}}}}')
    with pytest.raises(InputError, match=r"pantheon_perf\.json:2:\d+: malformed"):
        read_perf_json(path)
    path.write_text('{"cubic": {"1": {"all": {"tput": "fast"}}}}')
    with pytest.raises(InputError, match=r"\['cubic'\]\['1'\]\['all'\]\['tput'\]"):
        read_perf_json(path)


# --- malformed logs --------------------------------------------------------------------------

_GOOD = ["1.000 + 1500 1", "21.000 - 1500 20.000 1", "2.000 # 1500", "3.500 + 1400 1",
         "24.000 - 1400 20.500 1"]
_BAD = st.sampled_from([
    "1.0 + 1500 1 7", "1.0 - 1500", "1.0 # 1500 3", "x + 1500 1", "1.0 * 1500 1", "1.0 + 15.5 1",
    "1.0 + 1500 1.5", "1.0 - 1500 abc 1", "1.0", "1.0 +", "1,0 + 1500 1", "1.0 + -5 1",
    "1.0 - 1500 2.0 1 9", "\u00e91.0 + 1500 1",
])


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=st.lists(st.sampled_from(_GOOD + ["", "# comment"]), max_size=8), bad=_BAD,
       suffix=st.lists(st.sampled_from(_GOOD), max_size=4))
def test_malformed_line_is_reported_with_file_and_line(tmp_path, prefix, bad, suffix):
    lines = ["# init timestamp: 1.000"] + prefix + [bad] + suffix
    path = tmp_path / "bad_datalink_run1.log"
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    with pytest.raises(InputError) as error:
        parse_datalink_log(path)
    assert f"bad_datalink_run1.log:{len(prefix) + 2}:" in str(error.value)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_parse_or_raise_input_error(data):
    try:
        log = parse_datalink_log("fuzz.log", data=data)
    except InputError as error:
        assert "fuzz.log" in str(error)
    else:
        run_stats(log)  # whatever parsed must be computable


def test_flow_metrics_json_shape():
    assert Stats(1.0, 2.0, 0.5).to_json() == {"tput": 1.0, "delay": 2.0, "loss": 0.5}
