#!/usr/bin/env python3
"""Does a loss-limited flow's throughput depend on the program that sends it?  Real Mahimahi
against the engine, per sending program.

At a shallow buffer (default 100 Mbit/s, 5 ms, 30 packets, no loss) Linux cubic is limited by
the drops bursts cause, and how bursty a flow is depends on when its ACKs arrive and its sender
runs. The same setting is run with several endpoint programs through real Mahimahi (where the
`mm-*` shells are on PATH) and through the engine:

- `iperf3`: iperf3 client and server (the flows of the reference table and of
  `shared/data/mahimahi-targets`);
- `iperf2`: iperf 2 client and server, as Pantheon's cubic/reno/bbr wrappers run them
  (`iperf -Z CC -c …`);
- `calibrate-scheme`: this project's kernel-TCP sender and receiver (the built-in schemes);
- `python`: a plain blocking sender (`sendall` of 128 KiB) and receiver, for a program that
  does nothing special.

Printed per system and program: delivered packets per second (from mm-link's uplink log, over
the run's busy seconds) as a share of the link, packets dropped, data segments per ACK (from the
Pantheon logs), and on-off gaps: how often per 10 s no packet of the flow reached the link for
3 ms or more (a window sent in one burst instead of clocked out by ACKs). Run alone, as root:

    .venv/bin/python experiments/senders.py --mahimahi-user mahimahi [--replicates 4] [--runtime 12]
        [--realtime-priority 0]    # both emulators under normal scheduling, as Mahimahi is run by hand
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate import engine
from calibrate.binaries import SCHEME, find
from calibrate.emulator import EmulatorConfig, Queue
from calibrate.engine import Backend, Endpoint, Logs
from calibrate.evidence import parse_link_log
from calibrate.metrics import parse_datalink_log

OUT = Path(__file__).resolve().parent / "out"
PORT = 5201
PACKET_BYTES = 1504  # an MTU-sized packet as mm-link counts it
START_S = 1.0
GAP_MS = 3  # an on-off gap: this many whole milliseconds or more without a packet reaching the link

PY_SENDER = ("import socket,sys,time\n"
             "buf=bytes((i*151+7)&255 for i in range(131072))\n"
             "while True:\n"
             " s=socket.socket();s.setsockopt(socket.IPPROTO_TCP,socket.TCP_CONGESTION,sys.argv[3].encode())\n"
             " try:\n  s.connect((sys.argv[1],int(sys.argv[2])));break\n"
             " except OSError:\n  s.close();time.sleep(0.1)\n"
             "while True:\n s.sendall(buf)\n")
PY_RECEIVER = ("import socket,sys\n"
               "l=socket.socket();l.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
               "l.bind(('0.0.0.0',int(sys.argv[1])));l.listen(1);c,_=l.accept()\n"
               "while c.recv(1<<20):\n pass\n")


def one_line(code: str) -> str:
    """A Python program as one shell word without newlines (an endpoint is one command line)."""
    return shlex.quote(f"exec({code!r})")


def programs(cc: str, runtime: float) -> dict[str, tuple[str, str]]:
    """Per program: (receiver command, sender command), for a flow of `runtime` seconds."""
    scheme = shlex.quote(str(find(SCHEME)))
    python = shlex.quote(sys.executable)
    t = f"{runtime:g}"
    return {
        "iperf3": (f"exec iperf3 -s -p {PORT}", f"iperf3 -c $EMU_PEER -p {PORT} -C {cc} -t {t} > /dev/null"),
        "iperf2": (f"exec iperf -s -p {PORT} > /dev/null",
                   f"exec iperf -c $EMU_PEER -p {PORT} -Z {cc} -t {t} > /dev/null"),
        "calibrate-scheme": (f"exec {scheme} {cc} receiver {PORT}", f"exec {scheme} {cc} sender $EMU_PEER {PORT}"),
        "python": (f"exec {python} -c {one_line(PY_RECEIVER)} {PORT}",
                   f"exec {python} -c {one_line(PY_SENDER)} $EMU_PEER {PORT} {cc}"),
    }


NEEDS = {"iperf3": "iperf3", "iperf2": "iperf"}


def measure(emulator: EmulatorConfig, commands: tuple[str, str], backend: Backend, runtime: float) -> dict[str, float]:
    receiver, sender = commands
    with tempfile.TemporaryDirectory(prefix="calibrate-senders-") as work:
        d = Path(work)
        logs = Logs(uplink=d / "up.log", datalink=d / "data.log", acklink=d / "ack.log")
        engine.run(emulator, [Endpoint("receiver", receiver), Endpoint("sender", sender, start_s=START_S)],
                   workdir=d, stop_after=START_S + runtime + 0.5, logs=logs, backend=backend, check=False)
        link = parse_link_log(d / "up.log")
        data = parse_datalink_log(d / "data.log")
        acks = parse_datalink_log(d / "ack.log")
    # full-sized data packets only: iperf's end-of-test exchange can leave after the flow
    departures = link.time_ms[(link.kind == "-") & (link.size >= 1000)]
    drops = link.kind == "d"
    if departures.size == 0:
        return {"pkts/s": 0.0, "dropped": 0, "segments/ACK": float("nan")}
    # the flow's busy seconds: first to last data departure (iperf stops itself after `runtime`)
    span_s = max((departures.max() - departures.min()) / 1000, 1e-3)
    full = (data.departure_bytes >= 1000).sum()
    return {"pkts/s": departures.size / span_s, "dropped": int(link.size[drops].sum()),
            "segments/ACK": full / max(acks.departure_ts.size, 1),
            "gaps/10 s": 10 * on_off_gaps(link.time_ms[(link.kind == "+") & (link.size >= 1000)]) / span_s}


def on_off_gaps(arrivals_ms: np.ndarray, at_least_ms: int = GAP_MS) -> int:
    """How often the sender's packets stopped reaching the link for `at_least_ms` whole
    milliseconds or more: a flow sent in on-off bursts (a window at a time) instead of clocked
    out by its ACKs."""
    ms = np.unique(arrivals_ms.astype(np.int64))
    return int(np.sum(np.diff(ms) > at_least_ms))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mahimahi-user", metavar="NAME", help="unprivileged account Mahimahi's shells run as")
    parser.add_argument("--setting", default="100/5/30", metavar="RATE/DELAY/QUEUE",
                        help="Mbit/s, one-way ms, DropTail packets (default: %(default)s)")
    parser.add_argument("--cc", default="cubic", help="kernel congestion control (default: %(default)s)")
    parser.add_argument("--programs", default="iperf3,iperf2,calibrate-scheme,python", metavar="A,B")
    parser.add_argument("--runtime", type=float, default=12.0, help="seconds per flow (default: %(default)s)")
    parser.add_argument("--replicates", type=int, default=4, help="runs per system and program (default: %(default)s)")
    parser.add_argument("--realtime-priority", type=int, metavar="N",
                        help="SCHED_FIFO priority of the engine and of Mahimahi's shells (default: calibrate-link's, "
                             "10); 0 runs both under normal scheduling, as Mahimahi is run by hand")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    rate, delay, queue = args.setting.split("/")
    emulator = EmulatorConfig(rate_mbps=float(rate), delay_ms=int(delay), queue=Queue.droptail(int(queue)))
    link_pkts_s = float(rate) * 1e6 / 8 / PACKET_BYTES
    table = programs(args.cc, args.runtime)
    wanted = [p.strip() for p in args.programs.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in table]
    if unknown:
        raise SystemExit(f"--programs: unknown {', '.join(unknown)}; the programs are {', '.join(table)}")
    missing = [NEEDS[p] for p in wanted if p in NEEDS and shutil.which(NEEDS[p]) is None]
    if missing:
        raise SystemExit(f"install {' and '.join(missing)} first (apt-get install {' '.join(missing)})")
    priority = args.realtime_priority
    systems = [("engine", Backend("engine", realtime_priority=priority))]
    if shutil.which("mm-link") and args.mahimahi_user:
        systems.insert(0, ("mahimahi", Backend("mahimahi", args.mahimahi_user, realtime_priority=priority)))
    else:
        print("real Mahimahi not run: it needs mm-link on PATH and --mahimahi-user", file=sys.stderr)

    records = []
    total = len(systems) * len(wanted) * args.replicates
    started = time.monotonic()
    for replicate in range(1, args.replicates + 1):
        for program in wanted:
            for system, backend in systems:
                row = measure(emulator, table[program], backend, args.runtime)
                records.append({"system": system, "program": program, "replicate": replicate, **row})
                print(f"[{len(records)}/{total}, {time.monotonic() - started:.0f} s] {system} {program}: "
                      f"{row['pkts/s']:.0f} packets/s, {row['dropped']} dropped", file=sys.stderr, flush=True)
    runs = pd.DataFrame(records)
    runs["% of link"] = 100 * runs["pkts/s"] / link_pkts_s
    summary = runs.groupby(["program", "system"], sort=False).agg(
        runs=("replicate", "count"), link_pct=("% of link", "mean"), link_pct_sd=("% of link", "std"),
        dropped=("dropped", "mean"), seg_per_ack=("segments/ACK", "mean"), gaps_per_10s=("gaps/10 s", "mean"))
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    runs.to_csv(args.out / f"senders-{stamp}.csv", index=False)
    print(f"\n{args.setting} {args.cc}, {args.runtime:g} s flows: mean over runs (csv: {args.out}/senders-{stamp}.csv)")
    print(summary.to_string(float_format=lambda v: f"{v:.1f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
