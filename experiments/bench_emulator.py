"""Emulator capacity benchmark: prints three tables and writes CSV + plots to experiments/out/.

1. Capacity of one instance: the highest constant rate at which a saturating sender still gets
   >= 99 % of the trace capacity with correct delays (p95 one-way delay within 2 ms of what the
   link, queue and propagation delay allow), in steady state (from 2 s in). Mahimahi is reported to
   break down near 650 Mbit/s.
2. The engine's own CPU share of one core (its process only, not the endpoints) at 12, 48 and
   96 Mbit/s with all four logs on. Mahimahi measured 17.9 % at 96 Mbit/s on this kind of host.
3. Instances at once: how many 12 Mbit/s paths, each carrying a cubic flow, run side by side
   before any instance's throughput or p95 delay moves more than 2 % from a solo run.

Run as root:  .venv/bin/python experiments/bench_emulator.py [--quick]
"""

from __future__ import annotations

import argparse
import csv
import os
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from calibrate import binaries, engine
from calibrate.emulator import EmulatorConfig, Queue
from calibrate.engine import Endpoint, Logs
from calibrate.metrics import analyze_datalink_log, parse_datalink_log, percentile_nearest

OUT = Path(__file__).resolve().parent / "out"
DELAY_MS = 20
CORES = os.cpu_count() or 1
console = Console()


def scheme_endpoints(scheme: str, port: int = 5000) -> list[Endpoint]:
    tool = shlex.quote(str(binaries.find(binaries.SCHEME)))
    return [
        Endpoint("receiver", f"exec {tool} {scheme} receiver {port}"),
        Endpoint("sender", f"exec {tool} {scheme} sender $EMU_PEER {port}", start_s=0.5),
    ]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


@dataclass
class Run:
    rate_mbps: float
    scheme: str
    tput_mbps: float
    utilization: float
    p95_delay_ms: float
    expected_max_delay_ms: float
    engine_cpu_share: float | None


def one_run(rate: float, scheme: str, seconds: float, workdir: Path, queue_ms: float = 10,
            measure_cpu: bool = False) -> Run:
    """A saturating flow over a constant-rate path; delay checked against link + queue + propagation."""
    packets = max(20, int(rate * queue_ms / 12))  # queue_ms of buffering at this rate
    config = EmulatorConfig(rate_mbps=rate, delay_ms=DELAY_MS, queue=Queue.droptail(packets))
    datalink = workdir / "d.log"
    logs = Logs(datalink=datalink, acklink=workdir / "a.log", uplink=workdir / "u.log", downlink=workdir / "w.log")
    args = engine.command(config, scheme_endpoints(scheme), workdir=workdir, stop_after=seconds, logs=logs)
    process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    share = None
    if measure_cpu:
        time.sleep(2.0)  # past start-up
        t0, c0 = time.monotonic(), cpu_seconds(process.pid)
        time.sleep(seconds - 3.0)
        share = (cpu_seconds(process.pid) - c0) / (time.monotonic() - t0)
    _, stderr = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"engine failed at {rate} Mbit/s: {stderr.strip()}")
    # Steady state: from 2 s in (past the sender's start-up) to the end, delivered bytes over the
    # bytes the trace offered in the same window.
    log = parse_datalink_log(datalink)
    start = 2000.0
    delivered = log.departure_bytes[log.departure_ts >= start].sum()
    offered = log.opportunity_bytes[log.opportunity_ts >= start].sum()
    window_s = (log.opportunity_ts.max() - start) / 1000
    delays = log.departure_delay[log.departure_ts >= start]
    # Worst case one-way: a full queue ahead, one slot, the propagation delay.
    expected = DELAY_MS + 1 + packets * 12 / rate
    return Run(rate, scheme, delivered * 8 / window_s / 1e6, delivered / offered, percentile_nearest(delays),
               expected, share)


def capacity(rates: list[float], scheme: str, seconds: float) -> list[Run]:
    runs = []
    with console.status("capacity ...") as status:
        for rate in rates:
            status.update(f"capacity: {scheme} at {rate:g} Mbit/s")
            with tempfile.TemporaryDirectory() as tmp:
                runs.append(one_run(rate, scheme, seconds, Path(tmp)))
    return runs


def instances(counts: list[int], seconds: float) -> list[dict]:
    config = EmulatorConfig(rate_mbps=12, delay_ms=DELAY_MS, queue=Queue.droptail(100))
    rows = []

    def run(workdir: Path):
        datalink = workdir / "d.log"
        engine.run(config, scheme_endpoints("cubic"), workdir=workdir, stop_after=seconds, logs=Logs(datalink=datalink))
        return analyze_datalink_log(datalink).total

    solo = None
    with console.status("instances ...") as status:
        for n in counts:
            status.update(f"instances: {n} at once")
            with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(n) as pool:
                dirs = [Path(tmp) / str(i) for i in range(n)]
                results = list(pool.map(run, dirs))
            if solo is None:
                solo = results[0]
            tput_dev = max(abs(r.tput_mbps - solo.tput_mbps) / solo.tput_mbps for r in results)
            delay_dev = max(abs(r.delay_ms - solo.delay_ms) / solo.delay_ms for r in results)
            rows.append({"instances": n, "per_core": n / CORES,
                         "min_tput_mbps": min(r.tput_mbps for r in results),
                         "max_tput_dev": tput_dev, "max_p95_dev": delay_dev, "ok": max(tput_dev, delay_dev) <= 0.02})
    return rows


def write_csv(name: str, rows: list[dict]) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / name
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def plot(capacity_runs: list[Run], cpu_runs: list[Run], instance_rows: list[dict]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    ax.plot([r.rate_mbps for r in capacity_runs], [100 * r.utilization for r in capacity_runs], "o-")
    ax.axhline(99, color="gray", ls="--", lw=1)
    ax.set(xlabel="trace rate (Mbit/s)", ylabel="delivered / capacity (%)", title="one instance, saturating sender")
    ax = axes[1]
    ax.bar([f"{r.rate_mbps:g}" for r in cpu_runs], [100 * (r.engine_cpu_share or 0) for r in cpu_runs])
    ax.axhline(9, color="gray", ls="--", lw=1, label="goal at 96 Mbit/s")
    ax.set(xlabel="trace rate (Mbit/s)", ylabel="engine CPU (% of one core)", title="engine CPU, all logs on")
    ax.legend()
    ax = axes[2]
    ax.plot([r["instances"] for r in instance_rows],
            [100 * max(r["max_tput_dev"], r["max_p95_dev"]) for r in instance_rows], "o-")
    ax.axhline(2, color="gray", ls="--", lw=1)
    ax.set(xlabel="12 Mbit/s instances at once", ylabel="worst deviation from solo (%)", title="instances side by side")
    fig.tight_layout()
    path = OUT / "bench_emulator.png"
    fig.savefig(path, dpi=110)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rates and shorter runs")
    parser.add_argument("--scheme", default="udp-saturator", help="saturating sender for the capacity table")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_emulator: run as root (the engine creates namespaces and TUN devices)")
    seconds = 6 if args.quick else 10
    rates: list[float] = [100, 400, 800, 1000] if args.quick else [100, 200, 400, 600, 800, 1000, 1200, 1500]

    cap = capacity(rates, args.scheme, seconds)
    table = Table(title=f"1. capacity of one instance ({args.scheme}, {DELAY_MS} ms, 10 ms of DropTail buffer)")
    for column in ("rate (Mbit/s)", "delivered (Mbit/s)", "utilization", "p95 delay (ms)", "allowed (ms)", "ok"):
        table.add_column(column, justify="right")
    for r in cap:
        ok = r.utilization >= 0.99 and r.p95_delay_ms <= r.expected_max_delay_ms + 2
        table.add_row(f"{r.rate_mbps:g}", f"{r.tput_mbps:.1f}", f"{100 * r.utilization:.1f} %", f"{r.p95_delay_ms:.1f}",
                      f"{r.expected_max_delay_ms + 2:.1f}", "yes" if ok else "NO")
    console.print(table)
    passing = [r.rate_mbps for r in cap if r.utilization >= 0.99 and r.p95_delay_ms <= r.expected_max_delay_ms + 2]
    console.print(f"highest rate with >= 99 % delivered and correct delays: {max(passing, default=0):g} Mbit/s\n")

    cpu_runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for rate in (12, 48, 96):
            cpu_runs.append(one_run(rate, "cubic", seconds, Path(tmp), measure_cpu=True))
    table = Table(title="2. engine CPU share of one core, cubic flow, all four logs on")
    for column in ("rate (Mbit/s)", "delivered (Mbit/s)", "engine CPU"):
        table.add_column(column, justify="right")
    for r in cpu_runs:
        share = "-" if r.engine_cpu_share is None else f"{100 * r.engine_cpu_share:.1f} %"
        table.add_row(f"{r.rate_mbps:g}", f"{r.tput_mbps:.1f}", share)
    console.print(table)

    counts = [1, 8, 16] if args.quick else [1, 8, 16, 32, 48, 64]
    inst = instances(counts, seconds)
    table = Table(title=f"3. 12 Mbit/s instances at once, each with a cubic flow ({CORES} cores)")
    for column in ("instances", "per core", "min tput (Mbit/s)", "max tput deviation", "max p95 deviation",
                   "within 2 %"):
        table.add_column(column, justify="right")
    for row in inst:
        table.add_row(str(row["instances"]), f"{row['per_core']:g}", f"{row['min_tput_mbps']:.2f}",
                      f"{100 * row['max_tput_dev']:.2f} %", f"{100 * row['max_p95_dev']:.2f} %",
                      "yes" if row["ok"] else "NO")
    console.print(table)
    best = max((row["instances"] for row in inst if row["ok"]), default=0)
    console.print(f"most instances within 2 % of solo: {best} ({best / CORES:g} per core)")

    write_csv("bench_emulator_capacity.csv", [asdict(r) for r in cap])
    write_csv("bench_emulator_cpu.csv", [asdict(r) for r in cpu_runs])
    write_csv("bench_emulator_instances.csv", inst)
    console.print(f"CSV and plot in {OUT}: {plot(cap, cpu_runs, inst).name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
