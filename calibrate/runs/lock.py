"""One writer per run directory: an exclusive lock on RUN_DIR/writer.lock.

Whatever writes a run — `calibrate run` and `resume`, a study, a service worker — holds the lock
for as long as it writes (`RunDir.writing`; the CLI from before it creates or repairs anything
until it exits, `RunDir.claim`).  It is a `flock(2)` lock: the kernel releases it when its holder
dies, however it dies (Ctrl-C, kill -9, a crash), so a dead writer never blocks `resume`, and no
stale lock is ever cleaned up by hand.  While held, the file names its holder (pid, host, since
when, its command line), which is how a refusal says who writes and what to do.  Readers
(`calibrate export`, inspection) take no lock: the journal is append-only and a reader ignores
a last line not yet ended (`calibrate.runs.journal`).

A thread may hold the lock of a directory several times over (nested `hold`s share it; the
last one out releases it): the CLI claims a directory before the loop it runs takes it again.
Locks are per open file description, so a second open of the file in the same process would
conflict with the first; `_HELD` is the process's own record of the locks its threads hold, as
the kernel keeps the others (another thread of the process is refused like another process).

Acquiring never waits for a writer: a second writer is refused at once, with its holder named.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import os
import shlex
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calibrate.errors import InputError, RunBusy

LOCK_FILE = "writer.lock"

#: how long an acquisition retries a lock held for an instant (a reader's probe, `holder`)
RETRY_S = 0.5


@dataclass(frozen=True)
class Holder:
    """Who holds a run directory's lock, as the lock file says."""

    pid: int | None = None
    host: str | None = None
    since: str | None = None  # ISO time, UTC
    command: str | None = None

    @classmethod
    def of_this_process(cls) -> Holder:
        program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
        if program in ("calibrate", "__main__.py"):  # the CLI, or python -m calibrate
            program = "calibrate"
        command = shlex.join([program, *sys.argv[1:]]) if program else None
        return cls(os.getpid(), socket.gethostname(), dt.datetime.now(dt.UTC).isoformat(), command)

    @classmethod
    def from_text(cls, text: str) -> Holder:
        try:
            data: Any = json.loads(text)
        except ValueError:
            return cls()
        if not isinstance(data, dict):
            return cls()
        pid = data.get("pid")
        return cls(pid if isinstance(pid, int) else None, _text(data.get("host")),
                   _text(data.get("since")), _text(data.get("command")))

    def to_text(self) -> str:
        return json.dumps({"pid": self.pid, "host": self.host, "since": self.since,
                           "command": self.command}) + "\n"

    def describe(self) -> str:
        """e.g. "pid 1234 on node-1 since 2026-11-23 21:05:11 UTC (`calibrate run …`)"."""
        if self.pid is None:
            return "another process (it has not said which yet)"
        where = f"pid {self.pid}" + (f" on {self.host}" if self.host else "")
        if self.since:
            try:
                when = dt.datetime.fromisoformat(self.since).astimezone(dt.UTC)
                where += f" since {when:%Y-%m-%d %H:%M:%S} UTC"
            except ValueError:
                where += f" since {self.since}"
        return where + (f" (`{self.command}`)" if self.command else "")

    def stop_hint(self) -> str:
        """How to stop the holder, as a command to run where it runs."""
        if self.pid is None:
            return "stop the process that writes it"
        here = self.host in (None, socket.gethostname())
        return f"stop it (`kill {self.pid}`" + ("" if here else f" on {self.host}") + ")"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclass
class _Held:
    fd: int
    count: int


#: the locks this process's threads hold: (real path of the directory, thread) -> its descriptor
#: (module docstring)
_HELD: dict[tuple[str, int], _Held] = {}


def _key(directory: Path) -> tuple[str, int]:
    return os.path.realpath(directory), threading.get_ident()


def open_locked(path: Path, mode: int = 0o644) -> int | None:
    """A descriptor of `path` (created with `mode` if need be) holding its exclusive `flock`, or
    None when another holds it after `RETRY_S`.  The lock must be on the file the path names now
    (a lock file removed and made again while we waited is not ours)."""
    deadline = time.monotonic() + RETRY_S
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
            continue
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def _read_holder(path: Path) -> Holder:
    try:
        return Holder.from_text(path.read_text())
    except OSError:
        return Holder()


@contextmanager
def hold(directory: Path | str, *, make: bool = False) -> Iterator[None]:
    """Hold RUN_DIR's writer lock for the block; refused at once (`RunBusy`, naming the holder)
    when another process holds it.  `make`: create the directory if needed; a directory this
    call made and that holds nothing but the lock when the block ends (its run was refused
    before anything was written) is removed again."""
    directory = Path(directory)
    key = _key(directory)
    held = _HELD.get(key)
    if held is not None:
        held.count += 1
        try:
            yield
        finally:
            held.count -= 1
        return
    made = False
    if make and not directory.exists():
        try:
            directory.mkdir(parents=True)
            made = True
        except FileExistsError:
            pass
        except OSError as error:
            raise InputError(f"cannot create run directory {directory} ({error.strerror or error}); "
                             f"choose another --out") from None
    if not directory.is_dir():
        raise InputError(f"{directory} is not a run directory (no such directory)")
    path = directory / LOCK_FILE
    try:
        fd = open_locked(path)
    except OSError as error:
        raise InputError(f"cannot lock {path} ({error.strerror or error}); a run directory must "
                         f"be writable to be written") from None
    if fd is None:
        busy = _read_holder(path)
        raise RunBusy(f"{directory} is being written by {busy.describe()}; a run has one writer "
                      f"at a time: wait for it to finish, or {busy.stop_hint()} and then "
                      f"`calibrate resume {directory}`", busy)
    os.ftruncate(fd, 0)
    os.pwrite(fd, Holder.of_this_process().to_text().encode(), 0)
    _HELD[key] = _Held(fd, 1)
    try:
        yield
    finally:
        del _HELD[key]
        try:
            if made and [p.name for p in directory.iterdir()] == [LOCK_FILE]:
                path.unlink()  # before the unlock: a waiter then finds the file gone (open_locked)
                directory.rmdir()
            else:
                os.ftruncate(fd, 0)  # nobody holds it: the file names no one
        except OSError:
            pass
        os.close(fd)  # releases the lock


def holder(directory: Path | str) -> Holder | None:
    """Who holds RUN_DIR's lock now (this process included), or None when no one does.  A
    probe: it holds a shared lock for an instant, which a writer acquiring at that moment
    rides over (`RETRY_S`)."""
    directory = Path(directory)
    if _key(directory) in _HELD:  # this thread: the caller holds it
        return Holder.of_this_process()
    path = directory / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        return _read_holder(path)
    finally:
        os.close(fd)
    return None
