"""What a sender sees of the path's timing, under real Mahimahi and the engine's two timings.

The measurement behind the engine's Mahimahi timing model (`emulators/src/ferry.rs`): one Linux
BBR flow (our `calibrate-scheme bbr`, kernel TCP) over 12 Mbit/s, 20 ms, a 100-packet DropTail
queue, through

- real Mahimahi (`--backend mahimahi`, needs its mm-* shells on PATH and an unprivileged user),
- the engine with Mahimahi's timing (each shell direction a process with its own ms clock), and
- the engine with the idealised timing (every stage exactly on the ms boundary; the old engine).

For each it prints, from the run's own Pantheon logs and `ss -tin` samples of the sender:

- the spacing of ACK arrivals at the sender (percentiles; ideal timing keeps them on the ms grid),
- the sub-millisecond phase at which ACKs arrive (how spread over the ms they are),
- BBR's bandwidth estimate (`ss`'s bbr:(bw:...)) against the link's payload rate: a max-filtered
  estimate above the link rate makes BBR cwnd-limited, i.e. it keeps a standing queue,
- the mean and p95 one-way delay of the data.

Run as root, alone:  .venv/bin/python experiments/ack_timing.py --mahimahi-user mahimahi [--runs 3]
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate import binaries, engine
from calibrate.emulator import EmulatorConfig, Queue
from calibrate.engine import Backend, Endpoint, Logs
from calibrate.metrics import parse_datalink_log

RATE, DELAY, QUEUE = 12.0, 20, 100
#: BBR counts payload: one 1448-byte segment per 1500-byte opportunity.
PAYLOAD_MBPS = RATE * 1448 / 1500
PORT = 50001


def one_run(backend: Backend, seconds: float, seed: int) -> dict[str, float]:
    emulator = EmulatorConfig(rate_mbps=RATE, delay_ms=DELAY, queue=Queue.droptail(QUEUE), loss_seed=seed)
    tool = shlex.quote(str(binaries.find(binaries.SCHEME)))
    with tempfile.TemporaryDirectory(prefix="calibrate-ack-timing-") as work:
        w = Path(work)
        ss = w / "ss.txt"
        sender = (f"(while sleep 0.05; do ss -tin dst $EMU_PEER; done > {ss}) & "
                  f"exec {tool} bbr sender $EMU_PEER {PORT}")
        endpoints = [Endpoint("receiver", f"exec {tool} bbr receiver {PORT}"),
                     Endpoint("sender", sender, start_s=1.0)]
        logs = Logs(datalink=w / "datalink.log", acklink=w / "acklink.log")
        engine.run(emulator, endpoints, workdir=w, stop_after=1 + seconds, logs=logs, backend=backend)
        data = parse_datalink_log(logs.datalink)
        acks = parse_datalink_log(logs.acklink)
        bw = np.array([int(b) for b in re.findall(r"bbr:\(bw:(\d+)bps", ss.read_text())], dtype=float) / 1e6
    steady = acks.departure_ts > acks.departure_ts[0] + 3000  # after start-up
    t = acks.departure_ts[steady]
    gaps = np.diff(t)
    gaps = gaps[gaps > 0.2]  # ACK trains of one wake-up are one arrival
    phase = t % 1.0
    bw = bw[bw > 0.5 * PAYLOAD_MBPS]  # the data connection, past start-up
    return {"ack gap p5": np.percentile(gaps, 5), "ack gap p50": np.percentile(gaps, 50),
            "ack gap p95": np.percentile(gaps, 95),
            "ack phase sd": float(np.std(phase)),
            "bbr bw / link %": 100 * (np.median(bw) / PAYLOAD_MBPS - 1),
            "mean delay": float(np.mean(data.departure_delay)),
            "p95 delay": float(np.percentile(data.departure_delay, 95, method="nearest"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mahimahi-user", metavar="NAME")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--runtime", type=float, default=20.0)
    args = parser.parse_args()
    systems = [("engine, ideal timing", Backend(timing="ideal")), ("engine, Mahimahi timing", Backend())]
    if shutil.which("mm-link") and args.mahimahi_user:
        systems.insert(0, ("real Mahimahi", Backend("mahimahi", args.mahimahi_user)))
    else:
        print("(no mm-link on PATH or no --mahimahi-user: the engine only)", file=sys.stderr)
    rows = []
    for run in range(1, args.runs + 1):
        for name, backend in systems:
            rows.append({"system": name, "run": run, **one_run(backend, args.runtime, run)})
            print(f"run {run}: {name} done", file=sys.stderr, flush=True)
    table = pd.DataFrame(rows).groupby("system", sort=False).mean(numeric_only=True).drop(columns="run")
    pd.set_option("display.width", 200)
    print(f"Linux BBR, {RATE:g} Mbit/s, {DELAY} ms, DropTail {QUEUE}; {args.runs} runs of {args.runtime:g} s "
          f"(ACK gaps in ms, delays one-way in ms)")
    print(table.to_string(float_format=lambda v: f"{v:.2f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
