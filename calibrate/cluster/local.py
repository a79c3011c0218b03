"""A Ray cluster of several nodes on this machine, or this machine's node(s) added to a cluster.

`calibrate cluster local up` starts one `ray start --block` process per node, each in a session
(process group) of its own, so that a node is exactly its process group: `down` stops those
groups and nothing else (never `ray stop`, which stops every Ray on the machine).  Each node
advertises ``emulator_slot`` = `SLOTS_PER_CORE` × its CPUs unless ``--slots`` says otherwise,
and the CPUs it is given (the machine's cores shared out among its nodes unless ``--cpus``
says otherwise) are what the tasks' CPU shares are counted against
(`calibrate.evaluation.cpu_share`).  Several nodes on one machine are what a cluster of machines
is to Ray — separate raylets, object stores and workers, tasks spread over them, a node that dies
losing only its own tasks — which is why the tests use it; for emulation capacity, one node per
machine with all its cores is the same.

Token authentication is set explicitly on every node (`calibrate.cluster.auth`): with ``token``
(the default) ``RAY_AUTH_MODE=token`` and the user's ``~/.ray/auth_token`` (made if missing);
with ``disabled``, none.  Drivers on this machine (`calibrate run --address ADDRESS`) find the
same token; on another machine, copy the file.

The state of a local cluster (its address, its nodes' process ids and logs) is
``cluster.json`` in its state directory (``~/.cache/calibrate/ray-local/<name>``), Ray's own
files are under ``/tmp/calibrate-ray-<name>`` (short: Ray's socket paths must fit in 107 bytes).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from calibrate.cluster import auth
from calibrate.errors import EnvironmentProblem, InputError
from calibrate.evaluation import OBJECT_STORE_BYTES, SLOT, SLOTS_PER_CORE
from calibrate.processes import alive

STATE_FILE = "cluster.json"
#: the `ray start` output that says a node is up (head and joining nodes alike)
STARTED = "Ray runtime started"
AUTH_MODES = ("token", "disabled")
#: seconds a node's `ray start` gets to drain and stop on SIGTERM before its group is killed
STOP_GRACE_S = 20.0
#: how long `stop` waits for SIGKILLed processes to be gone
KILL_WAIT_S = 10.0


def default_state_dir(name: str) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "calibrate" / "ray-local" / name


def ray_executable() -> str:
    """The `ray` command of the Python running calibrate (its venv), else the one on PATH."""
    beside = Path(sys.executable).with_name("ray")
    return str(beside) if beside.exists() else "ray"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class NodeSpec:
    """One node to start: its share of the machine and what it advertises."""

    name: str
    cpus: int
    slots: int
    head: bool


def plan(nodes: int, *, cores: int, cpus: int | None = None, slots: int | None = None,
         join: bool = False, prefix: str = "calibrate") -> list[NodeSpec]:
    """The nodes `up` starts: the first is the head unless joining a cluster; each gets the
    machine's cores shared out (at least one) unless `cpus` is given, and `SLOTS_PER_CORE`
    slots per CPU unless `slots` is given."""
    if nodes < 1:
        raise InputError(f"--nodes must be at least 1, got {nodes}")
    if cpus is not None and cpus < 1:
        raise InputError(f"--cpus must be at least 1, got {cpus}")
    if slots is not None and slots < 0:
        raise InputError(f"--slots must be 0 or more, got {slots}")
    share = cpus or max(1, cores // nodes)
    each = SLOTS_PER_CORE * share if slots is None else slots
    return [NodeSpec(f"{prefix}-{i}", share, each, head=(i == 0 and not join)) for i in range(nodes)]


@dataclass(frozen=True)
class Node:
    """A started node: its `ray start --block` process (the leader of its process group)."""

    name: str
    pid: int
    cpus: int
    slots: int
    head: bool
    log: str
    started: float

    def alive(self) -> bool:
        return alive(self.pid)

    def processes(self) -> list[tuple[int, str]]:
        """(pid, executable) of the node's processes: its process group."""
        return _group(self.pid)

    def raylet_pid(self) -> int | None:
        """The node's raylet (killing it is losing the node)."""
        return next((pid for pid, exe in self.processes() if exe == "raylet"), None)


@dataclass(frozen=True)
class LocalCluster:
    name: str
    address: str  # the GCS, host:port
    dashboard: str | None  # http://host:port, head only
    auth: str
    temp_dir: str
    nodes: tuple[Node, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "nodes": [asdict(n) for n in self.nodes]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LocalCluster:
        return cls(data["name"], data["address"], data.get("dashboard"), data["auth"], data["temp_dir"],
                   tuple(Node(**n) for n in data["nodes"]))

    def environment(self) -> dict[str, str]:
        """What a shell needs to use this cluster with Ray's own tools."""
        env = {"RAY_ADDRESS": self.address}
        if self.auth == "token":
            env[auth.MODE] = "token"
        return env


def _group(pgid: int) -> list[tuple[int, str]]:
    """(pid, executable name) of the processes in process group `pgid`."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:
                continue
            exe = os.path.basename(os.readlink(entry / "exe"))
        except (OSError, ValueError, IndexError):
            continue
        out.append((int(entry.name), exe))
    return out


def load(state_dir: Path) -> LocalCluster | None:
    path = state_dir / STATE_FILE
    try:
        return LocalCluster.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{path}: not a local cluster's state ({e}); remove it if no such cluster "
                         f"runs") from None


def _save(state_dir: Path, cluster: LocalCluster) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    partial = state_dir / f".{STATE_FILE}.{os.getpid()}"
    partial.write_text(json.dumps(cluster.to_json(), indent=2) + "\n")
    os.replace(partial, state_dir / STATE_FILE)


def node_environment(mode: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment every node of a new local cluster starts with: the auth mode set
    explicitly (never left to whether a token file happens to exist: `calibrate.cluster.auth`)."""
    env = dict(os.environ if environ is None else environ)
    if mode not in AUTH_MODES:
        raise InputError(f"--auth must be one of {', '.join(AUTH_MODES)}, got {mode!r}")
    env[auth.MODE] = mode
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    return env


def start_command(spec: NodeSpec, *, temp_dir: str, address: str | None, port: int | None,
                  dashboard_port: int | None, object_store_bytes: int = OBJECT_STORE_BYTES) -> list[str]:
    """The `ray start --block` of one node (`address`: the head to join; None: be the head)."""
    command = [ray_executable(), "start", "--block", "--disable-usage-stats",
               f"--node-name={spec.name}", f"--num-cpus={spec.cpus}",
               f"--resources={json.dumps({SLOT: spec.slots})}",
               f"--object-store-memory={object_store_bytes}",
               # several nodes on one machine: each agent on a port of its own
               f"--dashboard-agent-listen-port={free_port()}"]
    if address is None:
        command += ["--head", f"--port={port or 6379}", f"--temp-dir={temp_dir}",
                    f"--ray-client-server-port={free_port()}"]
        if dashboard_port:
            command += ["--include-dashboard=true", "--dashboard-host=127.0.0.1",
                        f"--dashboard-port={dashboard_port}"]
        else:
            command += ["--include-dashboard=false"]
    else:
        command += [f"--address={address}"]
    return command


def _wait_started(pid: int, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if STARTED in text:
            return
        if not alive(pid):
            raise EnvironmentProblem(f"a Ray node failed to start; its log {log} ends:\n{_tail(text)}")
        time.sleep(0.25)
    raise EnvironmentProblem(f"a Ray node did not start within {timeout:.0f} s; its log {log} "
                             f"ends:\n{_tail(log.read_text(errors='replace') if log.exists() else '')}")


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _address_of(temp_dir: str, log: Path) -> str:
    """The head's GCS address as Ray wrote it (`<temp dir>/ray_current_cluster`)."""
    path = Path(temp_dir) / "ray_current_cluster"
    try:
        return path.read_text().strip().splitlines()[0]
    except (OSError, IndexError):
        raise EnvironmentProblem(f"the head started but wrote no address to {path}; see {log}") from None


def up(name: str, specs: list[NodeSpec], *, state_dir: Path, join: str | None = None,
       port: int | None = None, dashboard: bool = True, mode: str = "token",
       timeout: float = 120.0, progress: Callable[[str], None] | None = None) -> LocalCluster:
    """Start the nodes of `specs` (the first as head unless `join` names a cluster's address)."""
    note = progress or (lambda _: None)
    if not specs or (join is None) != specs[0].head or any(s.head for s in specs[1:]):
        raise InputError("a local cluster is a head and nodes joining it, or nodes joining --join ADDRESS")
    existing = load(state_dir)
    if existing is not None and any(n.alive() for n in existing.nodes):
        raise InputError(f"the local cluster {name!r} is already up at {existing.address} "
                         f"(`calibrate cluster local status`); stop it with `calibrate cluster local "
                         f"down` first, or give another --name")
    if join is not None:
        environ = dict(os.environ)
        environ.update(auth.joining_environment(environ))
        environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        mode = "token" if environ.get(auth.MODE) == "token" else "disabled"
    else:
        environ = node_environment(mode)
        if mode == "token" and not (environ.get(auth.TOKEN) or environ.get(auth.TOKEN_PATH)):
            path, created = auth.ensure_token()
            if created:
                note(f"made a Ray authentication token: {path}")
    temp_dir = f"/tmp/calibrate-ray-{name}"
    logs = state_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    address = join
    dashboard_url = None
    nodes: list[Node] = []
    try:
        for spec in specs:
            dashboard_port = free_port() if spec.head and dashboard else None
            command = start_command(spec, temp_dir=temp_dir, address=None if spec.head else address,
                                    port=port, dashboard_port=dashboard_port)
            log = logs / f"{spec.name}.log"
            with open(log, "w") as out:
                process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=environ,
                                           stdin=subprocess.DEVNULL, start_new_session=True)
            nodes.append(Node(spec.name, process.pid, spec.cpus, spec.slots, spec.head, str(log), time.time()))
            note(f"starting {spec.name}: {spec.cpus} CPUs, {spec.slots} emulator slots"
                 + (" (head)" if spec.head else ""))
            # One at a time: nodes starting together on one machine race for the same socket
            # and log names in the session directory (raylet.1 twice) and abort.
            _wait_started(process.pid, log, timeout)
            if spec.head:
                address = _address_of(temp_dir, log)
                dashboard_url = f"http://127.0.0.1:{dashboard_port}" if dashboard_port else None
                note(f"{spec.name} up at {address}")
            else:
                note(f"{spec.name} joined {address}")
            _save(state_dir, LocalCluster(name, address or "", dashboard_url, mode, temp_dir, tuple(nodes)))
    except BaseException:
        stop(nodes)
        with contextlib.suppress(OSError):
            (state_dir / STATE_FILE).unlink()
        raise
    assert address is not None
    cluster = LocalCluster(name, address, dashboard_url, mode, temp_dir, tuple(nodes))
    _save(state_dir, cluster)
    return cluster


def stop(nodes: list[Node] | tuple[Node, ...], *, grace: float = STOP_GRACE_S, force: bool = False) -> list[str]:
    """Stop nodes, joining ones first, the head last: SIGTERM to each node's `ray start`
    (it drains the node and stops its processes), then SIGKILL to whatever is left of its
    process group after `grace` seconds (at once with `force`).  Returns what was done."""
    done = []
    for node in sorted(nodes, key=lambda n: n.head):
        if not _group(node.pid) and not node.alive():
            done.append(f"{node.name}: already stopped")
            continue
        if not force:
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and (node.alive() or _group(node.pid)):
                time.sleep(0.2)
        left = _group(node.pid)
        if left:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGKILL)
            # SIGKILL is delivered asynchronously: return once the processes are gone
            deadline = time.monotonic() + KILL_WAIT_S
            while _group(node.pid) and time.monotonic() < deadline:
                _reap(node.pid)
                time.sleep(0.05)
        _reap(node.pid)
        stuck = _group(node.pid)
        done.append(f"{node.name}: stopped" + (f" ({len(left)} processes killed)" if left else "")
                    + (f"; {len(stuck)} still exiting after {KILL_WAIT_S:g} s: "
                       f"{', '.join(str(pid) for pid, _ in stuck)}" if stuck else ""))
    return done


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def down(state_dir: Path, *, force: bool = False) -> list[str]:
    cluster = load(state_dir)
    if cluster is None:
        raise InputError(f"no local cluster recorded in {state_dir} (`calibrate cluster local up` "
                         f"starts one)")
    done = stop(cluster.nodes, force=force)
    (state_dir / STATE_FILE).unlink()
    return done


def ray_view(cluster: LocalCluster, timeout: float = 10.0) -> list[dict[str, Any]] | None:
    """Ray's own record of the cluster's nodes (the state API, through the head's dashboard):
    per node its name, id, state and emulator slots; None when the dashboard does not answer."""
    if not cluster.dashboard:
        return None
    try:
        with auth.token_mode() if cluster.auth == "token" else contextlib.nullcontext():
            from ray.util.state import list_nodes

            nodes = list_nodes(address=cluster.dashboard, timeout=int(timeout), raise_on_missing_output=False)
    except Exception:  # the state API raises many kinds; all mean "no answer" here
        return None
    return [{"name": n.node_name, "node_id": n.node_id, "state": n.state,
             "slots": (n.resources_total or {}).get(SLOT, 0.0),
             "cpus": (n.resources_total or {}).get("CPU", 0.0), "head": bool(n.is_head_node)}
            for n in nodes]


__all__ = ["AUTH_MODES", "LocalCluster", "Node", "NodeSpec", "default_state_dir", "down", "load", "plan",
           "ray_view", "start_command", "stop", "up"]
