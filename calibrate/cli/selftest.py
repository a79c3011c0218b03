"""`calibrate selftest`: check that this host can emulate, by running real traffic over an
emulated path: a ping, then a kernel TCP flow, measured with Pantheon's metrics."""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import shutil
from pathlib import Path

from rich.console import Console
from rich.table import Table

from calibrate import binaries, engine, probes, scratch
from calibrate.cli.common import old_spelling
from calibrate.emulator import EmulatorConfig
from calibrate.engine import Endpoint, Logs
from calibrate.errors import InputError
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
    parser.add_argument("--runtime", type=float, default=10.0, metavar="S",
                        help="seconds of the TCP flow (default: %(default)s)")
    old_spelling(parser, "--seconds", "--runtime", "runtime", type=float, metavar="S")
    parser.add_argument("--schemes", default="cubic", metavar="CC",
                        help="the kernel TCP congestion control of the flow, one (default: %(default)s)")
    old_spelling(parser, "--cc", "--schemes", "schemes", metavar="CC")
    parser.add_argument("--out", type=Path, metavar="DIR", help="keep the logs in this directory")
    parser.add_argument("--json", action="store_true",
                        help="print the results as JSON on stdout instead of tables")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from calibrate.cli.common import writable

    if not (math.isfinite(args.runtime) and args.runtime > 0):
        raise InputError(f"--runtime must be more than 0 seconds (the TCP flow's length), got "
                         f"{args.runtime:g}; e.g. --runtime 10")
    names = [c.strip() for c in args.schemes.split(",") if c.strip()]
    if len(names) != 1 or not re.fullmatch(r"[A-Za-z0-9_-]+", names[0]):
        raise InputError(f"--schemes {args.schemes!r}: the self-test runs one kernel TCP flow; give "
                         f"one congestion control the kernel has, e.g. --schemes cubic or --schemes bbr")
    args.cc = names[0]
    config = EmulatorConfig.parse(args.emulator)
    config.check_trace_files()
    console = Console(stderr=True)
    if args.out:
        workdir = writable(Path(args.out), "--out", directory=True)
        workdir.mkdir(parents=True, exist_ok=True)
        return _selftest(args, config, console, workdir)
    # the logs are kept when the test ran (the report names them); removed when it did not
    workdir = scratch.make("selftest")
    try:
        return _selftest(args, config, console, workdir, keep=True)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise


def _selftest(args: argparse.Namespace, config: EmulatorConfig, console: Console, workdir: Path,
              keep: bool = False) -> int:
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
    with console.status(f"{args.runtime:g} s {args.cc} flow over the emulated path ..."):
        result = engine.run(config, endpoints, workdir=workdir, stop_after=args.runtime, logs=logs)
    stats = analyze_datalink_log(datalink)
    if keep:
        workdir = scratch.keep(workdir)

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
