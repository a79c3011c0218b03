"""`calibrate selftest`: check that this host can emulate, by running real traffic over an
emulated path: a ping, then a kernel TCP flow, measured with Pantheon's metrics."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from calibrate import binaries, engine, probes
from calibrate.emulator import EmulatorConfig
from calibrate.engine import Endpoint, Logs
from calibrate.metrics import analyze_datalink_log

DEFAULT_EMULATOR = (
    "mm-delay 20 mm-link 12mbps.trace 12mbps.trace --uplink-queue=droptail --uplink-queue-args=packets=100")

def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "selftest",
        help="emulate a path and run real traffic over it (checks this host)",
        description="Run a ping and a kernel TCP flow over an emulated path and report what Pantheon's "
        "metrics measure. Needs root (network namespaces, TUN devices).",
    )
    parser.add_argument("--emulator", default=DEFAULT_EMULATOR,
                        help="Mahimahi command or Pantheon test.py arguments (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the TCP flow (default: %(default)s)")
    parser.add_argument("--cc", default="cubic", help="kernel congestion control of the flow (default: %(default)s)")
    parser.add_argument("--out", type=Path, help="keep the logs in this directory")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = EmulatorConfig.parse(args.emulator)
    console = Console(stderr=True)
    workdir = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="calibrate-selftest-"))
    workdir.mkdir(parents=True, exist_ok=True)
    console.print(f"engine: {binaries.find(binaries.LINK)}\nemulator: {config.mahimahi_command()}")

    with console.status("ping over the emulated path ..."):
        ping_out = workdir / "ping.txt"
        engine.run(config, [Endpoint("sender", f"ping -c 10 -i 0.1 $EMU_PEER > {ping_out}")], workdir=workdir,
                   stop_after=30)
        rtts = [float(x) for x in re.findall(r"time=([\d.]+) ms", ping_out.read_text())]

    datalink = workdir / "datalink.log"
    logs = Logs(datalink=datalink, acklink=workdir / "acklink.log",
                uplink=workdir / "mm_datalink.log", downlink=workdir / "mm_acklink.log")
    endpoints = [
        Endpoint("receiver", probes.command_line("tcp-sink", 5000)),
        Endpoint("sender", probes.command_line("tcp-source", "-", 5000, shlex.quote(args.cc))),
    ]
    with console.status(f"{args.seconds:g} s {args.cc} flow over the emulated path ..."):
        result = engine.run(config, endpoints, workdir=workdir, stop_after=args.seconds, logs=logs)
    stats = analyze_datalink_log(datalink)

    report = {
        "emulator": config.mahimahi_command(),
        "ping_rtt_ms": {"min": min(rtts, default=None), "max": max(rtts, default=None), "count": len(rtts)},
        "flow": {"cc": args.cc, "throughput_mbps": stats.total.tput_mbps, "p95_delay_ms": stats.total.delay_ms,
                 "loss": stats.total.loss, "capacity_mbps": stats.capacity_mbps},
        "queue_drops": result.summary["uplink"]["queue_dropped_packets"],
        "logs": str(workdir),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    table = Table(title=f"self-test over {config.describe()}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("ping RTT (ms)", f"{min(rtts):.1f} – {max(rtts):.1f} ({len(rtts)} pings)" if rtts else "no reply")
    table.add_row(f"{args.cc} throughput (Mbit/s)", f"{stats.total.tput_mbps:.2f}")
    table.add_row("link capacity (Mbit/s)", f"{stats.capacity_mbps:.2f}" if stats.capacity_mbps else "-")
    table.add_row("p95 one-way delay (ms)", f"{stats.total.delay_ms:.1f}")
    # loss (like the delay above) is None when nothing entered the path: formatting it fails then
    table.add_row("loss (%)", f"{100 * stats.total.loss:.2f}")  # type: ignore[operator]
    table.add_row("queue drops (packets)", str(report["queue_drops"]))
    Console().print(table)
    console.print(f"logs (Pantheon and Mahimahi formats): {workdir}")
    return 0
