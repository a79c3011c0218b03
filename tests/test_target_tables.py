"""Summary tables (CSV, JSON, compare_two_experiments text), the bundled target, and the CLI."""

from __future__ import annotations

import datetime as dt
import json

import pytest

import calibrate.cli
from calibrate.errors import InputError
from calibrate.metrics import analyze_datalink_log, check_run, write_perf_json, write_stats_log
from calibrate.targets.datadir import read_data_dir
from calibrate.targets.load import load_target
from calibrate.targets.model import Target
from calibrate.targets.tables import read_summary_table
from pantheon_fixtures import datalink_log_text

# Pantheon's compare_two_experiments.py output verbatim: its table is wider than our lines.
COMPARE_OUTPUT = """\
Comparison of: 2017-01-03T21-30-Nepal-to-AWS-India-10-runs-logs and ../test/
scheme         exp 1 runs   exp 2 runs   aggregate metric           mean 1   mean 2   % difference   std dev 1   std dev 2   % difference
-------------- ------------ ------------ -------------------------- -------- -------- -------------- ----------- ----------- --------------
saturator      10           1            throughput (Mbit/s)        9.57     9.32     -2.65%         0.08        0.00        -100.00%
saturator      10           1            95th percentile delay (ms) 220.21   80.00    -63.67%        5.57        0.00        -100.00%
saturator      10           1            loss rate (%)              1.41     0.20     -85.82%        0.30        0.00        -100.00%
default_tcp    10           1            throughput (Mbit/s)        5.08     9.10     +79.13%        1.16        0.00        -100.00%
default_tcp    10           1            95th percentile delay (ms) 57.70    60.00    +3.99%         40.99       0.00        -100.00%
default_tcp    10           1            loss rate (%)              0.51     nan      nan%           0.10        nan         nan%

throughput score: 40.9%
"""  # noqa: E501


def test_compare_two_experiments_table(tmp_path):
    path = tmp_path / "compare.txt"
    path.write_text(COMPARE_OUTPUT)
    target = read_summary_table(path)
    cubic = target.scheme("cubic")
    assert cubic.label == "default_tcp" and cubic.runs == () and cubic.n_runs == 10
    assert (cubic.total.tput_mbps.mean, cubic.total.tput_mbps.std) == (5.08, 1.16)
    assert cubic.total.delay_ms.mean == 57.70 and cubic.total.loss.mean == pytest.approx(0.0051)
    assert target.provenance.date == "2017-01-03T21:30"
    assert target.provenance.path_description == "Nepal -> AWS India"
    second = read_summary_table(path, experiment=2)
    assert second.scheme("cubic").total.loss.mean is None
    assert second.scheme("saturator").n_runs == 1
    broken = COMPARE_OUTPUT.replace("default_tcp    10           1            loss",
                                    "default_tcp    ten          1            loss")
    path.write_text(broken)
    with pytest.raises(InputError, match=r"compare\.txt:9: not a row"):
        read_summary_table(path)


def test_csv_table_with_provenance_comments_and_errors(tmp_path):
    path = tmp_path / "paper.csv"
    path.write_text("# name: Table 2 of some paper\n# date: 2018-03-01\n# path: A -> B\n"
                    "# runtime_s: 60\n# std_ddof: 1\n"
                    "scheme,runs,tput_mbps_mean,tput_mbps_std,delay_p95_ms_mean,"
                    "delay_p95_ms_std,loss_pct_mean,loss_pct_std\n"
                    "cubic,5,10.0,1.0,50.0,5.0,1.0,0.5\nquic,5,8.0,,40.0,,,\n")
    target = read_summary_table(path)
    assert target.name == "Table 2 of some paper" and target.workload.runtime_s == 60.0
    quic = target.scheme("quic-cubic")
    assert quic.total.tput_mbps.std is None and quic.total.loss.mean is None
    assert quic.total.tput_mbps.ddof == 1 and target.provenance.std_ddof == 1
    assert target.scheme("cubic").total.loss.std == pytest.approx(0.005)
    path.write_text("scheme,tput_mbps_mean,delay_p95_ms_mean\ncubic,fast,50\n")
    with pytest.raises(InputError, match=r"paper\.csv:2: tput_mbps_mean 'fast' is not a number"):
        read_summary_table(path)
    path.write_text("scheme,throughput\ncubic,1\n")
    with pytest.raises(InputError, match=r"paper\.csv:1: the header lacks tput_mbps_mean"):
        read_summary_table(path)


def test_json_summary_table(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"name": "typed", "workload": {"runtime_s": 30, "flows": 1},
                                "schemes": {"default_tcp": {
                                    "runs": 4, "tput_mbps": {"mean": 5.0, "std": 1.0},
                                    "delay_p95_ms": {"mean": 60.0, "std": 4.0},
                                    "loss_pct": {"mean": 0.5, "std": 0.1}}}}))
    target = load_target(str(path))
    assert target.scheme("cubic").total.loss.mean == pytest.approx(0.005)
    assert target.scheme("cubic").n_runs == 4
    path.write_text(json.dumps({"schemes": {"cubic": {"tput_mbps": {"mean": "x"}}}}))
    with pytest.raises(InputError, match="tput_mbps.mean 'x' is not a number"):
        load_target(str(path))


def test_bundled_nepal_matches_the_shared_csv():
    target = load_target("nepal")
    assert len(target.schemes) == 13 and not target.has_runs
    assert target.scheme("default_tcp").scheme == "cubic"
    assert target.scheme("quic").scheme == "quic-cubic"
    saturator = target.scheme("greg_saturator")
    assert saturator.n_runs == 9 and saturator.total.delay_ms.mean == 271.54
    prov = target.provenance
    assert prov.kind == "bundled" and prov.std_ddof == 0
    assert prov.archive_name == "2017-01-03T21-30-Nepal-to-AWS-India-10-runs-logs.tar.xz"
    assert prov.date.startswith("2017-01-03") and "Nepal" in prov.path_description
    assert target.workload.runtime_s == 30.0 and target.workload.flows == 1
    assert Target.from_json(json.loads(target.dumps())) == target


def test_emulated_data_dir_round_trip(tmp_path):
    """A data dir written as `calibrate emulate` writes it (same writers) reads back exactly."""
    runtime = 2.0
    valid_stats = {}
    for run, span in ((1, 2000), (2, 2000), (3, 1000)):
        log = tmp_path / f"copa_datalink_run{run}.log"
        log.write_text(datalink_log_text(seed=run, runtime_ms=span))
        stats = analyze_datalink_log(log)
        verdict = check_run(stats, runtime)
        start = dt.datetime(2024, 1, 1, 0, 0, run)
        write_stats_log(tmp_path / f"copa_stats_run{run}.log", start_at=start, end_at=start,
                        stats=stats, validity=verdict)
        valid_stats[run] = stats if verdict.valid else None
    write_perf_json(tmp_path / "pantheon_perf.json", {"copa": valid_stats})
    (tmp_path / "pantheon_metadata.json").write_text(json.dumps(
        {"cc_schemes": ["copa"], "runtime": runtime, "flows": 1, "interval": 0, "run_times": 3,
         "mode": "local", "prepend_mm_cmds": "mm-delay 28", "uplink_trace": "10mbps.trace",
         "downlink_trace": "10mbps.trace"}))
    target = read_data_dir(tmp_path)
    copa = target.scheme("copa")
    assert [r.run for r in copa.runs] == [1, 2]
    for r in copa.runs:
        assert r.flows == valid_stats[r.run].metrics()
    assert target.provenance.path_description.startswith("emulated: mm-delay 28 mm-link")
    (dropped,) = target.dropped
    assert dropped.run == 3 and "less than 80%" in dropped.reason


# --- CLI ---------------------------------------------------------------------------------------


@pytest.fixture
def main(monkeypatch):
    """calibrate's entry point with only this command registered (other commands are built by
    other work and may not import here)."""
    monkeypatch.setattr(calibrate.cli, "COMMANDS", ["calibrate.cli.target"])
    return calibrate.cli.main


def test_cli_show_nepal_table_and_json(main, capsys, tmp_path):
    assert main(["target", "show", "nepal"]) == 0
    out = capsys.readouterr().out
    assert "default_tcp" in out and "5.08 ± 1.16" in out and "271.54 ± 9.00" in out
    out_file = tmp_path / "nepal.json"
    assert main(["target", "show", "nepal", "--json", "--json-out", str(out_file)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out_file.read_text())
    assert printed["format"] == "calibrate-target" and len(printed["schemes"]) == 13


def test_cli_plot_writes_png(main, tmp_path, capsys):
    out = tmp_path / "nepal.png"
    assert main(["target", "plot", "nepal", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(out) in capsys.readouterr().out


def test_cli_plot_with_runs(main, tmp_path, capsys):
    (tmp_path / "d").mkdir()
    test_emulated_data_dir_round_trip(tmp_path / "d")
    out = tmp_path / "runs.png"
    assert main(["target", "plot", str(tmp_path / "d"), "--out", str(out)]) == 0
    assert out.stat().st_size > 1000


@pytest.mark.parametrize("spec, message", [
    ("no-such-thing", "is not a file or directory, a bundled target"),
    ("missing.tar.gz", "no such file"),
])
def test_cli_bad_input_is_one_line_without_traceback(main, capsys, spec, message):
    assert main(["target", "show", spec]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1


def test_cli_malformed_file_names_line(main, tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text('{"schemes":\n  [1,,]}')
    assert main(["target", "show", str(path)]) == 2
    err = capsys.readouterr().err
    assert "bad.json:2:" in err and "Traceback" not in err
