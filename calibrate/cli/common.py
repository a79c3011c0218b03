"""What several commands share: options and the objects built from them."""

from __future__ import annotations

import argparse

from calibrate.engine import BACKENDS, Backend


def add_backend_options(parser: argparse.ArgumentParser) -> None:
    """`--backend engine|mahimahi` and `--mahimahi-user` (emulate, score, run)."""
    group = parser.add_argument_group("emulator backend")
    group.add_argument("--backend", choices=BACKENDS, default="engine",
                       help="engine (default): this project's calibrate-link; mahimahi: the same "
                            "runs through your real mm-delay/mm-loss/mm-link (on PATH, setuid "
                            "root), to calibrate on or check an export in real Mahimahi")
    group.add_argument("--mahimahi-user", metavar="NAME",
                       help="with --backend mahimahi: the unprivileged account Mahimahi's shells "
                            "run as (they refuse root)")


def backend_from(args: argparse.Namespace) -> Backend:
    """The Backend the options name (checked: a mahimahi backend needs its user)."""
    return Backend(args.backend, args.mahimahi_user)
