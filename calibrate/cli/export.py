"""`calibrate export RUN_DIR`: the winning emulator, ready to use, and its fidelity report; and
how the CLI exports and prints a run of each kind (`presentations`), for `export` and for every
command that runs one (`calibrate.cli.run.execute`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from calibrate.errors import InputError

if TYPE_CHECKING:
    from calibrate.runs.controller import Run


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export", help="export a calibration's emulator (Mahimahi, Pantheon, engine) and report",
        description="Write the winning emulator of the calibration in RUN_DIR as a Mahimahi command "
        "line with its trace files, Pantheon test.py arguments and a calibrate-link command, for "
        "each link kind evaluated; emulator.json with the parameters, the per-scheme real vs "
        "emulated table and provenance; the paper's Figure 3 and a convergence plot. Works on an "
        "interrupted run too (the result is computed from the journal).")
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path,
                        help="the run directory of `calibrate run` / `calibrate resume`")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="export directory (default: RUN_DIR/export); paths in its command "
                             "files are relative to it")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into an --out that holds other files (another run's export, "
                             "say), replacing those of the same names; otherwise refused")
    parser.add_argument("--json", action="store_true",
                        help="print emulator.json (the report, as JSON) on stdout instead of tables")
    parser.set_defaults(func=_export)


# ----------------------------------------------------------------------------------------------
# Each kind of run: its export and its table


@dataclass(frozen=True)
class Presentation:
    """How the CLI exports and prints a finished run of one kind."""

    #: export a run that has just run, given its result (result.json's JSON); the export's directory
    export: Callable[[Run, dict[str, Any]], Path]
    #: print a result (result.json's JSON) with its run directory and export (None: not exported)
    show: Callable[[dict[str, Any], Path, Path | None], None]
    #: `calibrate export RUN_DIR` of a run of this kind (RUN_DIR and --out checked)
    command: Callable[[argparse.Namespace], int]


def presentations() -> dict[str, Presentation]:
    """The CLI's side of the table of kinds (`calibrate.runs.kinds.KINDS`), by the same names: a
    new kind of run adds its line here.  The runs layer cannot hold these itself: the exports
    and the CLI import it.  Built when a command runs (the run layer is not imported to parse
    options)."""
    from calibrate.cli.studies import export_command
    from calibrate.export import export
    from calibrate.runs.ablation import Ablation
    from calibrate.runs.calibration import Calibration
    from calibrate.runs.loo import LeaveOneOut
    from calibrate.study_export import export_study

    def study(run: Run, result: dict[str, Any]) -> Path:
        return export_study(run.run_dir, study=run, result=result)

    return {
        Calibration.kind: Presentation(lambda run, result: export(run.run_dir), _show_calibration,
                                       _export_calibration),
        LeaveOneOut.kind: Presentation(study, _show_loo, partial(export_command, stem="loo", show=_show_loo)),
        Ablation.kind: Presentation(study, _show_ablation,
                                    partial(export_command, stem="ablation", show=_show_ablation)),
    }


def _show_loo(result: dict[str, Any], run_dir: Path, exported: Path | None) -> None:
    from calibrate.cli.studies import print_loo
    from calibrate.runs.study_result import LooResult

    print_loo(LooResult.from_json(result), run_dir, exported)


def _show_ablation(result: dict[str, Any], run_dir: Path, exported: Path | None) -> None:
    from calibrate.cli.studies import print_ablation
    from calibrate.runs.study_result import AblationResult

    print_ablation(AblationResult.from_json(result), run_dir, exported)


def _show_calibration(result: dict[str, Any], run_dir: Path, exported: Path | None) -> None:
    from calibrate.cli.common import print_result
    from calibrate.runs.result import CalibrationResult

    print_result(CalibrationResult.from_json(result), run_dir, exported)


# ----------------------------------------------------------------------------------------------
# `calibrate export`


def _role(rel: str, winner: str) -> str:
    from calibrate.export import COMMAND_FILES, FILE_ROLES, TRACES
    from calibrate.runs.config import LINK_KINDS

    folder, _, name = rel.rpartition("/")
    if folder == TRACES:
        return "trace file"
    if folder in LINK_KINDS:
        return f"{folder} deliveries: {FILE_ROLES.get(name, '')}"
    if name in COMMAND_FILES.values():
        return f"winner ({winner}): {FILE_ROLES[name]}"
    return FILE_ROLES.get(name, "")


def _export(args: argparse.Namespace) -> int:
    from calibrate.cli.common import writable
    from calibrate.runs.kinds import kind_of

    if args.out is not None:  # before any work
        writable(args.out, "--out", directory=True)
    return presentations()[kind_of(args.run_dir).kind].command(args)


def _export_calibration(args: argparse.Namespace) -> int:
    """`calibrate export RUN_DIR` of a calibration: its emulators, report, and the files' table."""
    from rich.console import Console
    from rich.table import Table

    from calibrate.cli.common import print_result
    from calibrate.export import REPORT, foreign_files, load_run, write_export

    if args.out is not None and not args.overwrite:
        there = foreign_files(args.out, args.run_dir)
        if there:
            shown = ", ".join(there[:3]) + (f" and {len(there) - 3} more" if len(there) > 3 else "")
            raise InputError(f"--out {args.out} already holds files that are not an export of "
                             f"{args.run_dir} ({shown}); choose a new or empty directory, or pass "
                             f"--overwrite to write over files of the same names")
    run = load_run(args.run_dir)
    out = write_export(run, args.out)
    report = json.loads((out / REPORT).read_text())
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        return 0
    print_result(run.result, run.run_dir, out)
    console = Console(width=None if sys.stdout.isatty() else 100)
    if not run.result_source == "result.json":
        console.print(f"note: {run.result_source}", highlight=False)
    table = Table(title=f"files written to {out}", title_justify="left")
    table.add_column("file", no_wrap=True)
    table.add_column("what")
    for rel in report["files"]:
        table.add_row(rel, _role(rel, report["winner"]))
    console.print(table)
    console.print(f"run the commands from {out} (their trace paths are relative to it)",
                  highlight=False)
    return 0
