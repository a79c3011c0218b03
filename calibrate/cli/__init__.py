"""The `calibrate` command line: one sub-command module per concept.

Each module in COMMANDS exposes `register(subparsers)`, which adds its sub-command(s) with
`set_defaults(func=...)`; `func(args) -> int` does the work.  Errors derived from
CalibrateError are printed on one line and turned into a non-zero exit status.  SIGINT (Ctrl-C)
and SIGTERM end a command the same way: a KeyboardInterrupt (`Interrupted` for SIGTERM) runs
every cleanup on its way out, then one line (with what to do next, when the command added it as
a note), and the status 128 + the signal's number: 130, 143.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from calibrate import installed_version, scratch
from calibrate.errors import CalibrateError, Interrupted, Notice

COMMANDS = ["calibrate.cli.selftest", "calibrate.cli.target", "calibrate.cli.schemes", "calibrate.cli.emulate",
            "calibrate.cli.run", "calibrate.cli.score", "calibrate.cli.export",
            "calibrate.cli.loo",
            "calibrate.cli.ablate",
            "calibrate.cli.cluster",
            "calibrate.cli.serve", "calibrate.cli.submit"]


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


@contextmanager
def _sigterm_interrupts(received: list[int]) -> Iterator[None]:
    """SIGTERM raises `Interrupted` while the command runs, as SIGINT raises KeyboardInterrupt;
    `received` records it (Ray turns an exception raised by a signal handler while it waits into
    a plain KeyboardInterrupt)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        received.append(signum)
        raise Interrupted(signum)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _notes_on_one_line() -> Iterator[None]:
    """calibrate's own notices (`calibrate.errors.Notice`) print as one line, `calibrate: note:
    ...`, once each; other warnings as Python prints them."""
    python_shows = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        if issubclass(category, Notice):
            print(f"calibrate: note: {message}", file=sys.stderr)
        else:
            python_shows(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.filterwarnings("default", category=Notice)
        warnings.showwarning = show
        yield


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    received: list[int] = []
    try:
        with _sigterm_interrupts(received), _notes_on_one_line():
            scratch.sweep()  # what killed calibrate processes left in $TMPDIR (calibrate.scratch)
            return int(args.func(args) or 0)
    except CalibrateError as error:
        print(f"calibrate: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt as interrupt:
        signum = (interrupt.signum if isinstance(interrupt, Interrupted)
                  else received[0] if received else signal.SIGINT)
        hints = "".join(f"; {note}" for note in getattr(interrupt, "__notes__", ()))
        print(f"calibrate: interrupted ({signal.Signals(signum).name}){hints}", file=sys.stderr)
        return 128 + signum
