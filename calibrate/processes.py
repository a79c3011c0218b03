"""Whether a process is alive, by its pid: what the scratch sweep (a temporary directory whose
owner is dead) and the local Ray nodes (`calibrate cluster local`) both ask."""

from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int) -> bool:
    """True while `pid` runs, whoever owns it; a zombie (exited, not yet reaped by its parent)
    is not alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
