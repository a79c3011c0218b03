"""Scratch directories: every temporary directory calibrate makes, and how none is left behind.

A scratch directory is named after the process that owns it,
``$TMPDIR/calibrate-p<PID>-<purpose>-<random>``, and removed by that process when its work ends,
in a `finally` (`directory`): on success, on an error, on Ctrl-C or SIGTERM.  A process killed
outright (kill -9, a Ray worker killed with its task, a machine's OOM killer) cannot remove its
own; `sweep` removes the scratch directories of owners that are no longer alive, and every
command and every evaluation task sweeps when it starts.  Directories of live processes, and
anything not named this way, are never touched.

Made here: a scheme run's data and work directories (`calibrate.evaluation.run_task`,
`calibrate.scripted.run_scheme`; the engine's own temporary files go inside the work directory:
`TMPDIR` points there, except for the Mahimahi backend's, which its unprivileged shells must
reach), and `calibrate selftest`'s logs
(`keep` gives a directory a name the sweep leaves alone, when its files are the result).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from calibrate.processes import alive

PREFIX = "calibrate-"
_OWNED = re.compile(r"^calibrate-p(?P<pid>\d+)-")


def make(purpose: str, parent: Path | str | None = None) -> Path:
    """A new scratch directory of this process (mode 0700, as `tempfile.mkdtemp` makes it)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", purpose) or "scratch"
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}p{os.getpid()}-{safe}-", dir=parent))


@contextmanager
def directory(purpose: str, parent: Path | str | None = None) -> Iterator[Path]:
    """A scratch directory for the block, removed when the block ends, however it ends."""
    path = make(purpose, parent)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def keep(path: Path) -> Path:
    """Rename a scratch directory out of the sweep's reach (its files are a result the user
    was told about); returns the new path."""
    kept = path.with_name(_OWNED.sub(PREFIX, path.name, count=1))
    path.rename(kept)
    return kept


def sweep(parent: Path | str | None = None) -> list[Path]:
    """Remove the scratch directories in `parent` (default: the temporary directory) whose
    owner is no longer alive; return them."""
    root = Path(parent or tempfile.gettempdir())
    removed = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    for entry in entries:
        match = _OWNED.match(entry.name)
        if not match or int(match["pid"]) == os.getpid() or alive(int(match["pid"])):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed
