"""The kinds of run, by the name run.json records ("kind"): the one table in which `calibrate
resume`, `calibrate export` and the studies' export look a run directory's kind up.

A new kind is a module with a subclass of `calibrate.runs.controller.Run` (its searches, how an
evaluation is told to them, its result), registered here; the CLI exports and prints it through
its own line in `calibrate.cli.export.presentations` (this layer does not import the exports or
the CLI: they import it).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from calibrate.errors import InputError
from calibrate.runs.ablation import Ablation
from calibrate.runs.calibration import Calibration
from calibrate.runs.controller import Run
from calibrate.runs.journal import RunDir
from calibrate.runs.loo import LeaveOneOut

KINDS: Mapping[str, type[Run]] = {kind.kind: kind for kind in (Calibration, LeaveOneOut, Ablation)}


def kind_of(run_dir: Path | str) -> type[Run]:
    """The kind of the run in `run_dir` (reads run.json only)."""
    kind = RunDir.open(run_dir, None).kind
    if kind not in KINDS:
        raise InputError(f"{run_dir} holds a run of kind {kind!r}, which this calibrate does not "
                         f"know; upgrade calibrate")
    return KINDS[kind]

