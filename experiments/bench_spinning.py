"""Runs at once beside a sender that spins: what a busy-waiting scheme does to its host's runs.

UDT's send queue spins on the clock between sends (modong/pcc, vivace, PCC-Uspace), and so do
our ports of pcc-2017, vivace-2018 and pcc_experimental-2018: each such sender holds a whole
core for the run's length, at any rate.  A calibration's Ray tasks ask for CPU by the emulated
rate (`calibrate.evaluation.cpu_share`: 0.2 of a core at 10 Mbit/s, so a 2-core node takes 8),
unless the scheme busy-waits (`RunTask.cpus`: then one core).  This measures what that rule
avoids: a spinning scheme and kernel cubic, `--replicates` runs each, run by `calibrate
emulate` one at a time, at one per core, and at the rate rule's packing (`SLOTS_PER_CORE` per
core), over the same emulator; per packing and scheme the runs' mean throughput and p95 delay,
their spread, and the engine's release lateness (p99 over the runs' uplinks, worst run).

Run as root, alone on the machine:

    .venv/bin/python experiments/bench_spinning.py [--scheme pcc_experimental-2018] [--replicates 4]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from calibrate import binaries, engine
from calibrate.evaluation import SLOTS_PER_CORE

OUT = Path(__file__).resolve().parent / "out"
EMULATOR = "mm-delay 20 mm-link 12mbps.trace 12mbps.trace --uplink-queue=droptail --uplink-queue-args=packets=100"
CORES = os.cpu_count() or 1


def packing(parallel: int, scheme: str, replicates: int, runtime: float) -> list[dict]:
    """`calibrate emulate` of `scheme` and cubic with `parallel` runs at once: one row per run."""
    with tempfile.TemporaryDirectory(prefix="calibrate-spinning-") as tmp:
        command = [str(binaries.find("calibrate")), "emulate", "--emulator", EMULATOR,
                   "--schemes", f"{scheme},cubic", "--replicates", str(replicates),
                   "--parallel", str(parallel), "--runtime", f"{runtime:g}", "--out", tmp, "--json"]
        print(f"{parallel} at once: {' '.join(command[1:])}", file=sys.stderr, flush=True)
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"calibrate emulate failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        rows = []
        for run in json.loads(done.stdout)["runs"]:
            late = engine.lateness(Path(tmp, f"{run['cc']}_engine_run{run['run']}.json"))
            flows = run["flows"] or {}
            rows.append({"at once": parallel, "scheme": run["scheme"], "run": run["run"], "valid": run["valid"],
                         "tput": (flows.get("all") or {}).get("tput"), "p95": (flows.get("all") or {}).get("delay"),
                         "late p99": late.get("late p99")})
        return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scheme", default="pcc_experimental-2018", help="a scheme whose sender spins")
    parser.add_argument("--replicates", type=int, default=4, help="runs of each scheme per packing")
    parser.add_argument("--runtime", type=float, default=20.0)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the engine needs network namespaces")
    runs = pd.DataFrame([row for parallel in sorted({1, CORES, SLOTS_PER_CORE * CORES})
                         for row in packing(parallel, args.scheme, args.replicates, args.runtime)])
    OUT.mkdir(exist_ok=True)
    path = OUT / f"bench_spinning_{pd.Timestamp.now():%Y%m%dT%H%M%S}.csv"
    runs.to_csv(path, index=False)
    table = runs[runs["valid"]].groupby(["at once", "scheme"], sort=False).agg(
        runs=("tput", "size"), tput=("tput", "mean"), tput_sd=("tput", "std"), p95=("p95", "mean"),
        p95_sd=("p95", "std"), late_p99_worst=("late p99", "max"))
    invalid = runs[~runs["valid"]].groupby(["at once", "scheme"], sort=False).size().rename("invalid")
    table = table.join(invalid).fillna({"invalid": 0}).astype({"invalid": int})
    print(f"Runs at once on {CORES} cores ({EMULATOR}; {args.runtime:g} s runs; tput Mbit/s, p95 ms, "
          "engine release lateness ms)")
    print(table.to_string(float_format=lambda v: f"{v:.2f}"))
    print(f"runs: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
