"""Evaluation on Ray: one task per (candidate, scheme, replicate), results streamed back.

The unit of remote work is `run_task`, a plain function of values: it runs one scheme once over
one candidate emulator (`calibrate.scripted.run_scheme`, its own engine instance, its own
network namespaces, its own temporary work directory) and returns plain metrics.  Ray schedules,
retries and collects; nothing here queues or talks to workers by hand.

Resources each task declares (why: a node must run only as many emulations as it can without
distorting them, because an emulation that misses its deadlines measures the host, not the path):

- ``emulator_slot: 1`` — a custom resource each node advertises: how many engines it can run
  side by side (`ray start --resources='{"emulator_slot": N}'`; the embedded Ray, the nodes of
  `calibrate cluster local` and the KubeRay workers of `calibrate cluster up` get
  `SLOTS_PER_CORE` per core of their own unless told otherwise).  This bounds concurrency even
  when the CPU shares below are small.  Tasks are spread over the nodes (Ray's SPREAD
  strategy): an emulation measures its host too, so it goes where the fewest others run.
- ``num_cpus = cpu_share(rate)`` — grows with the emulated rate, because the engine's per-packet
  work and the endpoints' sending both scale with packets per second:
  ``min(1, 0.1 + rate_mbps / 100)``: a tenth of a core for the task's worker, idle engine and
  endpoints, plus a whole core per 100 Mbit/s (≈ 8,300 packets/s each way), capped at one core
  since the engine's real-time loop is one thread and a task must fit on any node.

  Measured here (2 cores): the engine takes 5–8 % of a core at 12–96 Mbit/s with all its logs,
  and 64 engines at 12 Mbit/s at once matched one alone within 0.2 %
  (experiments/bench_emulator.py); the six Nepal schemes (cubic, QUIC, Vegas, Copa, LEDBAT,
  saturator) at 10 Mbit/s, 28 ms, 188 packets, 8 runs at once vs 2 at once: throughput, p95 delay
  and loss equal within run-to-run scatter (cubic 9.85/9.85 Mbit/s, 252.0/252.5 ms), 3× faster.
  Most of a Pantheon-style run is waiting (3 s of setup, then rate-limited sending), so a
  core holds several.  At 10 Mbit/s a task takes 0.2 CPU: a 2-core node runs its 8 slots; at
  ≥ 90 Mbit/s one task per core.

Retries: a worker that dies (the node is lost, the process crashes) is retried by Ray
(`max_retries`).  An *invalid* run (an endpoint quit early, too little data, the engine failed)
is re-run once inside the task with a fresh loss seed, because the next run of a scheme usually
succeeds; if that one is invalid too, the task returns the failure with both reasons, and the
objective penalizes it.  Errors of input or host (InputError, EnvironmentProblem) are not
retried: every other run would fail the same way, so they stop the calibration.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from calibrate import scratch
from calibrate.cluster import auth
from calibrate.emulator import EmulatorConfig
from calibrate.engine import Backend
from calibrate.errors import CalibrateError, EnvironmentProblem, Interrupted
from calibrate.metrics import TOTAL
from calibrate.objective import Failure, Stats
from calibrate.schemes import Scheme
from calibrate.scripted import run_scheme
from calibrate.targets.model import Workload

#: the custom resource: one per engine a node can run at once
SLOT = "emulator_slot"

#: cpu_share's rule (module docstring)
CPU_BASE = 0.1
MBPS_PER_CPU = 100.0
CPU_CAP = 1.0

#: the embedded Ray's emulator slots per core (module docstring: measured)
SLOTS_PER_CORE = 4

#: Ray's retries of a task whose worker died (not of a task that returned a failure)
MAX_RETRIES = 2

#: the re-run of an invalid replicate uses run id replicate + this, so its loss seed differs
#: (`EmulatorConfig.for_run`: trace seed·1000 + run id) and never collides with another
#: replicate's
RERUN_OFFSET = 500

#: the embedded Ray's object store: results are a few hundred bytes each
OBJECT_STORE_BYTES = 100 * 1024 * 1024

#: seconds cancelled tasks get to stop their engines and remove their scratch directories
#: (`Evaluator.cancel`) before their workers are killed
CANCEL_GRACE_S = 15.0


def cpu_share(rate_mbps: float) -> float:
    """CPUs one task asks for at this emulated rate (rule and reasons: module docstring)."""
    return round(min(CPU_CAP, CPU_BASE + max(rate_mbps, 0.0) / MBPS_PER_CPU), 3)


# ----------------------------------------------------------------------------------------------
# Values that cross the wire


@dataclass(frozen=True)
class RunTask:
    """One (candidate, scheme, replicate): everything the task needs, as values."""

    candidate: int  # the calibration's candidate id
    label: str  # the target's scheme label (names the key in the objective)
    scheme: Scheme
    replicate: int  # 1-based; the run id (its loss seed: `EmulatorConfig.for_run`)
    emulator: EmulatorConfig
    workload: Workload
    backend: Backend = Backend()

    @property
    def cpus(self) -> float:
        # Real Mahimahi ferries packets through half a dozen normal-priority processes per path
        # and is distorted by competition for the CPU: one core per run.
        if self.backend.name == "mahimahi":
            return CPU_CAP
        return cpu_share(self.emulator.rate_mbps or 0.0)


@dataclass(frozen=True)
class RunMetrics:
    """What one task measured: per flow key ("all", "1", ...) (throughput Mbit/s, p95 delay ms,
    loss fraction), or the reason it produced nothing usable."""

    candidate: int
    label: str
    replicate: int
    flows: Mapping[str, tuple[float, float, float]] | None  # None when the run failed
    reason: str | None  # why the replicate does not count (None: valid)
    attempts: int  # runs made (1, or 2 after an invalid first run)
    loss_seeds: tuple[int, ...]  # one per attempt
    seconds: float  # wall time of the task
    host: str = ""

    @property
    def valid(self) -> bool:
        return self.reason is None and self.flows is not None

    def replicate_of(self, flow: str = TOTAL) -> Stats | Failure:
        """The objective's view of one flow of this replicate."""
        if not self.valid:
            return Failure(self.reason or "no statistics")
        assert self.flows is not None
        if flow not in self.flows:
            return Failure(f"flow {flow} sent nothing in this run")
        return Stats(*self.flows[flow])

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "replicate": self.replicate,
                "flows": None if self.flows is None else {k: list(v) for k, v in self.flows.items()},
                "reason": self.reason, "attempts": self.attempts, "loss_seeds": list(self.loss_seeds),
                "seconds": round(self.seconds, 3), "host": self.host}

    @classmethod
    def from_json(cls, candidate: int, data: Mapping[str, Any]) -> RunMetrics:
        flows = data.get("flows")
        return cls(candidate, str(data["label"]), int(data["replicate"]),
                   # the journal holds (tput, delay, loss) triples; their length is not re-checked here
                   None if flows is None else {k: tuple(float(x) for x in v)  # type: ignore[misc]
                                               for k, v in flows.items()},
                   data.get("reason"), int(data.get("attempts", 1)),
                   tuple(int(s) for s in data.get("loss_seeds", ())), float(data.get("seconds", 0.0)),
                   str(data.get("host", "")))


def _flows(outcome: Any) -> dict[str, tuple[float, float, float]] | None:
    """Plain numbers per flow key; a flow with no delay or loss measured is left out (it cannot
    be scored, and the objective then reports it as missing)."""
    if outcome.stats is None:
        return None
    out = {}
    for key, m in outcome.stats.metrics().items():
        if m.delay_ms is None or m.loss is None:
            continue
        out[key] = (float(m.tput_mbps), float(m.delay_ms), float(m.loss))
    return out


# ----------------------------------------------------------------------------------------------
# The remote function (plain; Ray's decoration happens in `Evaluator`)


def run_task(task: RunTask, workdir: str | None = None) -> RunMetrics:
    """Run one replicate in its own scratch directory (`calibrate.scratch`: removed when the
    run ends, also when the task is cancelled); re-run once if invalid."""
    scratch.sweep(workdir)  # what killed workers on this node left behind
    started = time.monotonic()
    reasons: list[str] = []
    seeds: list[int] = []
    host = os.uname().nodename
    for attempt, run_id in enumerate((task.replicate, task.replicate + RERUN_OFFSET), start=1):
        with scratch.directory(f"c{task.candidate}-{task.label}", workdir) as data_dir:
            outcome = run_scheme(task.emulator, task.scheme, run_id, task.workload, data_dir,
                                 cc=task.label, backend=task.backend)
        seeds.append(outcome.loss_seed)
        if outcome.valid:
            return RunMetrics(task.candidate, task.label, task.replicate, _flows(outcome), None,
                              attempt, tuple(seeds), time.monotonic() - started, host)
        reasons.append(f"run {attempt}: {outcome.validity.reason or outcome.failure or 'invalid'}")
    return RunMetrics(task.candidate, task.label, task.replicate, None, "; ".join(reasons),
                      len(seeds), tuple(seeds), time.monotonic() - started, host)


# ----------------------------------------------------------------------------------------------
# Ray: start or join, submit, stream back


#: Ray's switch for its C++ failure-signal handler, read once, when ray is imported
NO_FAILURE_HANDLER = "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"


def _ray() -> Any:
    # Ray's driver installs a C++ handler that turns SIGTERM into a stack dump and exit status 1;
    # this process handles SIGTERM itself (the CLI: one line, status 143, every cleanup run).
    # The driver (this process) goes without it; the workers Ray starts keep it.
    switch = "ray" not in sys.modules and NO_FAILURE_HANDLER not in os.environ
    if switch:
        os.environ[NO_FAILURE_HANDLER] = "1"
    try:
        import ray
    except ImportError as e:
        raise EnvironmentProblem("calibration runs on Ray, which is not installed; install it "
                                 "with `pip install 'ray[default]'`") from e
    finally:
        if switch:
            del os.environ[NO_FAILURE_HANDLER]
    return ray


def _init(ray: Any, **options: Any) -> None:
    """`ray.init`, with this process's SIGTERM handler kept: ray.init replaces it with one that
    exits (status 15) without the caller's cleanup; a SIGTERM during the start is ours too."""
    main = threading.current_thread() is threading.main_thread()
    ours = signal.getsignal(signal.SIGTERM) if main else None
    try:
        ray.init(**options)
    except SystemExit as stop:
        if stop.code == signal.SIGTERM:
            raise Interrupted(signal.SIGTERM) from None
        raise
    finally:
        if main and ours is not None:
            signal.signal(signal.SIGTERM, ours)


def _token_auth_for_embedded(ray: Any) -> dict[str, str]:
    """Set RAY_AUTH_MODE=token for an embedded cluster unless the user chose a mode (the reason:
    `Evaluator.__enter__`); returns what was set, for `Evaluator.close` to unset."""
    if os.environ.get(auth.MODE) is not None:
        return {}
    os.environ[auth.MODE] = "token"
    _refresh_auth_mode(ray)
    return {auth.MODE: "token"}


def _refresh_auth_mode(ray: Any) -> None:
    """Make an imported Ray see RAY_AUTH_MODE as the environment has it now: Ray caches it when
    it is imported, and refreshes the cache this way itself when it switches the mode."""
    try:
        ray._raylet.Config.initialize("")
    except AttributeError:  # a Ray without token authentication reads no mode
        pass


@dataclass(frozen=True)
class RaySettings:
    """How to get a Ray: join `address` (or $RAY_ADDRESS), else start an embedded one."""

    address: str | None = None
    num_cpus: int | None = None  # embedded only; default: this host's cores
    slots: int | None = None  # embedded only; default: SLOTS_PER_CORE engines per core
    object_store_bytes: int = OBJECT_STORE_BYTES

    def resolved_address(self) -> str | None:
        return self.address or os.environ.get("RAY_ADDRESS") or None


@dataclass
class Evaluator:
    """A connection to Ray that runs `RunTask`s and streams their `RunMetrics` back.

    Use as a context manager: an embedded Ray is shut down on exit (also on errors), a joined
    cluster is only disconnected from.
    """

    settings: RaySettings = field(default_factory=RaySettings)
    workdir: str | None = None  # where tasks make their temporary data dirs (default: $TMPDIR)
    _remote: Any = None
    _started: bool = False
    _environ: dict[str, str] = field(default_factory=dict)  # variables set to join, unset on close

    def __enter__(self) -> Evaluator:
        ray = _ray()
        address = self.settings.resolved_address()
        if ray.is_initialized():
            pass  # a caller (a test, a notebook) already connected; use that Ray as it is
        elif address:
            # Ray joins by address without a token unless told to (calibrate.cluster.auth)
            self._environ = auth.enable_for_joining()
            try:
                _init(ray, address=address, include_dashboard=False, log_to_driver=False)
            except Exception as e:  # Ray raises ConnectionError, ValueError, RuntimeError, ...
                self.close()
                raise EnvironmentProblem(
                    f"cannot join the Ray cluster at {address} ({e}); check the address and that "
                    f"`ray status` works there; {auth.refusal_hint(address)}") from e
        else:
            cores = os.cpu_count() or 1
            num_cpus = self.settings.num_cpus or cores
            slots = self.settings.slots or SLOTS_PER_CORE * num_cpus
            # Ray's token authentication, chosen rather than defaulted (Ray 2.60): a ray.init()
            # that starts a cluster turns RAY_AUTH_MODE=token on by itself when the variable is
            # unset, and says so on stderr every time ("Token authentication is enabled for this
            # Ray cluster ..."); set explicitly, Ray respects it without a word.  We set it to
            # token, the mode Ray would pick: ray.init then uses ~/.ray/auth_token (or
            # RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH), writing a new random one when none exists,
            # and the GCS, raylet and workers it starts inherit the mode from this process, so
            # no process without the token can submit work to this embedded cluster.  A mode the
            # user set (RAY_AUTH_MODE=disabled, say) is kept.  Unset again on close.
            self._environ = _token_auth_for_embedded(ray)
            _init(ray, num_cpus=num_cpus, object_store_memory=self.settings.object_store_bytes,
                  include_dashboard=False, resources={SLOT: slots}, log_to_driver=False,
                  configure_logging=False)
            self._started = True
        if ray.cluster_resources().get(SLOT, 0) < 1:
            self.close()
            raise EnvironmentProblem(
                f"the Ray cluster advertises no {SLOT!r} resource, so no emulation can be "
                f"scheduled; start its nodes with `ray start --resources='{{\"{SLOT}\": N}}'` "
                f"(N = engines a node can run, e.g. its core count)")
        self._remote = ray.remote(run_task)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        ray = _ray()
        if ray.is_initialized() and (self._started or self.settings.resolved_address()):
            ray.shutdown()
        self._started = False
        for name in self._environ:
            os.environ.pop(name, None)
        if self._environ:
            _refresh_auth_mode(ray)
        self._environ = {}

    @property
    def slots(self) -> int:
        """Engines the cluster can run at once (the loop keeps about this many tasks busy): its
        nodes' slots now, or, on a joined cluster, `RaySettings.slots` when given — the most an
        autoscaling cluster grows to, whose autoscaler adds nodes only for tasks that wait."""
        if self.settings.slots and not self._started:
            return self.settings.slots
        return max(1, int(_ray().cluster_resources().get(SLOT, 1)))

    def submit(self, task: RunTask) -> Any:
        """Start one task; returns its ObjectRef."""
        return self._remote.options(num_cpus=task.cpus, resources={SLOT: 1},
                                    max_retries=MAX_RETRIES, retry_exceptions=False,
                                    scheduling_strategy="SPREAD",
                                    name=f"calibrate-c{task.candidate}-{task.label}-r{task.replicate}",
                                    ).remote(task, self.workdir)

    def wait(self, refs: Sequence[Any], timeout: float | None) -> list[tuple[Any, RunMetrics | None]]:
        """The tasks among `refs` that finished within `timeout`: (ref, metrics); metrics is
        None for a task Ray gave up on (its retries exhausted), as a Failure is built by
        `lost`.  Input or host errors raised in a task are raised here as themselves."""
        ray = _ray()
        if not refs:
            return []
        done, _ = ray.wait(list(refs), num_returns=1, timeout=timeout)
        if done:  # take everything else that is ready too, without waiting
            done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        out: list[tuple[Any, RunMetrics | None]] = []
        for ref in done:
            try:
                out.append((ref, ray.get(ref)))
            except ray.exceptions.RayTaskError as e:
                cause = getattr(e, "cause", None)
                if isinstance(cause, CalibrateError):
                    raise cause from None
                raise
            except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                    ray.exceptions.ObjectLostError, ray.exceptions.TaskCancelledError):
                out.append((ref, None))
        return out

    def cancel(self, refs: Iterable[Any], grace_s: float = CANCEL_GRACE_S) -> None:
        """Stop tasks.  Each running one gets a KeyboardInterrupt: it stops its engine (which
        takes its namespaces and endpoints along) and removes its scratch directory; a task
        still running after `grace_s` is killed with its worker (its engine then stops at its
        deadline, and the next task on that node sweeps its directory: `calibrate.scratch`)."""
        ray = _ray()
        refs = list(refs)
        for ref in refs:
            ray.cancel(ref, force=False)
        left = refs
        if refs and grace_s > 0:
            try:
                _, left = ray.wait(refs, num_returns=len(refs), timeout=grace_s)
            except Exception:  # a Ray that is going away: kill what is left
                left = refs
        for ref in left:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # finished meanwhile, or Ray is gone
                pass


def lost(task: RunTask) -> RunMetrics:
    """The failure recorded for a task Ray could not complete after its retries."""
    return RunMetrics(task.candidate, task.label, task.replicate, None,
                      f"the Ray worker running it died {MAX_RETRIES + 1} times", 0, (), math.nan)


__all__ = ["SLOT", "Evaluator", "RaySettings", "RunMetrics", "RunTask", "cpu_share", "lost",
           "run_task"]
