"""Running the Rust engine (`calibrate-link`) for one emulated path.

The engine does the real-time work and cleans up after itself (namespaces, TUN devices and
every endpoint process). This module builds its command line from an `EmulatorConfig`, runs
it, and reads back its JSON summary.  The engine's temporary files (the Mahimahi backend's
working directory excepted) go into its work directory (`TMPDIR`), so they go wherever it goes.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from calibrate import binaries
from calibrate.emulator import EmulatorConfig
from calibrate.errors import InputError, RunFailed

Side = Literal["sender", "receiver"]

#: Exit statuses of calibrate-link: 2 bad input, 3 host cannot run it, 1 failed while running.
BAD_INPUT, HOST_PROBLEM = 2, 3

#: seconds between checks, while the engine runs, for a request to stop it (`run`'s `stop`, or a
#: KeyboardInterrupt a Ray task's cancellation raises between two Python instructions)
POLL_S = 0.25


@dataclass(frozen=True)
class Endpoint:
    """A shell command run in one side's namespace, ``start_s`` after the emulation starts.
    It sees ``$EMU_PEER`` (the other side's address), ``$EMU_ADDR`` and ``$EMU_SIDE``."""

    side: Side
    command: str
    start_s: float = 0.0

    def argument(self) -> str:
        return f"{self.side}@{self.start_s:g}:{self.command}"


@dataclass(frozen=True)
class Logs:
    """Where the engine writes its logs (any may be None)."""

    datalink: Path | None = None
    acklink: Path | None = None
    uplink: Path | None = None
    downlink: Path | None = None

    def arguments(self) -> list[str]:
        args: list[str] = []
        for name, path in (("datalink", self.datalink), ("acklink", self.acklink), ("uplink", self.uplink),
                           ("downlink", self.downlink)):
            if path is not None:
                args += [f"--{name}-log", str(path)]
        return args


#: What carries the packets (`calibrate-link --backend`).
BACKENDS = ("engine", "mahimahi")
#: Whose timing the engine reproduces (`calibrate-link --timing`): Mahimahi's processes, each
#: with its own millisecond clock (default), or an idealised single clock.
TIMINGS = ("mahimahi", "ideal")


@dataclass(frozen=True)
class Backend:
    """What carries an emulation's packets: this project's engine (``engine``), or the user's
    real Mahimahi shells (``mahimahi``: ``mm-delay``/``mm-loss``/``mm-link`` on PATH, setuid
    root, run as the unprivileged ``mahimahi_user``), with the same endpoints, logs and
    metrics either way. ``timing`` is the engine's timing model (``ideal`` keeps every stage
    on one exact millisecond clock, unlike Mahimahi). ``realtime_priority`` is the SCHED_FIFO
    priority of the engine's event loop, and of Mahimahi's shells under that backend (``None``:
    calibrate-link's default, 10; 0: normal scheduling, as Mahimahi run by hand)."""

    name: str = "engine"
    mahimahi_user: str | None = None
    timing: str = "mahimahi"
    realtime_priority: int | None = None

    def __post_init__(self) -> None:
        if self.name not in BACKENDS:
            raise InputError(f"--backend must be one of {', '.join(BACKENDS)}, got {self.name!r}")
        if self.timing not in TIMINGS:
            raise InputError(f"timing must be one of {', '.join(TIMINGS)}, got {self.timing!r}")
        if self.mahimahi_user is not None and self.name != "mahimahi":
            raise InputError("--mahimahi-user goes with --backend mahimahi")
        if self.realtime_priority is not None and not 0 <= self.realtime_priority <= 99:
            raise InputError(f"the real-time priority must be from 0 to 99, got {self.realtime_priority}")
        if self.name == "mahimahi" and not self.mahimahi_user:
            raise InputError("--backend mahimahi needs --mahimahi-user NAME: Mahimahi's shells "
                             "refuse to run as root (create one with `useradd -m mahimahi`)")

    def arguments(self) -> list[str]:
        scheduling = [] if self.realtime_priority is None else ["--realtime-priority", str(self.realtime_priority)]
        if self.name == "mahimahi":
            return ["--backend", "mahimahi", "--mahimahi-user", str(self.mahimahi_user)] + scheduling
        return (["--timing", self.timing] if self.timing != "mahimahi" else []) + scheduling

    def describe(self) -> str:
        if self.name == "mahimahi":
            return f"real Mahimahi (as {self.mahimahi_user})"
        return "calibrate-link" + ("" if self.timing == "mahimahi" else f" ({self.timing} timing)")

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "mahimahi_user": self.mahimahi_user, "timing": self.timing,
                "realtime_priority": self.realtime_priority}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Backend:
        data = data or {}
        priority = data.get("realtime_priority")
        return cls(str(data.get("name", "engine")), data.get("mahimahi_user"), str(data.get("timing", "mahimahi")),
                   None if priority is None else int(priority))


@dataclass(frozen=True)
class EngineResult:
    returncode: int
    summary: dict = field(default_factory=dict)
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def message(self) -> str:
        """The engine's one-line error (its last `calibrate-link: error:` line), or its last line."""
        lines = [line for line in self.stderr.strip().splitlines() if line.strip()]
        for line in reversed(lines):
            if line.startswith("calibrate-link: error: "):
                return line.removeprefix("calibrate-link: error: ")
        return lines[-1] if lines else ""


def lateness(summary: Path) -> dict[str, float]:
    """How late the engine's loop wrote the data packets out against its model's times (the
    summary's `release_lateness`, uplink): p99 and max in ms, and the per cent over 1 ms.
    Nothing for a summary without it (Mahimahi's runs, whose shells write the packets)."""
    late = json.loads(summary.read_text()).get("uplink", {}).get("release_lateness") if summary.exists() else None
    if not late or not late["packets"]:
        return {}
    return {"late p99": late["p99_ms"], "late max": late["max_ms"],
            "late >1ms %": 100 * late["over_1ms_packets"] / late["packets"]}


def connections(summary: Path) -> int | None:
    """How many connections (5-tuples) crossed the engine's link in a run: more than its flows
    when a program connected again (None for a summary without the count: Mahimahi's runs)."""
    count = json.loads(summary.read_text()).get("flows") if summary.exists() else None
    return int(count) if isinstance(count, int) else None


def command(config: EmulatorConfig, endpoints: Sequence[Endpoint], *, workdir: Path, stop_after: float | None,
            logs: Logs = Logs(), grace_s: float = 2.0, backend: Backend = Backend(),
            flow_ports: Sequence[int] = (), flows_end_alone: bool = False) -> list[str]:
    """The engine's full command line; traces and the summary go to ``workdir``.  With
    ``flow_ports``, flow N of the Pantheon-format logs is every connection on the Nth port
    (Pantheon's Nth tunnel); without, connections are numbered in order of appearance.  With
    ``flows_end_alone``, an endpoint that exits on its own ends only itself, as a flow of a
    Pantheon multi-flow run ends alone in its tunnel; without, it ends the emulation."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    args = ([str(binaries.find(binaries.LINK))] + config.engine_args(workdir) + logs.arguments()
            + backend.arguments())
    for endpoint in endpoints:
        args += ["--run", endpoint.argument()]
    for port in flow_ports:
        args += ["--flow-port", str(port)]
    if flows_end_alone:
        args.append("--flows-end-alone")
    if stop_after is not None:
        args += ["--stop-after", f"{stop_after:g}"]
    return args + ["--grace", f"{grace_s:g}", "--summary", str(workdir / "engine-summary.json")]


def run(config: EmulatorConfig, endpoints: Sequence[Endpoint], *, workdir: Path, stop_after: float | None,
        logs: Logs = Logs(), grace_s: float = 2.0, check: bool = True,
        backend: Backend = Backend(), stop: threading.Event | None = None,
        flow_ports: Sequence[int] = (), flows_end_alone: bool = False) -> EngineResult:
    """Run one emulation to its end. With ``check``, a failure raises a typed error that
    carries the engine's one-line message.  Setting ``stop`` (from another thread) stops the
    engine and raises KeyboardInterrupt here, as Ctrl-C does."""
    if not endpoints:
        raise InputError("an emulation needs at least one endpoint command")
    args = command(config, endpoints, workdir=workdir, stop_after=stop_after, logs=logs, grace_s=grace_s,
                   backend=backend, flow_ports=flow_ports, flows_end_alone=flows_end_alone)
    summary_path = Path(workdir) / "engine-summary.json"
    summary_path.unlink(missing_ok=True)
    # The engine's temporary files go into workdir, a scratch directory removed however the run
    # ends.  The Mahimahi backend's shells run as the Mahimahi user, who must reach theirs: they
    # stay in the system's temporary directory (the engine removes them on exit and on SIGTERM).
    env = dict(os.environ) if backend.name == "mahimahi" else {**os.environ, "TMPDIR": str(Path(workdir).resolve())}
    # The endpoints' stdin stays open and silent for the whole run, like the terminal Pantheon's
    # harness ran from: some schemes' programs read it and quit at its end (libutp's ucat).
    silent_stdin, held_open = os.pipe()
    try:
        process = subprocess.Popen(args, stdin=silent_stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=env)
    except BaseException:
        os.close(held_open)
        raise
    finally:
        os.close(silent_stdin)
    try:
        while True:
            try:
                stdout, stderr = process.communicate(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                if stop is not None and stop.is_set():
                    raise KeyboardInterrupt from None
    except BaseException:
        # Ctrl-C, a cancelled task, a stop or an error here: the engine tears everything down
        # on SIGTERM (reading its pipes meanwhile, so it cannot block on a full one)
        process.terminate()
        try:
            process.communicate(timeout=60)
        except BaseException:
            process.kill()
            process.wait()
        raise
    finally:
        os.close(held_open)
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    result = EngineResult(process.returncode, summary, stderr)
    if check and not result.ok:
        message = result.message or f"calibrate-link exited with status {process.returncode}"
        if process.returncode == BAD_INPUT:
            raise InputError(message)
        raise RunFailed(message)
    return result
