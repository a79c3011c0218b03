"""A `pantheon_perf.json` given on its own (2018+: per scheme and run, per flow and "all", the
throughput, p95 one-way delay and loss that Pantheon's analysis computed) into a Target.

The file is read as the data directory it sits in with that file as its perf source
(`calibrate.targets.datadir.read_data_dir`), so the metadata and logs beside it, where present,
give the workload, provenance and per-packet evidence.  The format itself (reading and writing
the file) is `calibrate.metrics.read_perf_json` / `write_perf_json`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from calibrate.targets.datadir import PERF, read_data_dir
from calibrate.targets.model import Target


def is_perf_json(path: Path, data: Any) -> bool:
    """Whether a JSON file (`data`, parsed) is a pantheon_perf.json: by its name, or by its shape
    (scheme -> run id -> flows; a summary table has a "schemes" key instead)."""
    if path.name.endswith(PERF):
        return True
    if not isinstance(data, dict) or not data or "schemes" in data:
        return False
    return all(isinstance(v, dict) and all(str(k).isdigit() for k in v) for v in data.values())


def read_perf_file(path: Path | str) -> Target:
    """The target of a pantheon_perf.json and the data directory around it."""
    path = Path(path)
    return read_data_dir(path.parent, perf_file=path)
