"""The few typed errors of the service.

Every message is written for a person: it names the problem and says what to do.  The CLI
prints it on one line and exits non-zero; no traceback reaches the user for bad input.
"""

from collections.abc import Iterator
from contextlib import contextmanager


class CalibrateError(Exception):
    """Base class: something the user can fix, with a message that says how."""

    exit_code = 2


class InputError(CalibrateError):
    """Bad input: a malformed file, an invalid parameter, an unknown name."""


class EnvironmentProblem(CalibrateError):
    """The host cannot do what was asked (not root, no /dev/net/tun, binary missing, ...)."""

    exit_code = 3


class RunFailed(CalibrateError):
    """An emulation or a scheme endpoint failed while running."""

    exit_code = 4


class RunBusy(InputError):
    """A run directory has a writer already (`calibrate.runs.lock`); `holder` says who."""

    def __init__(self, message: str, holder: object = None) -> None:
        super().__init__(message)
        self.holder = holder


class Notice(UserWarning):
    """Something a person should know that stops nothing (a journal's torn last line, say),
    issued with `warnings.warn(text, Notice)`; the CLI prints it as one line,
    ``calibrate: note: text``."""


class Interrupted(KeyboardInterrupt):
    """The process was asked to stop by a signal (SIGTERM; SIGINT is Python's own
    KeyboardInterrupt).  A KeyboardInterrupt, so that every cleanup written for Ctrl-C runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def read_as_input(source: str) -> Iterator[None]:
    """Any failure of a reader on `source` as one InputError line.  A reader's own errors pass
    as they are; anything else the input provoked (a ValueError deep in a parser, a recursion too
    deep) is named with the input, so that the CLI exits 2 and the service answers 422 rather
    than showing a traceback.  Running out of memory is not the input's message to give."""
    try:
        yield
    except (CalibrateError, MemoryError):
        raise
    except Exception as error:
        text = " ".join(str(error).split())[:200]
        raise InputError(f"{source}: cannot be read ({type(error).__name__}: {text}); it is not a "
                         "Pantheon result or table this calibrate reads") from None
