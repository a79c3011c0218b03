"""`calibrate ablate TARGET`: nested emulators, one parameter added a step (`calibrate.runs.ablation`)."""

from __future__ import annotations

import argparse

from calibrate.cli.common import requested_links
from calibrate.cli.run import add_run_command, search_config, start


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_run_command(
        subparsers, "ablate", _ablate, fix=False,
        help="ablation: add the emulator's parameters one by one (the paper's Figure 5)",
        description="Calibrate nested emulators of TARGET: the rate alone (the rest at the emulator's "
        "defaults: no added delay, unlimited queue, no loss, constant deliveries), then one more "
        "parameter each step, warm-started from the step before, and last the other link kind's "
        "deliveries. Prints f per step, marks a rise beyond the measured noise; writes one run "
        "directory, a table (ablation.csv, ablation.json), a bar plot and each step's emulator "
        "export. Needs root.",
        links_help="the first is the nested steps' deliveries, a second is compared in the last "
                   "step (default: constant,poisson)")
    parser.add_argument("--order", default="greedy", metavar="greedy|rate,delay,queue,loss",
                        help="greedy (default): each step adds the parameter that lowers f most, "
                             "trying each; or the order to add them, the rate first")


def _ablate(args: argparse.Namespace) -> int:
    from calibrate.runs.ablation import Ablation, parse_order
    from calibrate.runs.config import LINK_KINDS

    order = parse_order(args.order)
    config = search_config(args, requested_links(args) or LINK_KINDS)  # checked before anything runs
    return start(args, "ablation", Ablation, lambda target: config, order=order)
