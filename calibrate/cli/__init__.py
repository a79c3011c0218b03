"""The `calibrate` command line: one sub-command module per concept.

Each module in COMMANDS exposes `register(subparsers)`, which adds its sub-command(s) with
`set_defaults(func=...)`; `func(args) -> int` does the work.  Errors derived from
CalibrateError are printed on one line and turned into a non-zero exit status.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from calibrate import installed_version
from calibrate.errors import CalibrateError

COMMANDS = ["calibrate.cli.selftest", "calibrate.cli.target", "calibrate.cli.schemes", "calibrate.cli.emulate",
            "calibrate.cli.run", "calibrate.cli.score", "calibrate.cli.export"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="calibrate",
        description="Calibrate a network emulator to a real Internet path measured with Pantheon.",
    )
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {installed_version() or 'unknown (not installed)'}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMANDS:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CalibrateError as error:
        print(f"calibrate: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("calibrate: interrupted", file=sys.stderr)
        return 130
