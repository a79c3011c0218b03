"""`calibrate ablate TARGET`: nested emulators, one parameter added a step (`calibrate.runs.ablation`)."""

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
RUN_KIND = "ablation"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ablate", help="ablation: add the emulator's parameters one by one (the paper's Figure 5)",
        description="Calibrate nested emulators of TARGET: the rate alone (the rest at the emulator's "
        "defaults: no added delay, unlimited queue, no loss, constant deliveries), then one more "
        "parameter each step, warm-started from the step before, and last the other link kind's "
        "deliveries. Prints f per step, marks a rise beyond the measured noise; writes one run "
        "directory, a table (ablation.csv, ablation.json), a bar plot and each step's emulator "
        "export. Needs root.")
    add_evaluation_options(parser)
    parser.add_argument("--order", default="greedy", metavar="greedy|rate,delay,queue,loss",
                        help="greedy (default): each step adds the parameter that lowers f most, "
                             "trying each; or the order to add them, the rate first")
    add_search_options(parser, fix=False, links_help="the first is the nested steps' deliveries, "
                       "a second is compared in the last step (default: constant,poisson)")
    add_ray_options(parser)
    parser.set_defaults(func=_ablate)


def _ablate(args: argparse.Namespace) -> int:
    from calibrate.runs.ablation import Ablation, parse_order
    from calibrate.runs.config import LINK_KINDS

    order = parse_order(args.order)
    config = study_config(args, requested_links(args) or LINK_KINDS)  # checked before anything runs

    def make(run_dir, target):
        return Ablation.start(run_dir, config, target, order)

    return start_study(args, "ablation", make)


def resume(args: argparse.Namespace) -> int:
    """`calibrate resume RUN_DIR` of an ablation."""
    from calibrate.runs.ablation import Ablation

    return resume_study(args, Ablation)


def export(args: argparse.Namespace) -> int:
    """`calibrate export RUN_DIR` of an ablation."""
    return export_command(args)
