"""What `calibrate serve` is told, and the defaults derived from the host.

How many jobs run at once (`max_running`), and the emulator slots each gets: a job is one
`calibrate run` whose embedded Ray advertises the engines it may run side by side
(`calibrate.evaluation`: `SLOTS_PER_CORE` per core).  Several jobs on one host must share the
host's slots, or each would run as many engines as the host holds and every emulation would
measure the crowded host instead of the path.  So the server gives each running job an equal
share, ``--slots host_slots // max_running``, and by default runs as many jobs as leave each
at least `JOB_SLOTS` (two cores' worth: one evaluation of a typical target — six schemes, a
few replicates — in a few waves): ``max(1, host_slots // JOB_SLOTS)``, one job on a 2-core
host, eight on a 64-core one.  On a Ray cluster (`--address`) the cluster's own slot resource
bounds the engines of every job together, so jobs are not given a share, and the default is
one job at a time (`--max-running` says more).
"""

from __future__ import annotations

import os
import stat
import sys
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from calibrate.errors import InputError, Notice
from calibrate.evaluation import SLOTS_PER_CORE
from calibrate.targets.archive import DEFAULT_MAX_BYTES

DEFAULT_ROOT = Path("runs/service")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8321
STORE_FILE = "service.sqlite"
#: the clients' (`calibrate submit|jobs|fetch`) server and token, from the environment
ENV_SERVER = "CALIBRATE_SERVER"
ENV_TOKEN = "CALIBRATE_TOKEN"
DEFAULT_SERVER = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"
#: what a client reads for the server's root (`ServiceSettings.redact`)
ROOT_PLACEHOLDER = "<root>"
#: the emulator slots a job should have at least (module docstring)
JOB_SLOTS = 2 * SLOTS_PER_CORE
#: the largest upload (archive or table) by default: a Pantheon data archive without the raw
#: tunnel logs of a 10-run, 17-scheme result is a few hundred MB
DEFAULT_MAX_UPLOAD_BYTES = 512 * 1024**2
#: how long a cancelled job's processes have to end after SIGTERM before they are killed: a
#: calibration stops its Ray and its engines (each engine stops at once on SIGTERM) in seconds
CANCEL_GRACE_S = 60.0


def make_private(paths: Iterable[Path], what: str) -> list[Path]:
    """Take every access of group and others away from `paths` (the service's state is its
    user's alone: the store holds token hashes and every job, the directories every upload and
    result); say so, as a note, where one was open to them.  The paths tightened."""
    tightened = []
    for path in paths:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            os.chmod(path, mode & 0o700)
            tightened.append(path)
    if tightened:
        warnings.warn(f"made {what} {', '.join(map(str, tightened))} private to this user (others could "
                      f"read {'them' if len(tightened) > 1 else 'it'})", Notice, stacklevel=2)
    return tightened


def host_slots() -> int:
    """The emulator slots of this host's embedded Ray (`calibrate.cluster.evaluator.Evaluator`)."""
    return SLOTS_PER_CORE * (os.cpu_count() or 1)


@dataclass(frozen=True)
class ServiceSettings:
    """The server's settings; everything it writes lies under `root`."""

    root: Path = DEFAULT_ROOT
    store_url: str | None = None  # default: SQLite in the root (`store`)
    address: str | None = None  # a Ray cluster every job joins; None: each its embedded Ray
    max_running: int | None = None  # None: the default of the module docstring
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    #: what an archive may expand to, as the CLI's default (`calibrate.targets.archive`)
    max_extract_bytes: int = DEFAULT_MAX_BYTES
    python: str = sys.executable  # the interpreter the jobs run `-m calibrate` with
    cancel_grace_s: float = CANCEL_GRACE_S
    #: every valid token reads every job's state and results (never its log, upload or cancel)
    public_reads: bool = False
    url: str | None = None  # where it listens (http://HOST:PORT), for the message refusing a second server

    def __post_init__(self) -> None:
        if self.max_running is not None and self.max_running < 1:
            raise InputError(f"--max-running must be at least 1 job, got {self.max_running}")
        if self.max_upload_bytes < 1:
            raise InputError(f"--max-upload-bytes must be at least 1, got {self.max_upload_bytes}")
        if self.max_extract_bytes < 1:
            raise InputError(f"--max-extract-bytes must be at least 1, got {self.max_extract_bytes}")
        object.__setattr__(self, "root", Path(self.root).expanduser().resolve())

    def redact(self, text: str) -> str:
        """`text` as a client may read it: the server's root as ``<root>`` and the interpreter
        the jobs run as ``python`` (where the service is installed, and what its paths are,
        are the operator's business)."""
        return text.replace(str(self.root), ROOT_PLACEHOLDER).replace(self.python, "python")

    @property
    def store(self) -> str:
        """The store's SQLAlchemy URL."""
        return self.store_url or f"sqlite:///{self.root / STORE_FILE}"

    @property
    def running_limit(self) -> int:
        """How many jobs run at once (module docstring)."""
        if self.max_running is not None:
            return self.max_running
        return 1 if self.address else max(1, host_slots() // JOB_SLOTS)

    @property
    def job_slots(self) -> int | None:
        """The `--slots` each job's embedded Ray gets, or None on a cluster (module docstring)."""
        if self.address:
            return None
        return max(1, host_slots() // self.running_limit)

    @property
    def jobs_dir(self) -> Path:
        return self.root / "jobs"

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache"

    @property
    def uploads_dir(self) -> Path:
        return self.root / "uploads"

    def make_dirs(self) -> None:
        """The root, and in it the jobs', cache's and uploads' directories, private to this user
        (mode 0700; tightened where they exist with looser modes)."""
        private = (self.jobs_dir, self.cache_dir, self.uploads_dir)
        for directory in (self.root, *private):
            try:
                directory.mkdir(mode=0o700 if directory in private else 0o777, parents=True, exist_ok=True)
            except OSError as error:
                raise InputError(f"cannot create the service's directory {directory} "
                                 f"({error.strerror or error}); choose another --root") from None
        make_private(private, "the service's directories")
