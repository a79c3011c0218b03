"""The calibration service under read load: how fast it answers while a calibration runs, and
what that load costs the calibration.

1. Starts `calibrate serve` (its own root, a free loopback port, one job at a time) and makes it
   an API token, as tests/service_fixtures.py does.
2. A quiet run: submits one calibration and waits for it, nothing else asking the server.
3. A loaded run: submits the same calibration again (``force``, or the server would answer with
   the first job) and, for as long as it runs, --clients concurrent clients per endpoint ask
   ``GET /v1/calibrations/{id}`` (the job's summary: journal, result, ETA) and --clients more ask
   ``GET /v1/emulators`` (the catalogue: every finished job's export report) as fast as they
   are answered (httpx on asyncio, one connection per client, keep-alive).
4. Prints, per endpoint, the requests answered, errors, requests/s, and the p50/p95/p99
   latency; and the calibration's wall time quiet and loaded: the job's (the server's started
   to finished, Ray's start included) and the calibration's own (result.json's wall_s).
   Writes the requests as CSV and a figure (requests/s over the run, latency CDFs, the wall
   times) to --out.

--rounds K alternates quiet and loaded runs K times (the first quiet run also warms the host's
caches, which favours the loaded runs a little; with K >= 2 the means say more).  The load
clients run on the same host as the server and its calibration, so what they cost the
calibration includes their own CPU: that is the situation of a lab whose users poll the
server it runs on.

Run as root, alone (the emulators are real-time):

    .venv/bin/python experiments/service_load.py --clients 8
    .venv/bin/python experiments/service_load.py --clients 8 --budget 8 --runtime 10 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd

OUT = Path(__file__).resolve().parent / "out"
ENDPOINTS = ("calibration", "catalogue")
LABELS = {"calibration": "GET /v1/calibrations/{id}", "catalogue": "GET /v1/emulators"}
TERMINAL = {"done", "failed", "cancelled"}


# ----------------------------------------------------------------------------------------------
# The server


@dataclass
class Server:
    """`calibrate serve` in a child process, with a token."""

    root: Path
    port: int
    process: subprocess.Popen
    token: str
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, root: Path, max_running: int = 1) -> Server:
        calibrate = [sys.executable, "-m", "calibrate", "serve"]
        created = subprocess.run([*calibrate, "token", "create", "--root", str(root), "--name", "load"],
                                 check=True, capture_output=True, text=True)
        token = created.stdout.strip().splitlines()[0]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        log = root / "serve.log"
        process = subprocess.Popen([*calibrate, "--root", str(root), "--port", str(port),
                                    "--max-running", str(max_running)],
                                   stdout=log.open("w"), stderr=subprocess.STDOUT)
        server = cls(root, port, process, token, log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                sys.exit(f"service_load: the server exited ({process.returncode}):\n{log.read_text()}")
            try:
                httpx.get(f"{server.url}/v1/status", timeout=2).raise_for_status()
                return server
            except httpx.HTTPError:
                time.sleep(0.3)
        server.stop()
        sys.exit(f"service_load: the server did not answer within 60 s:\n{log.read_text()}")

    def stop(self) -> None:
        """SIGTERM (the server ends its jobs), SIGKILL after 30 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# ----------------------------------------------------------------------------------------------
# One calibration, with or without load


@dataclass
class Run:
    label: str  # "quiet" or "loaded"
    round: int
    job: str = ""
    state: str = ""
    job_wall_s: float | None = None  # the server's started -> finished
    calibration_wall_s: float | None = None  # result.json's wall_s (the loop, Ray's start excluded)
    client_wall_s: float = 0.0  # submit -> the client saw it end
    evaluations: int = 0
    requests: list[tuple[str, float, float, int]] = field(default_factory=list)  # endpoint, t, latency, status


def submit(server: Server, request: dict[str, Any], force: bool) -> str:
    response = httpx.post(f"{server.url}/v1/calibrations", json={**request, "force": force},
                          headers={"Authorization": f"Bearer {server.token}"}, timeout=60)
    if response.status_code not in (200, 202):
        sys.exit(f"service_load: the server refused the calibration ({response.status_code}): {response.text}")
    return response.json()["id"]


async def _client(http: httpx.AsyncClient, name: str, url: str, stop: asyncio.Event, t0: float,
                  out: list[tuple[str, float, float, int]]) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        try:
            status = (await http.get(url)).status_code
        except httpx.HTTPError:
            status = 0
        out.append((name, started - t0, time.perf_counter() - started, status))


async def _watch(server: Server, job: str, clients: int, run: Run, poll_s: float = 1.0) -> dict[str, Any]:
    """Wait for the job to end; with `clients` > 0, load the server meanwhile."""
    stop = asyncio.Event()
    t0 = time.perf_counter()
    urls = {"calibration": f"{server.url}/v1/calibrations/{job}", "catalogue": f"{server.url}/v1/emulators"}
    limits = httpx.Limits(max_connections=2 * clients + 1, max_keepalive_connections=2 * clients + 1)
    auth = {"Authorization": f"Bearer {server.token}"}  # reads need the token too (jobs are their token's)
    async with httpx.AsyncClient(limits=limits, timeout=60, headers=auth) as http:
        tasks = [asyncio.create_task(_client(http, name, urls[name], stop, t0, run.requests))
                 for name in ENDPOINTS for _ in range(clients)]
        async with httpx.AsyncClient(timeout=60, headers=auth) as watcher:
            while True:
                summary = (await watcher.get(urls["calibration"])).json()
                if summary["state"] in TERMINAL:
                    break
                await asyncio.sleep(poll_s)
        stop.set()
        await asyncio.gather(*tasks)
    return summary


def calibrate_once(server: Server, request: dict[str, Any], run: Run, clients: int, force: bool) -> Run:
    started = time.monotonic()
    run.job = submit(server, request, force)
    summary = asyncio.run(_watch(server, run.job, clients, run))
    run.client_wall_s = time.monotonic() - started
    run.state = summary["state"]
    run.job_wall_s = summary.get("elapsed_s")
    run.evaluations = summary.get("evaluations") or 0
    if run.state == "done":
        report = httpx.get(f"{server.url}/v1/calibrations/{run.job}/files/emulator.json", timeout=60,
                           headers={"Authorization": f"Bearer {server.token}"}).json()
        run.calibration_wall_s = report.get("wall_s")
    else:
        print(f"service_load: job {run.job} ended {run.state}: {summary.get('message')}", file=sys.stderr)
    return run


# ----------------------------------------------------------------------------------------------
# Tables and the figure


def request_table(runs: list[Run]) -> pd.DataFrame:
    rows = [{"round": r.round, "endpoint": e, "t_s": t, "latency_ms": 1000 * lat, "status": s}
            for r in runs if r.label == "loaded" for e, t, lat, s in r.requests]
    return pd.DataFrame(rows, columns=["round", "endpoint", "t_s", "latency_ms", "status"])


def endpoint_summary(requests: pd.DataFrame, runs: list[Run]) -> pd.DataFrame:
    loaded = {r.round: r for r in runs if r.label == "loaded"}
    out = []
    for endpoint, group in requests.groupby("endpoint", sort=False):
        ok = group[group["status"] == 200]
        seconds = sum(g["t_s"].max() for _, g in group.groupby("round"))  # each round's load window
        out.append({"endpoint": LABELS[endpoint], "requests": len(group), "errors": int((group["status"] != 200).sum()),
                    "requests/s": len(ok) / seconds if seconds else np.nan,
                    "p50 ms": ok["latency_ms"].quantile(0.50), "p95 ms": ok["latency_ms"].quantile(0.95),
                    "p99 ms": ok["latency_ms"].quantile(0.99), "rounds": len(loaded)})
    return pd.DataFrame(out).set_index("endpoint")


def wall_table(runs: list[Run]) -> pd.DataFrame:
    rows = [{"round": r.round, "load": r.label, "job": r.job, "state": r.state, "evaluations": r.evaluations,
             "job wall s": r.job_wall_s, "calibration wall s": r.calibration_wall_s,
             "submit to end s": r.client_wall_s} for r in runs]
    return pd.DataFrame(rows)


def plot(requests: pd.DataFrame, walls: pd.DataFrame, clients: int, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    last = requests[requests["round"] == requests["round"].max()]
    whole = int(last["t_s"].max())  # the last second is cut short by the job's end
    for endpoint, group in last.groupby("endpoint", sort=False):
        ok = group[(group["status"] == 200) & (group["t_s"] < whole)]
        per_s = ok.groupby(ok["t_s"].astype(int)).size()
        ax.plot(per_s.index, per_s.values, label=LABELS[endpoint])
    ax.set(xlabel="time since submission (s)", ylabel="requests answered per second",
           title=f"{clients} clients per endpoint, during the calibration")
    ax.legend()
    ax = axes[1]
    for endpoint, group in requests.groupby("endpoint", sort=False):
        latency = np.sort(group.loc[group["status"] == 200, "latency_ms"].to_numpy())
        ax.plot(latency, np.arange(1, len(latency) + 1) / max(len(latency), 1), label=LABELS[endpoint])
    ax.set_xscale("log")
    ax.set(xlabel="latency (ms)", ylabel="fraction of requests", title="latency under load (CDF)")
    ax.grid(alpha=0.3)
    ax.legend()
    ax = axes[2]
    means = walls.groupby("load", sort=False)[["job wall s", "calibration wall s"]].mean()
    x = np.arange(len(means))
    ax.bar(x - 0.2, means["job wall s"], width=0.4, label="job (Ray's start included)")
    ax.bar(x + 0.2, means["calibration wall s"], width=0.4, label="calibration loop (wall_s)")
    ax.set_xticks(x, means.index)
    ax.set(ylabel="wall time (s)", title="the calibration, quiet vs loaded")
    ax.legend()
    fig.tight_layout()
    path = out / "service_load.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients per endpoint (default: 8)")
    parser.add_argument("--rounds", type=int, default=1, help="quiet + loaded runs, alternated (default: 1)")
    parser.add_argument("--target", default="nepal")
    parser.add_argument("--schemes", default="vegas,saturator")
    parser.add_argument("--links", default="constant")
    parser.add_argument("--budget", type=int, default=6)
    parser.add_argument("--replicates", type=int, default=1)
    parser.add_argument("--runtime", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", type=Path, help="the server's root (default: a temporary directory, removed)")
    parser.add_argument("--out", type=Path, default=OUT, help="CSV and figure directory (default: experiments/out)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("service_load: run as root (the server's jobs run emulators)")
    request = {"target": args.target,
               "options": {"schemes": args.schemes, "links": args.links, "budget": args.budget,
                           "replicates": args.replicates, "runtime": args.runtime, "seed": args.seed}}
    root = args.root or Path(tempfile.mkdtemp(prefix="calibrate-service-load-"))
    root.mkdir(parents=True, exist_ok=True)
    server = Server.start(root)
    print(f"server {server.url}, root {root}; {args.target} {request['options']}", flush=True)
    runs: list[Run] = []
    try:
        for number in range(1, args.rounds + 1):
            for label, clients in (("quiet", 0), ("loaded", args.clients)):
                run = calibrate_once(server, request, Run(label, number), clients, force=bool(runs))
                runs.append(run)
                print(f"round {number}, {label}: job {run.job} {run.state} in {run.client_wall_s:.0f} s"
                      + (f", {len(run.requests)} requests" if clients else ""), flush=True)
    finally:
        server.stop()
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)

    requests = request_table(runs)
    walls = wall_table(runs)
    pd.set_option("display.width", 200)
    print(f"\nRead load during a calibration ({args.target}, budget {args.budget}, {args.replicates} × "
          f"{args.runtime:g} s; {args.clients} clients per endpoint, {os.cpu_count()} cores, client and "
          f"server on this host)")
    if len(requests):
        print(endpoint_summary(requests, runs).to_string(float_format=lambda v: f"{v:.1f}"))
    print("\nThe calibration's wall time, quiet and under that load")
    print(walls.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    means = walls.groupby("load", sort=False)[["job wall s", "calibration wall s"]].mean()
    if {"quiet", "loaded"} <= set(means.index):
        change = 100 * (means.loc["loaded"] / means.loc["quiet"] - 1)
        print(f"loaded vs quiet: job {change['job wall s']:+.1f} %, calibration loop "
              f"{change['calibration wall s']:+.1f} %")
    args.out.mkdir(parents=True, exist_ok=True)
    requests.to_csv(args.out / "service_load-requests.csv", index=False)
    walls.to_csv(args.out / "service_load-wall.csv", index=False)
    if len(requests):
        print(f"CSV and figure in {args.out}: {plot(requests, walls, args.clients, args.out).name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
