"""Running jobs: each one a child process of the server, at most `max_running` at once.

A job is the command line's own command, run as a child process — `python -m calibrate run
ROOT/jobs/ID/input/target.json [flags] --out ROOT/jobs/ID/run --quiet` (a score: `calibrate
score ... --json-out ROOT/jobs/ID/score.json`; a study: `calibrate loo|ablate ... --out
ROOT/jobs/ID/run`) — with its stdout and stderr in
ROOT/jobs/ID/log.txt.  Everything the command line promises holds for it: its run directory,
journal and writer lock; SIGTERM ends it with status 143, its Ray and engines stopped, every
finished evaluation kept.

Each child starts a session of its own (`setsid`: its own process group, which its Ray daemons
join; the Ray workers and engines make groups of their own), carries the job's directory in its
environment (`JOB_VARIABLE`, inherited by every process it starts, so the job's processes are
known wherever they are), and asks the kernel for SIGTERM when the server dies
(`PR_SET_PDEATHSIG`, set with ctypes between fork and exec; it fires when the thread that forked
it ends, so only the scheduler's thread starts children).  So a server killed even with `kill -9`
takes its jobs down cleanly, and leaves their journals as a crash of `calibrate run` would.

Jobs the store says are running when a server starts were running when the previous one
stopped: each is continued with `calibrate resume RUN_DIR` (calibrations and studies alike; a
score, whose run keeps nothing, is run again) once its previous process is gone and the kernel
has released its run directory's writer lock (`calibrate.runs.lock`), so the two never write
at once.  Queued jobs start, oldest first, as slots free.

Cancel (`Scheduler.cancel`): SIGTERM to the job's process group; after `cancel_grace_s` SIGKILL;
then every process left of the job (an engine of a Ray worker that outlived it) is ended the
same way, and the job is `cancelled` — with its journal as the command left it, readable.
A server that stops (SIGTERM, Ctrl-C) ends its children the same way but leaves their jobs
`running`, so the next server continues them.  One server schedules a root's jobs: it holds
ROOT/scheduler.lock (a `flock`, released by the kernel however the server ends).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from calibrate.errors import EnvironmentProblem
from calibrate.processes import alive
from calibrate.runs import lock
from calibrate.runs.journal import RUN_FILE
from calibrate.service.intake import (
    INPUT_DIR,
    LOG_FILE,
    TARGET_FILE,
    made_file,
    run_flags,
    score_flags,
    study_flags,
)
from calibrate.service.settings import ServiceSettings
from calibrate.service.store import (
    CALIBRATION,
    CANCELLED,
    DONE,
    FAILED,
    QUEUED,
    RUN_KINDS,
    RUNNING,
    STUDY,
    Job,
    Store,
    now,
)

PR_SET_PDEATHSIG = 1
#: the file in the root whose lock the one server scheduling its jobs holds
SCHEDULER_LOCK = "scheduler.lock"
#: how often the scheduler looks at its children and the queue (it is also woken on submit)
TICK_S = 0.5
#: how long the processes left of a job have after SIGTERM before SIGKILL
LEFTOVER_GRACE_S = 10.0
#: the variable naming a job, by its directory, in the environment of its process and of every
#: process that one starts (Ray's, the engines): how the job's processes are told from others
JOB_VARIABLE = "CALIBRATE_SERVICE_JOB"


def _libc_prctl() -> Callable[..., int]:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


def _die_with(parent: int, prctl: Callable[..., int]) -> Callable[[], None]:
    """The child's last step before exec: SIGTERM when the forking thread dies; and at once if
    the server died before the request was made.  Resolved beforehand, so the forked child
    runs no import."""

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def job_members(job_dir: Path) -> list[int]:
    """The pids of the processes of the job in `job_dir`: those whose environment names it
    (`JOB_VARIABLE`: its process, Ray's daemons and workers, the engines and their endpoints),
    zombies not counted."""
    marker = f"{JOB_VARIABLE}={job_dir}".encode()
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if marker not in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                continue
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            members.append(int(entry))
    return members


def end_job(job_dir: Path, grace_s: float) -> list[int]:
    """SIGTERM to every process left of the job in `job_dir`, SIGKILL to those alive after
    `grace_s`; returns the pids that needed SIGKILL."""
    for pid in job_members(job_dir):
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while job_members(job_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    killed = job_members(job_dir)
    for pid in killed:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    while job_members(job_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    return killed


def _signal(pid: int, signum: int, *, group: bool = False) -> None:
    try:
        (os.killpg if group else os.kill)(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def job_process_alive(pid: int, job_dir: Path) -> bool:
    """Whether `pid` is still the process of the job in `job_dir` (not a later one that got its
    pid)."""
    if not alive(pid):
        return False
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{JOB_VARIABLE}={job_dir}".encode() in environ


def failure_message(log: Path, code: int) -> str:
    """Why a job failed: the command's own error line, else its last line, else its status."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 65536))
            lines = [line.strip() for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    errors = [line for line in lines if line.startswith("calibrate: error:")]
    status = f"exit status {code}" if code >= 0 else f"killed by {signal.Signals(-code).name}"
    if errors:
        return f"{errors[-1].removeprefix('calibrate: error: ')} ({status})"
    if lines:
        return f"{lines[-1][:500]} ({status}; the job's log has the rest)"
    return f"the job's process ended with {status} and printed nothing"


@dataclass
class _Child:
    job_id: str
    process: subprocess.Popen


@dataclass
class Scheduler:
    """Starts, watches, continues and cancels jobs (module docstring)."""

    settings: ServiceSettings
    store: Store
    _children: dict[str, _Child] = field(default_factory=dict)
    _orphans: set[str] = field(default_factory=set)  # running when the server started
    _lingering: dict[str, float] = field(default_factory=dict)  # orphan -> since when its processes end
    _cancelling: set[str] = field(default_factory=set)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _wake: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _prctl: Callable[..., int] = field(default_factory=_libc_prctl)
    _root_lock: int | None = None

    # -- life

    def claim(self) -> None:
        """Hold the root's scheduler lock (a `flock`, released by the kernel when the server
        dies): two servers scheduling one root's jobs would run them twice; then the store's
        (`Store.claim`): two servers of one store, from two roots, would take each other's
        jobs.  Each refusal names the server that holds the lock."""
        holder = f"pid {os.getpid()}, root {self.settings.root}" + (
            f", {self.settings.url}" if self.settings.url else "")
        path = self.settings.root / SCHEDULER_LOCK
        fd = lock.open_locked(path, 0o600)
        if fd is None:
            try:
                other = path.read_text(errors="replace").strip()[:1000] or "another process"
            except OSError:
                other = "another process"
            raise EnvironmentProblem(f"another calibrate serve ({other}) runs the jobs of {self.settings.root}; "
                                     f"stop it, or give this one another --root") from None
        try:
            self.store.claim(holder)
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{holder}\n".encode(), 0)
        self._root_lock = fd

    def start(self) -> None:
        """Adopt the jobs a previous server left running, then run the queue in a thread."""
        self._orphans = {job.id for job in self.store.jobs(states=[RUNNING])}
        self._thread = threading.Thread(target=self._loop, name="calibrate-scheduler", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        """End the children (SIGTERM to their groups, then whatever is left of their jobs),
        leaving their jobs `running` for the next server to continue."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            children = list(self._children.values())
            self._children.clear()
        for child in children:
            _signal(child.process.pid, signal.SIGTERM, group=True)
        for child in children:
            try:
                child.process.wait(self.settings.cancel_grace_s)
            except subprocess.TimeoutExpired:
                _signal(child.process.pid, signal.SIGKILL, group=True)
                child.process.wait()
            end_job(self.settings.jobs_dir / child.job_id, LEFTOVER_GRACE_S)
        if self._root_lock is not None:
            self.store.release()
            os.close(self._root_lock)
            self._root_lock = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except Exception as error:  # a store that went away for a moment: try again
                print(f"calibrate: scheduler: {type(error).__name__}: {error}", flush=True)
            self._wake.wait(TICK_S)
            self._wake.clear()

    def _tick(self) -> None:
        with self._lock:
            self._reap()
            self._continue_orphans()
            self._start_queued()

    @property
    def running(self) -> int:
        return len(self._children) + len(self._orphans)

    # -- children

    def _reap(self) -> None:
        for job_id, child in list(self._children.items()):
            code = child.process.poll()
            if code is None or job_id in self._cancelling:
                continue
            del self._children[job_id]
            job = self.store.job(job_id)
            if job is not None:
                self._ended(job, code)

    def _ended(self, job: Job, code: int) -> None:
        """Record how the process of a running job ended: done when it wrote what it makes."""
        directory = self.settings.jobs_dir / job.id
        made = made_file(job)
        if code == 0 and made.exists():
            self.store.transition(job.id, [RUNNING], DONE, finished=now(), exit_code=0, pid=None)
            return
        message = (failure_message(directory / LOG_FILE, code) if code != 0 else
                   f"the job ended without writing {made.relative_to(self.settings.root)}")
        self.store.transition(job.id, [RUNNING], FAILED, finished=now(), exit_code=code, message=message,
                              pid=None)

    def _continue_orphans(self) -> None:
        """Continue each job a previous server left running, once its process has gone."""
        for job_id in sorted(self._orphans):
            job = self.store.job(job_id)
            if job is None or job.state != RUNNING:
                self._orphans.discard(job_id)
                continue
            left = job_members(self.settings.jobs_dir / job_id)
            if left:  # the previous process still ends (its SIGTERM: PR_SET_PDEATHSIG)
                waited = time.monotonic() - self._lingering.setdefault(job_id, time.monotonic())
                if waited > self.settings.cancel_grace_s:
                    for pid in left:
                        _signal(pid, signal.SIGKILL)
                elif job.pid not in left:  # it has ended; these are what it left
                    for pid in left:
                        _signal(pid, signal.SIGTERM)
                continue
            self._lingering.pop(job_id, None)
            run_dir = Path(job.run_dir)
            if run_dir.is_dir() and lock.holder(run_dir) is not None:
                continue  # the kernel has not released the writer lock yet
            self._orphans.discard(job_id)
            resume = job.kind in RUN_KINDS and (run_dir / RUN_FILE).exists()
            self._spawn(job, resume=resume)

    def _start_queued(self) -> None:
        limit = self.settings.running_limit
        if self.running >= limit:
            return
        for job in self.store.jobs(states=[QUEUED]):
            if self.running >= limit:
                break
            if self.store.transition(job.id, [QUEUED], RUNNING, started=now()):
                self._spawn(job, resume=False)

    def command(self, job: Job, *, resume: bool) -> list[str]:
        """The job's command line (module docstring)."""
        directory = self.settings.jobs_dir / job.id
        ray = ([f"--address={self.settings.address}"] if self.settings.address else
               [f"--slots={self.settings.job_slots}"])
        base = [self.settings.python, "-m", "calibrate"]
        if resume:
            return [*base, "resume", job.run_dir, "--quiet", *ray]
        fetching = [f"--cache-dir={self.settings.cache_dir}", "--offline"]
        target = str(directory / INPUT_DIR / TARGET_FILE)
        if job.kind == CALIBRATION:
            return [*base, "run", target, *run_flags(job.options), f"--out={job.run_dir}", "--quiet",
                    *fetching, *ray]
        if job.kind == STUDY:
            command, *flags = study_flags(job.options)
            return [*base, command, target, *flags, f"--out={job.run_dir}", "--quiet", *fetching, *ray]
        return [*base, "score", target, *score_flags(job.options),
                f"--json-out={made_file(job)}", "--quiet", *fetching, *ray]

    def _spawn(self, job: Job, *, resume: bool) -> None:
        directory = self.settings.jobs_dir / job.id
        run_dir = Path(job.run_dir)
        if not resume and run_dir.is_dir():
            # a start that died before its run.json: nothing of it to keep
            for leftover in run_dir.iterdir():
                if leftover.is_file():
                    leftover.unlink()
        argv = self.command(job, resume=resume)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", JOB_VARIABLE: str(directory)}
        try:
            with open(directory / LOG_FILE, "ab") as log:
                log.write(f"== {now()} {'resume' if resume else 'start'}: {' '.join(argv)}\n".encode())
                log.flush()
                process = subprocess.Popen(argv, cwd=directory, env=env, stdin=subprocess.DEVNULL,
                                           stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                           preexec_fn=_die_with(os.getpid(), self._prctl))
        except OSError as error:
            self.store.transition(job.id, [RUNNING], FAILED, finished=now(),
                                  message=f"the server could not start the job: {error.strerror or error}")
            return
        self._children[job.id] = _Child(job.id, process)
        self.store.update(job.id, pid=process.pid, starts=job.starts + 1)

    # -- cancel

    def cancel(self, job_id: str) -> Job | None:
        """Cancel a queued or running job (module docstring); returns it as it ends up, None
        when there is no such job.  A finished job is left as it is."""
        with self._lock:
            job = self.store.job(job_id)
            if job is None:
                return None
            if self.store.transition(job_id, [QUEUED], CANCELLED, finished=now(),
                                     message="cancelled before it started"):
                return self.store.job(job_id)
            if job.state != RUNNING:
                return job
            self._cancelling.add(job_id)
            self._orphans.discard(job_id)
            child = self._children.get(job_id)
        try:
            pid = child.process.pid if child is not None else job.pid
            if pid is not None:
                self._end(job_id, pid, child.process if child is not None else None)
            with self._lock:
                self._children.pop(job_id, None)
                code = child.process.returncode if child is not None else None
                if code == 0:  # it had ended by itself, before the signal
                    self._ended(job, code)
                else:
                    self.store.transition(job_id, [RUNNING], CANCELLED, finished=now(), pid=None,
                                          exit_code=code, message="cancelled; finished evaluations are "
                                          "kept in its journal")
        finally:
            with self._lock:
                self._cancelling.discard(job_id)
        return self.store.job(job_id)

    def _end(self, job_id: str, pid: int, process: subprocess.Popen | None) -> None:
        """End the job whose process is `pid` (the leader of its session and group): SIGTERM to
        its group, SIGKILL after the grace period, then whatever is left of the job."""
        job_dir = self.settings.jobs_dir / job_id
        if process is not None:
            _signal(pid, signal.SIGTERM, group=True)
            try:
                process.wait(self.settings.cancel_grace_s)
            except subprocess.TimeoutExpired:
                _signal(pid, signal.SIGKILL, group=True)
                process.wait()
        elif job_process_alive(pid, job_dir):  # a previous server's child, not ours to wait for
            _signal(pid, signal.SIGTERM, group=True)
            deadline = time.monotonic() + self.settings.cancel_grace_s
            while job_process_alive(pid, job_dir) and time.monotonic() < deadline:
                time.sleep(0.2)
            if job_process_alive(pid, job_dir):
                _signal(pid, signal.SIGKILL, group=True)
        end_job(job_dir, LEFTOVER_GRACE_S)
