"""`calibrate loo TARGET`: leave-one-out cross-validation of the calibration (`calibrate.runs.loo`)."""

from __future__ import annotations

import argparse

from calibrate.cli.common import requested_links
from calibrate.cli.run import add_run_command, search_config, start


def register(subparsers: argparse._SubParsersAction) -> None:
    add_run_command(
        subparsers, "loo", _loo,
        help="leave-one-out: predict each scheme with an emulator calibrated on the others",
        description="For each scheme of TARGET, calibrate an emulator on the other schemes and report "
        "its error on the held-out scheme beside its in-sample error, with the mean and median "
        "(the Pantheon paper: within about 20 %). The folds share evaluations: every evaluation "
        "runs every scheme once and is told to every fold. Writes one run directory, a table "
        "(loo.csv, loo.json), a plot and each fold's emulator export. Needs root.",
        links_help="link kinds each fold searches, each its own search (default: the kind the "
                   "target's link logs show, else both)")


def _loo(args: argparse.Namespace) -> int:
    from calibrate.runs.config import LINK_KINDS
    from calibrate.runs.loo import LeaveOneOut
    from calibrate.runs.problem import links_for

    requested = requested_links(args)
    search_config(args, requested or LINK_KINDS)  # the options checked before anything runs
    return start(args, "loo", LeaveOneOut, lambda target: search_config(args, links_for(target, requested)))
