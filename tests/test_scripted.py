"""Pantheon-style scripted runs over the real engine: each scheme's character over a
12 Mbit/s, 20 ms, 100-packet DropTail path, staggered flows, and the data dir read back."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from calibrate.emulator import EmulatorConfig
from calibrate.engine import EngineResult
from calibrate.errors import InputError
from calibrate.metrics import analyze_datalink_log, parse_datalink_log, parse_stats_log
from calibrate.schemes import load_registry
from calibrate.scripted import (
    FIRST_SIDE_SETUP_S,
    START_PHASE_SPREAD_S,
    Experiment,
    ended_alone,
    flow_endpoints,
    run_experiment,
    run_scheme,
)
from calibrate.targets.load import load_target
from calibrate.targets.model import Workload

pytestmark = pytest.mark.needs_root

CALIBRATE = str(Path(sys.executable).parent / "calibrate")
PATH_12 = "mm-delay 20 mm-link 12mbps.trace 12mbps.trace --uplink-queue=droptail --uplink-queue-args=packets=100"
PROPAGATION_MS = 21.0  # 20 ms of mm-delay + the 1-ms link slot
LEDBAT_TARGET_MS = 100.0


ALL_RUNTIME_S = 12  # long enough for every scheme's start-up to be a small part of its run


def emulate(schemes: str, data_dir: Path) -> tuple[subprocess.CompletedProcess, dict, dict]:
    """`calibrate emulate --schemes SCHEMES` over PATH_12: 12 s single flows, two engines at a time."""
    result = subprocess.run([CALIBRATE, "emulate", "--emulator", PATH_12, "--schemes", schemes,
                             "--runtime", str(ALL_RUNTIME_S),
                             "--replicates", "1", "--parallel", "2", "--out", str(data_dir), "--json"],
                            capture_output=True, text=True, timeout=600)
    report = json.loads(result.stdout)
    return result, report, {run["cc"]: run for run in report["runs"]}


@pytest.fixture(scope="module")
def every_scheme(tmp_path_factory):
    """`calibrate emulate --schemes all`, shared by the module's tests."""
    data_dir = tmp_path_factory.mktemp("all") / "data"
    return (*emulate("all", data_dir), data_dir)


@pytest.fixture
def run_of(every_scheme, first_try, tmp_path):
    """A scheme's run: the module's on a test's first try, a fresh one of its own on a rerun (the
    module's run is the one that failed it: tests/conftest.py)."""
    fresh: dict[str, dict] = {}

    def run(scheme: str) -> dict:
        if first_try:
            return every_scheme[2][scheme]
        if scheme not in fresh:
            _, _, runs = emulate(scheme, tmp_path / scheme)
            fresh[scheme] = runs[scheme]
            print(f"rerun on a fresh {scheme} run: {fresh[scheme]['flows']['all']}")
        return fresh[scheme]
    return run


def total(run: dict) -> dict:
    return run["flows"]["all"]


def test_every_run_is_valid(every_scheme):
    result, report, runs, _ = every_scheme
    assert result.returncode == 0, [(r["cc"], r["reason"]) for r in runs.values() if not r["valid"]]
    assert {"cubic", "reno", "bbr", "quic-cubic", "quic-newreno", "quic-bbr", "udp-vegas", "udp-copa",
            "udp-ledbat", "udp-saturator"} <= set(runs)
    assert all(run["stop_reason"] == "deadline" for run in runs.values())


@pytest.mark.parametrize("scheme", ["cubic", "reno", "bbr", "quic-cubic", "quic-newreno", "quic-bbr",
                                    "udp-saturator"])
def test_full_throttle_schemes_fill_the_link(run_of, scheme):
    run = run_of(scheme)
    assert run["utilization"] >= 0.85, run


@pytest.mark.parametrize("scheme", ["cubic", "udp-saturator"])
def test_loss_based_schemes_fill_the_queue(run_of, scheme):
    # 100 packets at 1 ms each = 100 ms of queueing on top of 21 ms of path.
    assert total(run_of(scheme))["delay"] >= 100


@pytest.mark.parametrize("scheme", ["udp-vegas", "udp-copa"])
def test_delay_based_schemes_keep_the_queue_short(run_of, scheme):
    run = run_of(scheme)
    assert total(run)["delay"] < 60 and run["utilization"] >= 0.60, run


def test_ledbat_queues_near_its_target_within_a_shallow_buffer(run_of):
    """The 100-packet queue holds only 100 ms, exactly LEDBAT's target, so the target is the
    buffer: LEDBAT keeps a standing queue close below it (measured p95 queueing 79-86 ms over
    3 runs), far above Vegas/Copa (~3 ms) and never beyond the target.  Behind a deep queue the
    target is reachable: see the deep-queue tests below."""
    run = run_of("udp-ledbat")
    queueing = total(run)["delay"] - PROPAGATION_MS
    assert 50 <= queueing <= LEDBAT_TARGET_MS, run
    assert run["utilization"] >= 0.85


def test_the_data_dir_reads_back_to_the_same_numbers(every_scheme):
    _, report, runs, data_dir = every_scheme
    names = {p.name for p in data_dir.iterdir()}
    for cc in runs:
        for kind in ("datalink", "acklink", "mm_datalink", "mm_acklink", "stats"):
            assert f"{cc}_{kind}_run1.log" in names
    meta = json.loads((data_dir / "pantheon_metadata.json").read_text())
    assert meta["cc_schemes"] == sorted(runs) and meta["runtime"] == ALL_RUNTIME_S and meta["flows"] == 1
    assert meta["uplink_trace"] == "12mbps.trace" and meta["prepend_mm_cmds"] == "mm-delay 20"
    assert meta["extra_mm_link_args"] == "--uplink-queue=droptail --uplink-queue-args=packets=100"
    assert EmulatorConfig.parse(meta["emulator"]) == EmulatorConfig.parse(PATH_12)

    target = load_target(str(data_dir))
    assert target.workload.runtime_s == ALL_RUNTIME_S and target.workload.flows == 1
    assert {s.label for s in target.schemes} == set(runs)
    for scheme in target.schemes:
        (read,) = scheme.runs
        measured = runs[scheme.label]["flows"]
        for key, metrics in read.flows.items():
            assert metrics.throughput == measured[key]["tput"]
            assert metrics.delay == measured[key]["delay"]
            assert metrics.loss == measured[key]["loss"]
        # ... and the logs themselves recompute to them, as the stats log prints them.
        again = analyze_datalink_log(data_dir / f"{scheme.label}_datalink_run1.log").total
        assert again.tput_mbps == measured["all"]["tput"]
        printed = parse_stats_log(data_dir / f"{scheme.label}_stats_run1.log").flows["all"]
        assert printed.delay == round(measured["all"]["delay"], 3)


@pytest.fixture
def ledbat_deep_queue(tmp_path):
    """One 20 s LEDBAT flow per test (not per module), so that a test the host made fail is rerun on
    a fresh flow (tests/conftest.py), not on the same one."""
    emulator = EmulatorConfig.parse(PATH_12.replace("packets=100", "packets=1000"))
    scheme = load_registry().resolve("ledbat")
    outcome = run_scheme(emulator, scheme, 1, Workload(1, 0.0, 20.0), tmp_path)
    log = parse_datalink_log(outcome.paths.datalink)
    return outcome, log.departure_ts / 1000.0, log.departure_delay - log.departure_delay.min()


def median_queueing(ledbat_deep_queue, start_s: float, end_s: float) -> float:
    _, ts, queueing = ledbat_deep_queue
    window = (ts >= start_s) & (ts < end_s)
    return float(np.median(queueing[window]))


def test_ledbat_converges_to_its_target_behind_a_deep_queue(ledbat_deep_queue):
    """Behind 1000 packets (1 s) of buffer the target is reachable. Slow start overshoots it
    (~140 ms); LEDBAT then brings its queueing delay down towards 100 ms at the pace RFC 6817
    allows (GAIN = 1: under a packet per RTT), and never lets the queue drain.

    How soon it arrives depends on the overshoot: a CI run was at 101.0 ms already by 4–6 s and
    101.2 by 16–20 s. So the test is that it ends near the target and no farther from it than it
    was at 4–6 s (within the millisecond the queue's sawtooth moves a median).

    Some flows end below the target instead (a CI run: 114.5 ms at 4–6 s, 62.9 at 16–20 s; here a
    first run after idle: 73.5), so a failure is rerun on a fresh flow."""
    outcome = ledbat_deep_queue[0]
    assert outcome.valid, outcome.validity
    early, late = median_queueing(ledbat_deep_queue, 4, 6), median_queueing(ledbat_deep_queue, 16, 20)
    assert LEDBAT_TARGET_MS <= late <= 1.3 * LEDBAT_TARGET_MS, (early, late)
    assert late <= max(early, LEDBAT_TARGET_MS) + 1.0, (early, late)
    _, ts, queueing = ledbat_deep_queue
    assert queueing[ts >= 5].min() >= 0.5 * LEDBAT_TARGET_MS


def test_ledbat_does_not_fill_a_deep_queue(ledbat_deep_queue):
    """Unlike a loss-based scheme, which would queue the whole second of buffer, LEDBAT's p95
    queueing over the whole run (slow start's overshoot included) stays within twice its target.
    """
    outcome = ledbat_deep_queue[0]
    assert outcome.stats.total.delay_ms - PROPAGATION_MS < 2 * LEDBAT_TARGET_MS
    assert outcome.stats.total.loss < 0.01  # nothing dropped; only what was in flight at the stop


def test_copa_2017_sends_genericccs_datagrams_in_two_fragments(tmp_path):
    """genericCC sent 1500-byte UDP payloads, which a 1500-byte MTU splits into IP packets of
    1500 and 48 bytes (the Mahimahi-format log adds 4 to each); every other scheme's datagram fits
    one packet. The 48-byte tail waits for the link's next delivery opportunity, which is what
    made the upstream's delays longer at 2 Mbit/s before the port sent the same datagrams."""
    outcome = run_scheme(EmulatorConfig.parse(PATH_12), load_registry().resolve("copa-2017"), 1,
                         Workload(1, 0.0, 4.0), tmp_path)
    assert outcome.valid, outcome.validity
    lines = [line.split() for line in outcome.paths.mm_datalink.read_text().splitlines() if not line.startswith("#")]
    sizes = [int(w[2]) for w in lines if len(w) >= 3 and w[1] == "-"]
    assert len(sizes) > 100
    assert {size for size in sizes if size > 50} == {1504, 52}, sorted(set(sizes))  # 50: the handshake
    assert abs(sizes.count(1504) - sizes.count(52)) <= 2  # one tail per datagram


def test_three_staggered_flows_are_active_for_30_20_and_10_s(tmp_path):
    """-t 30 -f 3 --interval 10: flows start at 0/10/20 s after setup and all stop together."""
    registry = load_registry()
    experiment = Experiment(EmulatorConfig.parse(PATH_12), (("cubic", registry.resolve("cubic")),),
                            Workload(3, 10.0, 30.0, 1), tmp_path)
    (outcome,) = run_experiment(experiment)
    assert outcome.valid, outcome.validity
    stats = outcome.stats
    assert sorted(stats.flows) == [1, 2, 3]
    assert stats.total.tput_mbps >= 0.9 * 12  # the three flows together keep the link busy
    for flow, expected_s in ((1, 30), (2, 20), (3, 10)):
        assert math.isclose(stats.flows[flow].window_ms / 1000, expected_s, abs_tol=1.5), (flow, stats.flows[flow])
        assert stats.flows[flow].tput_mbps > 0.5
    # Pantheon's stats log and perf file carry the per-flow statistics.
    text = outcome.paths.stats.read_text()
    assert "-- Total of 3 flows:" in text and "-- Flow 3:" in text
    perf = json.loads((tmp_path / "pantheon_perf.json").read_text())
    assert set(perf["cubic"]["1"]) == {"all", "1", "2", "3"}


def test_a_flow_that_ended_alone_is_named_by_its_flow_and_side():
    """The engine's summary lists the endpoints in flow_endpoints' order (per flow: first side,
    second side); those that exited on their own are named with their flow, status and time."""
    endpoints = [{"side": side, "exit_code": 128 + 15, "stopped_by_engine": True}
                 for _ in range(3) for side in ("receiver", "sender")]
    endpoints[5] = {"side": "sender", "exit_code": 1, "stopped_by_engine": False, "ended_at_s": 26.031}
    result = EngineResult(0, {"stop_reason": "deadline", "endpoints": endpoints})
    assert ended_alone(result) == ("flow 3's sender: status 1 after 26.03 s",)
    assert ended_alone(EngineResult(0, {})) == ()


def test_each_second_side_starts_at_a_phase_of_its_own():
    """Pantheon's wrappers start unaligned with the link's clock: every second side starts up
    to one 1 Mbit/s packet time after its slot, drawn per run and per flow, the same again for
    the same run's seed; the first sides start at once."""
    registry = load_registry()
    scheme = registry.resolve("koho_cc-2017")
    workload = Workload(3, 10.0, 30.0, 1)

    def offsets(seed: int) -> list[float]:
        endpoints = flow_endpoints(scheme, workload, random.Random(seed))
        assert [e.start_s for e in endpoints if e.side == scheme.run_first] == [0.0, 0.0, 0.0]
        seconds = [e.start_s for e in endpoints if e.side == scheme.run_second]
        # The engine's argument keeps the phase to 0.1 ms.
        assert all(abs(float(e.argument().split("@")[1].split(":")[0]) - e.start_s) < 1e-4 for e in endpoints)
        return [start - (FIRST_SIDE_SETUP_S + workload.interval_s * flow) for flow, start in enumerate(seconds)]

    assert offsets(7) == offsets(7)
    assert offsets(7) != offsets(8)
    drawn = [o for seed in range(200) for o in offsets(seed)]
    assert all(0.0 <= o < START_PHASE_SPREAD_S for o in drawn)
    assert len(set(offsets(7))) == 3  # the flows' phases are independent
    # Spread over the whole range: every 1 ms of it is hit.
    assert {int(o * 1000) for o in drawn} == set(range(int(START_PHASE_SPREAD_S * 1000)))


def test_emulate_warns_when_spinning_senders_outnumber_the_cores(tmp_path):
    """pcc-2017's sender busy-waits (UDT's send queue): more of its runs at once than this host
    has cores are measured CPU-starved, and `calibrate emulate` says so, naming only the
    spinning scheme and a --parallel that fits; the runs themselves still complete."""
    cores = os.cpu_count() or 1
    at_once = cores + 1
    result = subprocess.run([CALIBRATE, "emulate", "--emulator", PATH_12, "--schemes", "pcc-2017,cubic",
                             "--runtime", "3", "--replicates", str(at_once), "--parallel", str(at_once),
                             "--out", str(tmp_path / "data"), "--json"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    err = " ".join(result.stderr.split())  # the console wraps long lines
    warning = err[err.index("warning:"):]
    assert warning.startswith("warning: pcc-2017 spin on a core per sender"), err
    assert f"{at_once} runs at once of 1 flow(s)" in warning and f"this host's {cores} cores" in warning
    assert f"use --parallel {cores}" in warning
    assert "cubic" not in warning.split("use --parallel")[0]
    assert len(json.loads(result.stdout)["runs"]) == 2 * at_once


def test_a_longer_setup_moves_the_second_sides_and_is_bounded(tmp_path):
    """A setup longer than Pantheon's 3 s (the benchmark's, for an upstream slow to listen)
    starts the second sides that much later; a setup out of [0, 30] s is refused, and nothing
    runs."""
    registry = load_registry()
    scheme = registry.resolve("cubic")
    workload = Workload(3, 10.0, 30.0, 1)
    seconds = [e.start_s for e in flow_endpoints(scheme, workload, random.Random(1), 8.0)
               if e.side == scheme.run_second]
    assert [math.floor(s) for s in seconds] == [8, 18, 28]
    for bad in (-1.0, 31.0, math.nan):
        with pytest.raises(InputError, match=r"setup time must be in \[0, 30\] s"):
            run_scheme(EmulatorConfig.parse(PATH_12), scheme, 1, workload, tmp_path / "runs", setup_s=bad)
    assert not (tmp_path / "runs").exists()
