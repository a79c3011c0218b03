"""The few typed errors of the service.

Every message is written for a person: it names the problem and says what to do.  The CLI
prints it on one line and exits non-zero; no traceback reaches the user for bad input.
"""


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
