"""`--backend mahimahi`: the same Pantheon-style runs through the user's real Mahimahi shells.

Command construction and option checks run everywhere; the runs themselves need Mahimahi's
`mm-link` on PATH (setuid root) and are skipped, saying so, where it is missing.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from calibrate import engine
from calibrate.emulator import EmulatorConfig, Queue
from calibrate.engine import Backend, Endpoint, Logs
from calibrate.errors import InputError
from calibrate.metrics import analyze_datalink_log

CALIBRATE = [sys.executable, "-m", "calibrate"]
#: The unprivileged account the shells run as in these tests.
USER = os.environ.get("CALIBRATE_MAHIMAHI_USER", "nobody")

needs_mahimahi = pytest.mark.skipif(
    shutil.which("mm-link") is None,
    reason="needs Mahimahi's mm-link on PATH (setuid root): build it from ravinet/mahimahi to run these")


def test_a_mahimahi_backend_needs_an_unprivileged_user_and_says_so():
    with pytest.raises(InputError, match="needs --mahimahi-user"):
        Backend("mahimahi")
    with pytest.raises(InputError, match="goes with --backend mahimahi"):
        Backend("engine", mahimahi_user="someone")
    with pytest.raises(InputError, match="--backend must be one of engine, mahimahi"):
        Backend("ns3")
    assert Backend("mahimahi", "mm").arguments() == ["--backend", "mahimahi", "--mahimahi-user", "mm"]
    assert Backend().arguments() == []
    assert Backend(timing="ideal").arguments() == ["--timing", "ideal"]
    assert Backend.from_json(Backend("mahimahi", "mm").to_json()) == Backend("mahimahi", "mm")
    normal = Backend("mahimahi", "mm", realtime_priority=0)
    assert normal.arguments()[-2:] == ["--realtime-priority", "0"]
    assert Backend.from_json(normal.to_json()) == normal
    with pytest.raises(InputError, match="from 0 to 99, got 100"):
        Backend(realtime_priority=100)


def test_the_engine_command_line_carries_the_backend(tmp_path):
    config = EmulatorConfig(rate_mbps=12, delay_ms=20, queue=Queue.droptail(100), uplink_loss=0.01)
    args = engine.command(config, [Endpoint("sender", "true")], workdir=tmp_path, stop_after=5,
                          backend=Backend("mahimahi", USER))
    assert args[args.index("--backend") + 1] == "mahimahi"
    assert args[args.index("--mahimahi-user") + 1] == USER
    assert "--uplink-loss" in args and args[args.index("--delay") + 1] == "20"


def test_emulate_refuses_a_mahimahi_backend_without_a_user_before_writing_anything(tmp_path):
    data_dir = tmp_path / "d"
    result = subprocess.run(CALIBRATE + ["emulate", "--emulator", "mm-delay 20 mm-link 12mbps.trace 12mbps.trace",
                                         "--schemes", "cubic", "--runtime", "5", "--out", str(data_dir),
                                         "--backend", "mahimahi"], capture_output=True, text=True)
    assert result.returncode == 2, result.stderr
    assert "--mahimahi-user" in result.stderr and "Traceback" not in result.stderr
    assert not data_dir.exists() or not any(data_dir.iterdir())


@pytest.mark.needs_root
def test_the_engine_refuses_root_as_the_mahimahi_user(tmp_path):
    trace = tmp_path / "t"
    trace.write_text("1\n")
    from calibrate import binaries

    result = subprocess.run([str(binaries.find(binaries.LINK)), str(trace), str(trace), "--backend", "mahimahi",
                             "--mahimahi-user", "root", "--sender", "true"], capture_output=True, text=True)
    assert result.returncode == 2
    assert "refuse to run as root" in result.stderr


def _leftovers() -> tuple[set[str], set[str]]:
    namespaces = set(subprocess.run(["lsns", "-t", "net", "-n", "-o", "NS"], capture_output=True,
                                    text=True).stdout.split())
    shells = {line for line in subprocess.run(["pgrep", "-a", "-f", "mm-link|mm-delay|mm-loss"],
                                               capture_output=True, text=True).stdout.splitlines()}
    return namespaces, shells


@pytest.mark.needs_root
@needs_mahimahi
def test_a_kernel_flow_through_real_mahimahi_is_measured_like_the_engines(tmp_path):
    pwd.getpwnam(USER)  # the account must exist (set CALIBRATE_MAHIMAHI_USER to another one)
    before = _leftovers()
    temp_before = {p.name for p in Path("/tmp").glob("calibrate-mahimahi-*")}
    config = EmulatorConfig(rate_mbps=12, delay_ms=20, queue=Queue.droptail(100), uplink_loss=0.01, loss_seed=3)
    logs = Logs(datalink=tmp_path / "datalink.log", acklink=tmp_path / "acklink.log",
                uplink=tmp_path / "mm_datalink.log", downlink=tmp_path / "mm_acklink.log")
    from calibrate import binaries

    scheme = binaries.find(binaries.SCHEME)
    endpoints = [Endpoint("receiver", f"exec {scheme} cubic receiver 50001"),
                 Endpoint("sender", f"exec {scheme} cubic sender $EMU_PEER 50001", start_s=1)]
    result = engine.run(config, endpoints, workdir=tmp_path, stop_after=9, logs=logs,
                        backend=Backend("mahimahi", USER))
    assert result.summary["backend"] == "mahimahi"
    stats = analyze_datalink_log(logs.datalink)
    total = stats.total
    # With 1 % loss on a 40 ms RTT cubic cannot fill the 12 Mbit/s link (about 1.22 MSS/(RTT sqrt p),
    # some 4 Mbit/s); the one-way delay is at least the 20 ms plus a link slot, and with a
    # 100-packet DropTail queue at most about 20 + 100 + a few ms.
    assert 2 < total.tput_mbps < 12.2
    assert stats.capacity_mbps == pytest.approx(12.0, rel=0.01)  # the mm-link log's opportunities
    assert 21 < total.delay_ms < 130
    # Mahimahi's loss is after the link: about 1 % of the data plus the queue's overflow.
    assert 0.005 < total.loss < 0.1
    head = logs.uplink.read_text().splitlines()[:4]
    assert head[0].startswith("# mahimahi mm-link (Uplink)") and "droptail [packets=100]" in head[2]
    assert result.summary["uplink"]["tap_dropped_packets"] == 0
    assert result.summary["uplink"]["arrived_packets"] > 1500
    acks = analyze_datalink_log(logs.acklink).total
    assert acks.departed_packets > 1000 and 20 < acks.delay_ms < 25  # delay + one ACK slot
    assert _leftovers() == before
    assert {p.name for p in Path("/tmp").glob("calibrate-mahimahi-*")} == temp_before


@pytest.mark.needs_root
@needs_mahimahi
@pytest.mark.parametrize("priority", [None, 0])
def test_the_shells_are_scheduled_as_the_engine_is(tmp_path, priority):
    """Mahimahi's shells run real-time as the engine does (SCHED_FIFO, "FF", one priority above
    its taps), or under normal scheduling ("TS") with priority 0; the endpoints keep normal
    scheduling either way."""
    pwd.getpwnam(USER)
    seen = tmp_path / "scheduling.txt"
    config = EmulatorConfig(rate_mbps=12, delay_ms=5, queue=Queue.droptail(100))
    probe = (f"sleep 0.5; ps -o cls=,rtprio=,comm= -C mm-link,mm-delay > {seen}; "
             f"ps -o cls=,rtprio=,comm= -p $$ >> {seen}")
    engine.run(config, [Endpoint("sender", probe)], workdir=tmp_path, stop_after=3,
               backend=Backend("mahimahi", USER, realtime_priority=priority))
    rows = [line.split() for line in seen.read_text().splitlines()]
    shells = [(cls, rtprio) for cls, rtprio, comm in rows if comm.startswith("mm-")]
    endpoint = [cls for cls, _, comm in rows if not comm.startswith("mm-")]
    expected = ("FF", "11") if priority is None else ("TS", "-")  # calibrate-link's default is 10
    assert len(shells) >= 4 and set(shells) == {expected}, rows  # each shell's processes, both directions
    assert endpoint == ["TS"], rows


@pytest.mark.needs_root
@needs_mahimahi
def test_emulate_through_real_mahimahi_writes_pantheons_data_dir(tmp_path):
    data_dir = tmp_path / "d"
    result = subprocess.run(CALIBRATE + ["emulate", "--emulator", "mm-delay 10 mm-link 24mbps.trace 24mbps.trace "
                                         "--uplink-queue=droptail --uplink-queue-args=packets=50",
                                         "--schemes", "bbr", "--runtime", "5", "--out", str(data_dir),
                                         "--backend", "mahimahi", "--mahimahi-user", USER, "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    perf = json.loads((data_dir / "pantheon_perf.json").read_text())
    assert 20 < perf["bbr"]["1"]["all"]["tput"] < 24.5
    metadata = json.loads((data_dir / "pantheon_metadata.json").read_text())
    assert metadata["backend"]["name"] == "mahimahi"
    assert (data_dir / "bbr_mm_datalink_run1.log").read_text().startswith("# mahimahi mm-link (Uplink)")
