"""This process as a Ray driver: an embedded Ray started, or a cluster joined; `RunTask`s
submitted to it and their `RunMetrics` streamed back (`Evaluator`).

The tasks, what they measure and the resources they declare are values without Ray
(`calibrate.evaluation`); this module is the one that imports Ray (lazily, when an `Evaluator`
is entered), so reading a run directory never does.

Starting or joining keeps this process's own SIGTERM handling (Ray's driver would replace it),
sets Ray's token authentication explicitly for an embedded cluster and for joining one
(`calibrate.cluster.auth`), and checks that the cluster advertises emulator slots.  Each task is
submitted with its resources (`RunTask.cpus`, one `SLOT`), spread over the nodes, retried by Ray
only when its worker dies (`MAX_RETRIES`); a cancelled task gets `CANCEL_GRACE_S` to stop its
engine and remove its scratch directory before its worker is killed.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from calibrate.cluster import auth
from calibrate.errors import CalibrateError, EnvironmentProblem, Interrupted
from calibrate.evaluation import MAX_RETRIES, SLOT, SLOTS_PER_CORE, RaySettings, RunMetrics, RunTask, run_task

#: seconds cancelled tasks get to stop their engines and remove their scratch directories
#: (`Evaluator.cancel`) before their workers are killed
CANCEL_GRACE_S = 15.0

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


__all__ = ["Evaluator"]
