"""`calibrate loo TARGET`: leave-one-out cross-validation of the calibration (`calibrate.runs.loo`)."""

from __future__ import annotations

import argparse

from calibrate.cli.common import add_evaluation_options, add_ray_options
from calibrate.cli.studies import (
    add_search_options,
    export_command,
    requested_links,
    resume_study,
    start_study,
    study_config,
)

#: the kind of run this command makes (`calibrate resume` and `export` find it by this)
RUN_KIND = "leave-one-out"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "loo", help="leave-one-out: predict each scheme with an emulator calibrated on the others",
        description="For each scheme of TARGET, calibrate an emulator on the other schemes and report "
        "its error on the held-out scheme beside its in-sample error, with the mean and median "
        "(the Pantheon paper: within about 20 %). The folds share evaluations: every evaluation "
        "runs every scheme once and is told to every fold. Writes one run directory, a table "
        "(loo.csv, loo.json), a plot and each fold's emulator export. Needs root.")
    add_evaluation_options(parser)
    add_search_options(parser, links_help="link kinds each fold searches, each its own search "
                       "(default: the kind the target's link logs show, else both)")
    add_ray_options(parser)
    parser.set_defaults(func=_loo)


def _loo(args: argparse.Namespace) -> int:
    from calibrate.runs.config import LINK_KINDS, links_for
    from calibrate.runs.loo import LeaveOneOut

    requested = requested_links(args)
    study_config(args, requested or LINK_KINDS)  # the options checked before anything runs

    def make(run_dir, target):
        return LeaveOneOut.start(run_dir, study_config(args, links_for(target, requested)), target)

    return start_study(args, "loo", make)


def resume(args: argparse.Namespace) -> int:
    """`calibrate resume RUN_DIR` of a leave-one-out study."""
    from calibrate.runs.loo import LeaveOneOut

    return resume_study(args, LeaveOneOut)


def export(args: argparse.Namespace) -> int:
    """`calibrate export RUN_DIR` of a leave-one-out study."""
    return export_command(args)
