"""Per-packet evidence: Mahimahi link logs and Pantheon tunnel logs read into what p95 cannot say,
carried by the Target, used by the bounds and the warm start, shown by `calibrate target show`;
checked against the true emulators of shared/data/mahimahi-targets."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from calibrate import trace
from calibrate.errors import InputError
from calibrate.evidence import HOST_ALLOWANCE_MS, PathEvidence, parse_link_log, run_evidence
from calibrate.metrics import analyze_datalink_log, percentile_nearest, write_perf_json
from calibrate.parameters import PARAMETERS
from calibrate.physics import bounds_from_target, warm_start
from calibrate.targets.datadir import read_data_dir
from calibrate.targets.load import load_target
from calibrate.targets.model import Target
from pantheon_fixtures import datalink_log_text, mm_link_log_text

MAHIMAHI_TARGETS = Path(__file__).resolve().parents[2] / "shared" / "data" / "mahimahi-targets"
#: their README's true emulators
TRUTH = {"M1": {"rate": 12.0, "delay": 30, "queue": 60, "loss": 0.0, "link": "constant"},
         "M2": {"rate": 30.0, "delay": 10, "queue": 400, "loss": 0.002, "link": "constant"},
         "M3": {"rate": 3.0, "delay": 80, "queue": 100, "loss": 0.01, "link": "poisson"}}


def overloaded_link(queue: int = 20) -> tuple[str, dict]:
    """12 Mbit/s (one opportunity a ms) for 3 s; 1.5 packets a ms for 1 s overflow the queue,
    then 0.5 a ms drain it."""
    arrivals = np.concatenate([np.floor(np.arange(0, 1000, 2 / 3)), np.arange(1000, 2900, 2)])
    return mm_link_log_text(opportunities=np.arange(0, 3000), arrivals=arrivals, queue=queue)


def test_link_log_pins_the_queue_capacity_and_propagation_delay(tmp_path):
    text, sim = overloaded_link(queue=20)
    path = tmp_path / "cubic_mm_datalink_run1.log"
    path.write_text(text)
    one_way_p95 = 30 + percentile_nearest(sim["delays"])  # as if mm-delay 30 followed the link
    e = run_evidence("cubic", 1, link=parse_link_log(path), one_way_p95_ms=one_way_p95)
    assert e.drops == sim["drops"] > 0 and e.packets == sim["delays"].size
    assert e.max_link_delay_ms == sim["delays"].max() == 20  # a full queue, itself last
    assert e.in_link_at_drops == (20, 20)  # a drop happens exactly when the queue is full
    path_evidence = PathEvidence((e,))
    assert path_evidence.queue_at_least == 19 and path_evidence.queue_at_most == 20
    assert e.capacity_mbps == pytest.approx(12.0) and path_evidence.deliveries == "constant"
    assert e.propagation_ms == 30 and 30 <= e.propagation_max_ms <= 31
    assert path_evidence.dropping_runs == 1 and path_evidence.link_logged_runs == 1


def test_link_log_of_poisson_deliveries_without_drops(tmp_path):
    opportunities = trace.poisson(3.0, seed=7)
    opportunities = opportunities[opportunities < 30_000]
    text, sim = mm_link_log_text(opportunities=opportunities, arrivals=np.arange(0, 29_000, 20),
                                 queue=100)
    path = tmp_path / "reno_mm_datalink_run1.log.gz"
    path.write_bytes(gzip.compress(text.encode()))
    e = PathEvidence((run_evidence("reno", 1, link=parse_link_log(path)),))
    assert e.deliveries == "poisson" and e.drops == 0 == sim["drops"]
    assert e.queue_at_most is None and e.queue_at_least is not None and e.queue_at_least < 100
    span = opportunities[-1] - opportunities[0]
    assert e.capacity_mbps == pytest.approx((opportunities.size - 1) * 12 / span)
    assert e.propagation_ms is None  # no p95 one-way delay given


@pytest.mark.parametrize("bad, line", [("35 x 1504", 9), ("36 - 1504", 9), ("36 + 1504 2 7 9", 9),
                                       ("thirty-six + 1504", 9)])
def test_malformed_link_log_says_where(tmp_path, bad, line):
    text, _ = overloaded_link()
    lines = text.splitlines()
    lines.insert(line - 1, bad)
    path = tmp_path / "x_mm_datalink_run1.log"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="x_mm_datalink_run1.log") as error:
        parse_link_log(path)
    assert f":{line}: malformed Mahimahi link log line {bad!r}" in str(error.value)


def _emulated_data_dir(directory: Path, *, link_text: str | None, gzipped: bool = True) -> dict:
    """A 2018+ data dir of one cubic run: pantheon_perf.json, the merged datalink log (30 ms
    one-way delay plus jitter) and, if given, the Mahimahi link log."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "pantheon_metadata.json").write_text(json.dumps(
        {"cc_schemes": ["cubic"], "runtime": 2, "flows": 1, "interval": 0, "run_times": 1}))
    datalink = directory / "cubic_datalink_run1.log"
    datalink.write_text(datalink_log_text(seed=1, runtime_ms=2000.0, delay_ms=30.0))
    stats = analyze_datalink_log(datalink)
    if gzipped:
        datalink.with_name(datalink.name + ".gz").write_bytes(gzip.compress(datalink.read_bytes()))
        datalink.unlink()
    write_perf_json(directory / "pantheon_perf.json", {"cubic": {1: stats}})
    if link_text is not None:
        (directory / "cubic_mm_datalink_run1.log.gz").write_bytes(gzip.compress(link_text.encode()))
    return {"metrics": stats.metrics()["all"]}


def test_data_dir_reads_both_logs_gzipped_into_the_target(tmp_path):
    text, sim = overloaded_link(queue=20)
    written = _emulated_data_dir(tmp_path / "run", link_text=text)
    target = read_data_dir(tmp_path / "run")
    assert target.scheme("cubic").runs[0].flows["all"] == written["metrics"]  # perf JSON's numbers
    evidence = target.evidence
    assert evidence is not None and len(evidence.runs) == 1
    run = evidence.runs[0]
    assert 30.0 <= run.min_delay_ms < 31.0  # the tunnel log's smallest one-way delay
    assert run.drops == sim["drops"] and evidence.queue_at_most == 20  # the link log's queue
    assert run.capacity_mbps == pytest.approx(12.0)  # the link log's opportunities win
    # the evidence survives the target's JSON, with the pooled statements alongside
    data = json.loads(target.dumps())
    assert data["evidence"]["path"]["queue_at_most"] == 20
    assert Target.from_json(data) == target
    # ... and it bounds the search: delay below the smallest one-way delay and the link log's
    # bound (the fixture's two logs are not of the same packets, so either may be the smaller),
    # the queue pinned
    stats = {s.label: s.measurement() for s in target.schemes}
    bounds = bounds_from_target(stats, evidence=evidence, runtime_s=2.0)
    assert bounds["delay"] == (0.0, float(math.floor(min(run.min_delay_ms, run.propagation_max_ms))))
    assert bounds["queue"][0] <= 20 <= bounds["queue"][1] <= 22


def test_tunnel_logs_alone_bound_the_delay_by_the_smallest_one_way_delay(tmp_path):
    _emulated_data_dir(tmp_path / "run", link_text=None)
    target = read_data_dir(tmp_path / "run")
    smallest = target.evidence.min_delay_ms
    assert 30.0 <= smallest < 31.0
    stats = {s.label: s.measurement() for s in target.schemes}
    assert stats["cubic"].delay > 35  # the p95 alone would allow more
    bounds = bounds_from_target(stats, evidence=target.evidence, runtime_s=2.0)
    assert bounds["delay"] == (0.0, 30.0)
    # the warm start: the smallest one-way delay less Mahimahi's one-tick wait for a slot
    assert warm_start(stats, runtime_s=2.0, evidence=target.evidence)["delay"] == round(smallest - 1)


def test_a_target_without_logs_has_no_evidence(tmp_path):
    _emulated_data_dir(tmp_path / "run", link_text=None)
    (tmp_path / "run" / "cubic_datalink_run1.log.gz").unlink()
    target = read_data_dir(tmp_path / "run")
    assert target.evidence is None and "evidence" not in target.to_json()


def test_an_unreadable_link_log_leaves_a_note_not_an_error(tmp_path):
    _emulated_data_dir(tmp_path / "run", link_text="# header\n12 x 1504\n")
    target = read_data_dir(tmp_path / "run")
    assert any("no evidence from cubic_mm_datalink_run1.log.gz" in n for n in target.provenance.notes)
    assert target.evidence is not None and target.evidence.runs[0].drops is None  # tunnel log only


def test_target_show_prints_the_evidence(tmp_path, capsys):
    from calibrate.cli import main

    text, _ = overloaded_link(queue=20)
    _emulated_data_dir(tmp_path / "run", link_text=text)
    assert main(["target", "show", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "per-packet evidence" in out and "DropTail queue 19–20 packets" in out
    assert "constant deliveries" in out and "smallest one-way delay 30." in out
    assert main(["target", "show", str(tmp_path / "run"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["evidence"]["runs"][0]["in_link_at_drops"] == [20, 20]


# -- the real-Mahimahi targets: the evidence, the bounds and the warm start against the truth

def _mahimahi_target(name: str) -> Target:
    if not (MAHIMAHI_TARGETS / name).is_dir():
        pytest.skip(f"{MAHIMAHI_TARGETS / name} is not here (shared/ beside the checkout)")
    return load_target(str(MAHIMAHI_TARGETS / name))


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_mahimahi_targets_evidence_matches_their_emulators(name):
    truth = TRUTH[name]
    evidence = _mahimahi_target(name).evidence
    assert evidence is not None and evidence.link_logged_runs == 6
    assert evidence.deliveries == truth["link"]
    assert evidence.propagation_ms == truth["delay"]  # p95 one-way - p95 in the link, exactly
    assert evidence.propagation_max_ms >= truth["delay"]
    assert evidence.queue_at_least <= truth["queue"] <= evidence.queue_at_most
    assert evidence.queue_at_most - evidence.queue_at_least <= 1
    assert evidence.capacity_mbps == pytest.approx(truth["rate"], rel=0.01)
    low, high = evidence.propagation_interval_ms  # what the reported delay ranges are narrowed to
    assert low <= truth["delay"] <= high and high - low <= 2 * HOST_ALLOWANCE_MS + 1


@pytest.mark.parametrize("name", sorted(TRUTH))
@pytest.mark.parametrize("with_evidence", [True, False])
def test_mahimahi_targets_bounds_contain_the_truth(name, with_evidence):
    target = _mahimahi_target(name)
    truth = TRUTH[name]
    stats = {s.label: s.measurement() for s in target.schemes}
    evidence = target.evidence if with_evidence else None
    bounds = bounds_from_target(stats, evidence=evidence, runtime_s=target.workload.runtime_s)
    assert all(bounds[n][0] <= truth[n] <= bounds[n][1] for n in PARAMETERS), bounds
    start = warm_start(stats, runtime_s=target.workload.runtime_s, evidence=evidence)
    assert all(bounds[n][0] <= start[n] <= bounds[n][1] for n in PARAMETERS)
    if with_evidence:  # the logs put the warm start on the emulator (loss aside: no log shows it)
        assert start["rate"] == pytest.approx(truth["rate"], rel=0.01)
        assert start["delay"] == truth["delay"]
        assert abs(start["queue"] - truth["queue"]) <= 1


def test_mahimahi_target_evidence_reaches_the_calibration():
    from calibrate.runs.config import RunConfig
    from calibrate.runs.problem import problem_of

    target = _mahimahi_target("M1")
    problem = problem_of(target, RunConfig(target="M1"))
    assert problem.warm_start == {"rate": pytest.approx(12.0, rel=1e-3), "delay": 30, "queue": 60,
                                  "loss": 0.0}
    bounds = problem.space.bounds
    assert bounds["delay"] == (0.0, 30.0) and bounds["queue"][0] <= 60 <= bounds["queue"][1]


def test_the_evidence_of_some_schemes_reads_only_their_runs():
    """What a leave-one-out fold's ranges read: its fitted schemes' logs, not the held-out one's."""
    evidence = _mahimahi_target("M1").evidence
    assert evidence is not None and set(evidence.labels) == {"cubic", "reno", "bbr"}
    fold = evidence.of_schemes(["cubic", "reno"])
    assert set(fold.labels) == {"cubic", "reno"} and fold.link_logged_runs == 4
    assert evidence.of_schemes([]).propagation_interval_ms is None
