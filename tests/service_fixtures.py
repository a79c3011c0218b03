"""A real calibration server for tests: `calibrate serve` as a subprocess on a free loopback port,
with an API token made by `calibrate serve token create`, and the small calibration the service
tests share (two schemes of the bundled Nepal target, 2 evaluations of 3-second runs).

    from service_fixtures import running_server, service, SMALL, wait_for

    def test_page(service):              # a module's server: (base URL, token)
        url, token = service

    with running_server(tmp_path) as server:   # one of your own: server.url, server.token,
        ...                                    # server.kill9(), server.restart(), server.stop()
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

CALIBRATE = [sys.executable, "-m", "calibrate"]
#: the small calibration the tests share: about 15 s on a 2-core machine
SMALL = {"schemes": "vegas,saturator", "links": "constant", "budget": 2, "replicates": 1, "runtime": 3}
FINISHED = ("done", "failed", "cancelled")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_token(root: Path, name: str = "tests", store: str | None = None) -> str:
    """`calibrate serve token create`: the token it prints (once)."""
    done = subprocess.run([*CALIBRATE, "serve", "token", "create", "--root", str(root), "--name", name,
                           *(["--store", store] if store else [])], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@dataclass
class Server:
    """A `calibrate serve` process (`start_server`)."""

    root: Path
    token: str
    port: int
    args: tuple[str, ...] = ()
    process: subprocess.Popen | None = None
    log: Path = field(init=False)
    #: served over HTTPS (--tls-cert): the certificate its clients trust
    cert: Path | None = None

    def __post_init__(self) -> None:
        self.log = self.root / "server.log"

    @property
    def url(self) -> str:
        return f"{'https' if self.cert else 'http'}://127.0.0.1:{self.port}"

    @property
    def verify(self) -> Any:
        return ssl.create_default_context(cafile=str(self.cert)) if self.cert else True

    def start(self, timeout: float = 60) -> Server:
        self.root.mkdir(parents=True, exist_ok=True)  # for the log: the server makes the rest
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [*CALIBRATE, "serve", "--root", str(self.root), "--port", str(self.port), *self.args],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"calibrate serve exited {self.process.returncode}:\n{self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/v1/status", timeout=2, verify=self.verify).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise AssertionError(f"calibrate serve did not answer in {timeout:.0f} s:\n{self.log.read_text()}")

    def stop(self, timeout: float = 120) -> int | None:
        """SIGTERM (a graceful stop: its jobs' processes end, the jobs stay running for the
        next server); SIGKILL if it does not end."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"calibrate serve did not stop in {timeout:.0f} s") from None

    def kill9(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def job_dir(self, job_id: str) -> Path:
        return self.root / "jobs" / job_id

    def processes(self, job_id: str) -> list[str]:
        """The processes of this server's job `job_id` still alive (`job_processes`)."""
        return job_processes(self.job_dir(job_id))

    def restart(self) -> Server:
        return self.start()

    # -- the API, as tests use it

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        """A read as this server's token (reads of a job's log need one)."""
        return httpx.get(self.url + path, timeout=60, verify=self.verify, **{"headers": self.headers(), **kwargs})

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.post(self.url + path, headers=self.headers(), timeout=120, verify=self.verify, **kwargs)

    def delete(self, path: str) -> httpx.Response:
        return httpx.delete(self.url + path, headers=self.headers(), timeout=180, verify=self.verify)

    def submit(self, target: str = "nepal", **options: Any) -> dict[str, Any]:
        response = self.post("/v1/calibrations", json={"target": target, "options": {**SMALL, **options}})
        assert response.status_code in (200, 202), response.text
        return response.json()

    def wait(self, job_id: str, timeout: float = 300, kind: str = "calibrations",
             until: Callable[[dict[str, Any]], bool] = lambda job: job["state"] in FINISHED) -> dict[str, Any]:
        return wait_for(lambda: self.get(f"/v1/{kind}/{job_id}").json(), until, timeout,
                        f"{kind} {job_id}", self.log)


def wait_for(poll: Callable[[], Any], until: Callable[[Any], bool], timeout: float, what: str,
             log: Path | None = None) -> Any:
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = poll()
        if until(value):
            return value
        time.sleep(0.5)
    tail = "" if log is None else log.read_text()[-4000:]
    raise AssertionError(f"{what}: not there in {timeout:.0f} s; last seen {json.dumps(value)[:2000]}\n{tail}")


def start_server(root: Path, *args: str, store: str | None = None) -> Server:
    """A new server on `root` (made if needed), with a token; `args` are more `calibrate serve`
    options (`--max-upload-bytes N`, ...)."""
    root.mkdir(parents=True, exist_ok=True)
    token = make_token(root, store=store)
    return Server(root, token, free_port(), (*args, *(("--store", store) if store else ()))).start()


@contextmanager
def running_server(root: Path, *args: str, store: str | None = None) -> Iterator[Server]:
    server = start_server(root, *args, store=store)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """A module's calibration server: (base URL, API token)."""
    if os.geteuid() != 0:
        pytest.skip("the calibration server runs emulators: needs root")
    with running_server(tmp_path_factory.mktemp("service")) as server:
        yield server.url, server.token


# ----------------------------------------------------------------------------------------------
# What a job leaves behind


def job_processes(job_dir: Path) -> list[str]:
    """The processes (pid and command) whose environment names the job in `job_dir` (the server
    sets CALIBRATE_SERVICE_JOB=JOB_DIR for the job's process, and every process it starts inherits
    it).  Read here independently of `calibrate.service.scheduler.job_members`, the code under
    test: a process that one missed would be missed by the check too."""
    marker = f"CALIBRATE_SERVICE_JOB={job_dir}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if marker not in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                continue
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if state != "Z":
            found.append(f"{entry} {command[:160]}")
    return found
