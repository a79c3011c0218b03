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
   With --hostile N, N more clients send, back to back, hostile requests in turn (`hostile_probes`,
   rows of the bad-input table of tests/test_service.py): malformed and oversized bodies (by
   Content-Length and chunked), oversized uploads, uploads the readers refuse, archives with
   '..'/absolute members, links out, device files, 1000-deep paths, gzip bombs, and one the
   reader refuses after extracting it; no token, a bad one, a second token ("another user")
   reading and cancelling the running job; SQL-shaped ids, a 5000-digit Last-Event-ID, a path
   out of files/, cancelling a finished job.  Each has its expected status (4xx).  The server
   then starts with --max-upload-bytes 1 MiB and --max-extract-bytes 16 MiB, so that no body
   is over 2 MB and the bombs are 33 KB on the wire (they expand to 32 MiB).
4. Prints, per endpoint, the requests answered, errors, requests/s, and the p50/p95/p99
   latency; and the calibration's wall time quiet and loaded: the job's (the server's started
   to finished, Ray's start included) and the calibration's own (result.json's wall_s).
   Writes the requests as CSV and a figure (requests/s over the run, latency CDFs, the wall
   times) to --out.
5. Checks each calibration's journal (ROOT/jobs/ID/run/evaluations.jsonl, `check_journal`):
   every line a whole record, indices 0..n-1, each candidate once, every proposed candidate
   journaled, the budget's count per link kind, as many as the server reports, and its bytes
   unchanged from the job's end to the last client's; and that nothing appeared under the
   server's uploads/ and cache/, nor any job but the run's own, during it.  With --hostile,
   prints per probe: sent, answered as expected, answered otherwise (status x count), errors
   and timeouts, p50/p99 latency; the hostile requests/s; and a one-line verdict.  The hostile
   requests go to service_load-hostile.csv, their requests/s into the figure.

--rounds K alternates quiet and loaded runs K times (the first quiet run also warms the host's
caches, which favours the loaded runs a little; with K >= 2 the means say more).  The load
clients run on the same host as the server and its calibration, so what they cost the
calibration includes their own CPU: that is the situation of a lab whose users poll the
server it runs on.

Run as root, alone (the emulators are real-time):

    .venv/bin/python experiments/service_load.py --clients 8
    .venv/bin/python experiments/service_load.py --clients 8 --budget 8 --runtime 10 --rounds 2
    .venv/bin/python experiments/service_load.py --clients 8 --hostile 4 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import io
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import warnings
import zipfile
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import numpy as np
import pandas as pd

from calibrate.runs.journal import JOURNAL, RunDir

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

    @staticmethod
    def make_token(root: Path, name: str) -> str:
        """`calibrate serve token create`: the token it prints (once)."""
        created = subprocess.run([sys.executable, "-m", "calibrate", "serve", "token", "create", "--root", str(root),
                                  "--name", name], check=True, capture_output=True, text=True)
        return created.stdout.strip().splitlines()[0]

    @classmethod
    def start(cls, root: Path, max_running: int = 1, options: tuple[str, ...] = ()) -> Server:
        """The server on `root`; `options` are more `calibrate serve` options."""
        calibrate = [sys.executable, "-m", "calibrate", "serve"]
        token = cls.make_token(root, "load")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        log = root / "serve.log"
        process = subprocess.Popen([*calibrate, "--root", str(root), "--port", str(port),
                                    "--max-running", str(max_running), *options],
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
# Hostile requests: rows of the bad-input table of tests/test_service.py, bounded


#: the server's --max-upload-bytes and --max-extract-bytes with --hostile: small enough that every
#: oversized body is a few MB on the wire and every archive bomb a few tens of KB
HOSTILE_UPLOAD_LIMIT = 1024**2
HOSTILE_EXTRACT_LIMIT = 16 * 1024**2
_ROW = "scheme,runs,tput_mbps_mean,delay_p95_ms_mean,loss_pct_mean\ncubic,10,5.1,52.0,0.2\n"
_SQL_ID = quote("1' OR '1'='1", safe="")
_SQL_DROP = quote("x'; DROP TABLE jobs; --", safe="")


def _tar_gz(members: list[tuple[str, bytes, dict[str, Any]]]) -> bytes:
    """A .tar.gz of (name, data, TarInfo attributes), built in memory."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data, attrs in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            for key, value in attrs.items():
                setattr(info, key, value)
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return out.getvalue()


def _zip(name: str, data: bytes, mode: int) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("exp/pantheon_metadata.json", '{"cc_schemes": ["cubic"]}')
        info = zipfile.ZipInfo(name)
        info.external_attr = mode << 16
        zf.writestr(info, data)
    return out.getvalue()


def hostile_uploads() -> dict[str, tuple[str, bytes]]:
    """Uploads the server refuses (422): (file name, bytes), each under 100 KB on the wire."""
    zeros = b"\0" * (4 * 1024**2)
    meta: tuple[str, bytes, dict[str, Any]] = ("exp/pantheon_metadata.json", b'{"cc_schemes": ["cubic"]}', {})
    uploads = {
        "table declaring 1e30 flows": ("t.csv", f"# flows: 1e30\n{_ROW}".encode()),
        "table declaring nan flows": ("t.csv", f"# flows: nan\n{_ROW}".encode()),
        "table with a negative runtime": ("t.csv", f"# runtime_s: -30\n{_ROW}".encode()),
        "JSON table with loss: 5": ("t.json", json.dumps({"schemes": {"cubic": {
            "runs": 10, "tput_mbps": {"mean": 5.1}, "delay_p95_ms": {"mean": 52.0}, "loss": 5}}}).encode()),
        "upload of another kind": ("evil.sh", b"rm -rf /"),
        "upload that is no archive": ("empty.tar.gz", b"not gzip"),
        "archive with a '..' member": ("up.tar.gz", _tar_gz([meta, ("exp/../../../etc/cron.d/x", b"owned", {})])),
        "archive with an absolute member": ("abs.tar.gz", _tar_gz([meta, ("/tmp/calibrate-escape", b"owned", {})])),
        "archive with a symlink out": ("ln.tar.gz", _tar_gz([meta, ("exp/cubic_datalink_run1.log", b"",
                                                                     {"type": tarfile.SYMTYPE,
                                                                      "linkname": "/etc/passwd"})])),
        "archive with a device file": ("dev.tar.gz", _tar_gz([meta, ("exp/dev", b"", {
            "type": tarfile.CHRTYPE, "devmajor": 1, "devminor": 3})])),
        "zip with a symlink out": ("ln.zip", _zip("exp/link", b"../../../etc/passwd", 0o120777)),
        "zip with a device file": ("dev.zip", _zip("exp/dev", b"", 0o020600)),
        "archive 1000 directories deep": ("deep.tar.gz", _tar_gz([("a/" * 1000 + "pantheon_perf.json", b"{}", {})])),
        "archive with a newline in a member name": ("nl.tar.gz", _tar_gz([("exp\nx/pantheon_perf.json", b"{}", {})])),
        # gzip bombs: one member declaring twice the limit (refused by its header), and members
        # of 4 MiB adding up to twice the limit (the server writes up to the limit, then refuses)
        "gzip bomb, one member": ("bomb.tar.gz", _tar_gz([("exp/cubic_datalink_run1.log",
                                                           b"\0" * (2 * HOSTILE_EXTRACT_LIMIT), {})])),
        "gzip bomb, many members": ("bombs.tar.gz", _tar_gz([(f"exp/cubic_datalink_run{i}.log", zeros, {})
                                                             for i in range(2 * HOSTILE_EXTRACT_LIMIT // len(zeros))])),
        "archive refused after its extraction": ("junk.tar.gz", _tar_gz([("exp/cubic_datalink_run1.log",
                                                                           b"not a datalink line\n" * 100_000,
                                                                           {})])),
    }
    for name, (_, data) in uploads.items():
        assert len(data) < 100_000, (name, len(data))
    return uploads


@dataclass(frozen=True)
class Probe:
    """One hostile request: `request()` gives httpx's keyword arguments afresh (a chunked body is
    a generator, sent once)."""

    name: str
    method: str
    path: str
    expected: int
    request: Callable[[], dict[str, Any]]


async def _chunks(size: int, chunk: int = 16384) -> AsyncIterator[bytes]:
    """A body of `size` bytes sent chunked (no Content-Length): the server must count it."""
    for start in range(0, size, chunk):
        yield b" " * min(chunk, size - start)


def hostile_probes(token: str, other: str, running: str, done: str,
                   uploads: dict[str, tuple[str, bytes]]) -> list[Probe]:
    """The hostile requests, about the calibration `running` (the loaded run's: cancelling it or
    reading it as another user must fail) and the finished one `done`; `other` is a second token
    of the server (another user)."""
    auth = {"Authorization": f"Bearer {token}"}
    as_other = {"Authorization": f"Bearer {other}"}
    post = ("POST", "/v1/calibrations")
    big_file = b"x" * (HOSTILE_UPLOAD_LIMIT + 1)
    big_json = b"[" + b"0," * HOSTILE_UPLOAD_LIMIT + b"0]"  # 2 MB, past the limit and the form's overhead
    running_url, done_url = f"/v1/calibrations/{running}", f"/v1/calibrations/{done}"

    def fixed(**kwargs: Any) -> Callable[[], dict[str, Any]]:
        return lambda: kwargs

    rows: list[tuple[str, tuple[str, str], int, Callable[[], dict[str, Any]]]] = [
        ("malformed JSON", post, 400, fixed(content=b'{"target": "nepal",', headers=auth)),
        ("not an object", post, 422, fixed(json=[1, 2], headers=auth)),
        ("unknown field (a path)", post, 422, fixed(json={"target": "nepal", "out": "/etc"}, headers=auth)),
        ("a server path as target", post, 422, fixed(json={"target": "/etc/passwd"}, headers=auth)),
        ("budget as a string", post, 422, fixed(json={"target": "nepal", "options": {"budget": "10"}},
                                                headers=auth)),
        ("budget true", post, 422, fixed(json={"target": "nepal", "options": {"budget": True}}, headers=auth)),
        ("runtime past Pantheon's 60 s", post, 422, fixed(json={"target": "nepal", "options": {"runtime": 61}},
                                                          headers=auth)),
        ("oversized upload", post, 413, fixed(files={"archive": ("big.csv", big_file)}, headers=auth)),
        ("oversized body", post, 413, fixed(content=big_json, headers=auth)),
        ("oversized chunked body", post, 413,
         lambda: {"content": _chunks(2 * HOSTILE_UPLOAD_LIMIT),
                  "headers": {**auth, "Content-Type": "application/json"}}),
        *[(what, post, 422, fixed(files={"archive": upload}, headers=auth)) for what, upload in uploads.items()],
        ("missing token", post, 401, fixed(json={"target": "nepal"})),
        ("not a bearer token", post, 401, fixed(json={"target": "nepal"}, headers={"Authorization": "Basic eDp5"})),
        ("wrong token", post, 403, fixed(json={"target": "nepal"}, headers={"Authorization": "Bearer cal_nope"})),
        ("wrong token, cancel the running job", ("DELETE", running_url), 403,
         fixed(headers={"Authorization": "Bearer cal_nope"})),
        ("job list without a token", ("GET", "/v1/calibrations"), 401, fixed()),
        ("another token: read the running job", ("GET", running_url), 404, fixed(headers=as_other)),
        ("another token: cancel the running job", ("DELETE", running_url), 404, fixed(headers=as_other)),
        ("another token: its log", ("GET", f"{running_url}/log"), 404, fixed(headers=as_other)),
        ("another token: its events", ("GET", f"{running_url}/events"), 404, fixed(headers=as_other)),
        ("another token: a done job's export", ("GET", f"{done_url}/export"), 404, fixed(headers=as_other)),
        ("another token: its catalogue entry", ("GET", f"/v1/emulators/{done}/mahimahi.txt"), 404,
         fixed(headers=as_other)),
        ("another token's calibration as a study's", ("POST", "/v1/studies"), 422,
         fixed(json={"study": "loo", "calibration": done}, headers=as_other)),
        ("path traversal in files/", ("GET", f"{done_url}/files/..%2F..%2F..%2Fetc%2Fpasswd"), 400,
         fixed(headers=auth)),
        ("cancel a finished job", ("DELETE", done_url), 409, fixed(headers=auth)),
        ("SQL-shaped id", ("GET", f"/v1/calibrations/{_SQL_ID}"), 404, fixed(headers=auth)),
        ("SQL-shaped id, cancel", ("DELETE", f"/v1/calibrations/{_SQL_DROP}"), 404, fixed(headers=auth)),
        ("SQL-shaped state filter", ("GET", f"/v1/calibrations?state={_SQL_ID}"), 422, fixed(headers=auth)),
        ("a Last-Event-ID of 5000 digits", ("GET", f"{running_url}/events"), 400,
         fixed(headers={**auth, "Last-Event-ID": "9" * 5000})),
        ("score reading a trace file", ("POST", "/v1/scores"), 422,
         fixed(json={"target": "nepal", "emulator": "mm-link /etc/passwd /etc/passwd"}, headers=auth)),
    ]
    return [Probe(name, method, path, expected, request) for name, (method, path), expected, request in rows]


async def _hostile_client(http: httpx.AsyncClient, url: str, probes: list[Probe], first: int, stop: asyncio.Event,
                          t0: float, out: list[tuple[str, float, float, int, str]]) -> None:
    """Sends the probes in turn, from the `first`, back to back until `stop`."""
    number = first
    while not stop.is_set():
        probe = probes[number % len(probes)]
        number += 1
        started = time.perf_counter()
        error = ""
        try:
            status = (await http.request(probe.method, url + probe.path, **probe.request())).status_code
        except httpx.HTTPError as failure:
            status, error = 0, type(failure).__name__
        out.append((probe.name, started - t0, time.perf_counter() - started, status, error))


def listing(root: Path) -> dict[str, set[str]]:
    """What lies under the server's uploads/ and cache/ (every path), and its jobs."""
    out = {name: {str(p.relative_to(root / name)) for p in (root / name).rglob("*")}
           for name in ("uploads", "cache")}
    out["jobs"] = {p.name for p in (root / "jobs").iterdir()}
    return out


#: what every journal record has (`Evaluation.to_json`, format 2; "study" only in a study's)
RECORD_KEYS = {"index", "link", "candidate", "x", "params", "emulator", "seed", "loss_seeds", "f", "noise", "floor",
               "errors_pct", "schemes", "penalized", "runs", "started_at", "finished_at", "seconds", "elapsed_s",
               "phase", "confident", "version"}


def check_journal(run_dir: Path, summary: dict[str, Any]) -> tuple[dict[str, int], list[str]]:
    """The job's evaluations journal (RUN_DIR/evaluations.jsonl) read line by line and through
    `RunDir`: (evaluations per link kind, what is wrong).  Complete: every line whole JSON with
    every field of a record, f a finite number, its runs and finish time there; indices 0..n-1,
    each candidate once, every proposed candidate journaled; per link kind, as many as the
    budget unless the run says it stopped otherwise, and as many as the server reports."""
    problems: list[str] = []
    path = run_dir / JOURNAL
    if not path.is_file():
        return {}, [f"no {JOURNAL}"]
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        problems.append("its last line is cut short")
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            problems.append(f"line {number} is not JSON")
            continue
        missing = RECORD_KEYS - set(record) if isinstance(record, dict) else RECORD_KEYS
        if missing:
            problems.append(f"line {number} lacks {', '.join(sorted(missing))}")
        elif not (isinstance(record["f"], (int, float)) and math.isfinite(record["f"])) or not record["runs"] \
                or not record["finished_at"]:
            problems.append(f"line {number} has no finite f, no runs or no finish time")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a Notice: a torn line
            run = RunDir.open(run_dir)
            records = run.evaluations()
            unfinished = run.unfinished(records)
    except Exception as error:  # what RunDir says is wrong, whatever it is
        return {}, [*problems, f"RunDir: {error}"]
    counts = dict(Counter(r.link for r in records))
    if sorted(r.index for r in records) != list(range(len(records))):
        problems.append("its indices are not 0..n-1")
    if len({r.candidate for r in records}) != len(records):
        problems.append("a candidate is journaled twice")
    if unfinished:
        problems.append(f"{len(unfinished)} proposed candidates never journaled")
    options = summary.get("options") or {}
    for link in options.get("links") or []:
        progress = (summary.get("progress") or {}).get(link) or {}
        expected = int(options["budget"]) if progress.get("stopped") in (None, "budget") else progress.get("done")
        if counts.get(link, 0) != expected:
            problems.append(f"{link}: {counts.get(link, 0)} evaluations, expected {expected} "
                            f"(stopped: {progress.get('stopped')})")
    if summary.get("evaluations") != len(records):
        problems.append(f"the server reports {summary.get('evaluations')} evaluations, the journal holds "
                        f"{len(records)}")
    return counts, problems


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
    hostile: list[tuple[str, float, float, int, str]] = field(default_factory=list)  # probe, t, latency, status, error
    expected: dict[str, int] = field(default_factory=dict)  # probe -> the status it should get
    journal: dict[str, int] = field(default_factory=dict)  # evaluations journaled per link kind
    journal_problems: list[str] = field(default_factory=list)
    journal_changed: bool = False  # the journal's bytes changed after the job ended
    left: list[str] = field(default_factory=list)  # what appeared under uploads/, cache/, jobs/ and should not have


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


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


async def _watch(server: Server, job: str, clients: int, run: Run, probes: list[Probe] | None = None,
                 hostile: int = 0, poll_s: float = 1.0) -> dict[str, Any]:
    """Wait for the job to end; with `clients` > 0, load the server meanwhile, and with `hostile`
    > 0 send it `probes` from that many clients too."""
    stop = asyncio.Event()
    t0 = time.perf_counter()
    urls = {"calibration": f"{server.url}/v1/calibrations/{job}", "catalogue": f"{server.url}/v1/emulators"}
    limits = httpx.Limits(max_connections=2 * clients + 1, max_keepalive_connections=2 * clients + 1)
    auth = {"Authorization": f"Bearer {server.token}"}  # reads need the token too (jobs are their token's)
    # the hostile clients' own connections, no token of their own (each probe sends what it sends)
    bad_limits = httpx.Limits(max_connections=hostile + 1, max_keepalive_connections=hostile + 1)
    async with httpx.AsyncClient(limits=limits, timeout=60, headers=auth) as http, \
            httpx.AsyncClient(limits=bad_limits, timeout=60) as bad:
        tasks = [asyncio.create_task(_client(http, name, urls[name], stop, t0, run.requests))
                 for name in ENDPOINTS for _ in range(clients)]
        tasks += [asyncio.create_task(_hostile_client(bad, server.url, probes or [], i * len(probes or []) // hostile,
                                                      stop, t0, run.hostile))
                  for i in range(hostile)]
        async with httpx.AsyncClient(timeout=60, headers=auth) as watcher:
            while True:
                summary = (await watcher.get(urls["calibration"])).json()
                if summary["state"] in TERMINAL:
                    break
                await asyncio.sleep(poll_s)
        ended = _digest(server.root / "jobs" / job / "run" / JOURNAL)  # as the job left it
        stop.set()
        await asyncio.gather(*tasks)
    run.journal_changed = _digest(server.root / "jobs" / job / "run" / JOURNAL) != ended
    return summary


def calibrate_once(server: Server, request: dict[str, Any], run: Run, clients: int, force: bool,
                   hostile: int = 0, other: str = "", done: str = "",
                   uploads: dict[str, tuple[str, bytes]] | None = None) -> Run:
    """One calibration, watched to its end; with `clients`/`hostile`, under that load (`other`: a
    second token, `done`: a finished calibration, for the hostile probes).  Then its journal is
    checked, and what appeared under the server's root."""
    before = listing(server.root)
    started = time.monotonic()
    run.job = submit(server, request, force)
    probes = hostile_probes(server.token, other, run.job, done, uploads or {}) if hostile else None
    run.expected = {probe.name: probe.expected for probe in probes or []}
    summary = asyncio.run(_watch(server, run.job, clients, run, probes, hostile))
    run.client_wall_s = time.monotonic() - started
    run.state = summary["state"]
    run.job_wall_s = summary.get("elapsed_s")
    run.evaluations = summary.get("evaluations") or 0
    run.journal, run.journal_problems = check_journal(server.root / "jobs" / run.job / "run", summary)
    after = listing(server.root)
    # what the normal requests and the job may make: the job's own directory; nothing else
    run.left = [f"{name}/{path}" for name in ("uploads", "cache") for path in sorted(after[name] - before[name])]
    run.left += [f"jobs/{job}" for job in sorted(after["jobs"] - before["jobs"] - {run.job})]
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


def hostile_table(runs: list[Run]) -> pd.DataFrame:
    rows = [{"round": r.round, "probe": p, "expected": r.expected[p], "t_s": t, "latency_ms": 1000 * lat,
             "status": s, "error": e} for r in runs if r.label == "loaded" for p, t, lat, s, e in r.hostile]
    return pd.DataFrame(rows, columns=["round", "probe", "expected", "t_s", "latency_ms", "status", "error"])


def hostile_summary(hostile: pd.DataFrame, runs: list[Run]) -> pd.DataFrame:
    """Per probe, in the order sent: sent, answered as expected, answered otherwise (status x
    count), errors and timeouts (kind x count), latency of the answered."""
    order = list(dict.fromkeys(name for r in runs for name in r.expected))
    out = []
    for name in order:
        group = hostile[hostile["probe"] == name]
        if not len(group):
            continue
        expected = int(group["expected"].iloc[0])
        answered = group[group["status"] != 0]
        otherwise = answered[answered["status"] != expected]["status"].value_counts()
        errors = group[group["status"] == 0]["error"].value_counts()
        out.append({"probe": name, "expected": expected, "sent": len(group),
                    "as expected": int((group["status"] == expected).sum()),
                    "otherwise": ", ".join(f"{s}x{n}" for s, n in otherwise.items()) or "-",
                    "errors": ", ".join(f"{e}x{n}" for e, n in errors.items()) or "-",
                    "p50 ms": answered["latency_ms"].quantile(0.50), "p99 ms": answered["latency_ms"].quantile(0.99)})
    return pd.DataFrame(out).set_index("probe")


def wall_table(runs: list[Run]) -> pd.DataFrame:
    rows = [{"round": r.round, "load": r.label, "job": r.job, "state": r.state, "evaluations": r.evaluations,
             "job wall s": r.job_wall_s, "calibration wall s": r.calibration_wall_s,
             "submit to end s": r.client_wall_s,
             "journal": "; ".join(r.journal_problems)
             or "complete " + ",".join(f"{k}:{v}" for k, v in r.journal.items()),
             "left behind": len(r.left)} for r in runs]
    return pd.DataFrame(rows)


def verdict(runs: list[Run], hostile: pd.DataFrame) -> str:
    """One line: the loaded calibrations done with their journals complete and untouched, nothing
    left of refused requests, every hostile request answered with its status (PASS), or what
    was not (FAIL), the calibration's part said either way."""
    loaded = [r for r in runs if r.label == "loaded"]
    harmed = []
    for r in loaded:
        if r.state != "done":
            harmed.append(f"round {r.round}: job {r.state}")
        harmed += [f"round {r.round}: journal: {p}" for p in r.journal_problems]
        if r.journal_changed:
            harmed.append(f"round {r.round}: the journal changed after the job ended")
        if r.left:
            harmed.append(f"round {r.round}: left behind {', '.join(r.left[:5])}" + (" ..." if len(r.left) > 5 else ""))
    wrong = []
    answered = hostile[hostile["status"] != 0]
    otherwise = answered[answered["status"] != answered["expected"]]
    if len(otherwise):
        kinds = otherwise.groupby(["probe", "status"], sort=False).size()
        wrong.append(f"{len(otherwise)} hostile requests answered otherwise than expected ("
                     + ", ".join(f"{probe}: {status}x{n}" for (probe, status), n in kinds.items()) + ")")
    failed = hostile[hostile["status"] == 0]
    if len(failed):
        kinds = failed.groupby(["probe", "error"], sort=False).size()
        wrong.append(f"{len(failed)} hostile requests got no answer ("
                     + ", ".join(f"{probe}: {error}x{n}" for (probe, error), n in kinds.items()) + ")")
    evaluations = ", ".join(str(sum(r.journal.values())) for r in loaded)
    calibration = ("; ".join(harmed) if harmed else
                   f"the calibration{'s' if len(loaded) > 1 else ''} under load done, journal complete "
                   f"({evaluations} evaluations) and unchanged after the end, nothing left in uploads/ or cache/, "
                   f"no job made by a refused request")
    if not harmed and not wrong:
        return f"verdict: PASS: {len(hostile)} hostile requests, each answered with its expected status; {calibration}"
    return "verdict: FAIL: " + "; ".join([*wrong, calibration])


def plot(requests: pd.DataFrame, walls: pd.DataFrame, clients: int, out: Path,
         hostile: pd.DataFrame | None = None, hostile_clients: int = 0) -> Path:
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
    if hostile is not None and len(hostile):
        bad = hostile[(hostile["round"] == hostile["round"].max()) & (hostile["status"] != 0)]
        bad = bad[bad["t_s"] < int(bad["t_s"].max())] if len(bad) else bad
        per_s = bad.groupby(bad["t_s"].astype(int)).size()
        ax.plot(per_s.index, per_s.values, label=f"hostile ({hostile_clients} clients, all probes)")
    ax.set(xlabel="time since submission (s)", ylabel="requests answered per second",
           title=f"{clients} clients per endpoint" + (f" + {hostile_clients} hostile" if hostile_clients else "")
           + ", during the calibration")
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
    parser.add_argument("--hostile", type=int, default=0, metavar="N",
                        help="N more clients sending hostile requests during the loaded run (default: 0, none)")
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
    # with --hostile, limits that keep every hostile body a few MB (module docstring)
    limits = ("--max-upload-bytes", str(HOSTILE_UPLOAD_LIMIT), "--max-extract-bytes", str(HOSTILE_EXTRACT_LIMIT))
    other = Server.make_token(root, "other") if args.hostile else ""  # another user
    uploads = hostile_uploads() if args.hostile else {}
    server = Server.start(root, options=limits if args.hostile else ())
    print(f"server {server.url}, root {root}; {args.target} {request['options']}", flush=True)
    runs: list[Run] = []
    try:
        for number in range(1, args.rounds + 1):
            for label, clients in (("quiet", 0), ("loaded", args.clients)):
                hostile = args.hostile if label == "loaded" else 0
                done = next((r.job for r in reversed(runs) if r.state == "done"), "0123456789abcdef")
                run = calibrate_once(server, request, Run(label, number), clients, force=bool(runs),
                                     hostile=hostile, other=other, done=done, uploads=uploads)
                runs.append(run)
                print(f"round {number}, {label}: job {run.job} {run.state} in {run.client_wall_s:.0f} s"
                      + (f", {len(run.requests)} requests" if clients else "")
                      + (f", {len(run.hostile)} hostile" if hostile else ""), flush=True)
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
    for r in runs:
        if r.left:
            print(f"round {r.round}, {r.label}: appeared under the root: {', '.join(r.left)}")
    hostile = hostile_table(runs)
    if args.hostile:
        print(f"\nHostile requests during the loaded calibration ({args.hostile} clients, each probe in turn, "
              f"back to back; upload limit {HOSTILE_UPLOAD_LIMIT} B, extraction limit {HOSTILE_EXTRACT_LIMIT} B)")
        if len(hostile):
            seconds = sum(g["t_s"].max() for _, g in hostile.groupby("round"))
            print(hostile_summary(hostile, runs).to_string(float_format=lambda v: f"{v:.1f}"))
            print(f"{len(hostile)} hostile requests, {len(hostile) / seconds if seconds else np.nan:.1f}/s")
        print(verdict(runs, hostile))
    args.out.mkdir(parents=True, exist_ok=True)
    requests.to_csv(args.out / "service_load-requests.csv", index=False)
    walls.to_csv(args.out / "service_load-wall.csv", index=False)
    if args.hostile:
        hostile.to_csv(args.out / "service_load-hostile.csv", index=False)
    if len(requests) or len(hostile):
        figure = plot(requests, walls, args.clients, args.out, hostile, args.hostile)
        print(f"CSV and figure in {args.out}: {figure.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
