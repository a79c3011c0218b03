"""Finding the Rust binaries that `pip install` builds beside the package.

maturin (`bindings = "bin"`) installs them into the environment's scripts directory, which is
not on PATH when a venv is used without being activated; look there first, then on PATH.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

from calibrate.errors import EnvironmentProblem

LINK = "calibrate-link"
SCHEME = "calibrate-scheme"


def find(name: str) -> Path:
    """Absolute path of an installed project binary, or an error saying how to build it."""
    candidates = [Path(sysconfig.get_path("scripts")), Path(sys.executable).parent]
    for directory in candidates:
        path = directory / name
        if path.is_file() and os.access(path, os.X_OK):
            return path
    found = shutil.which(name)
    if found:
        return Path(found)
    raise EnvironmentProblem(
        f"the binary {name!r} is not installed: run `pip install -e .` in the project "
        "(it builds the Rust code under emulators/ with maturin)"
    )
