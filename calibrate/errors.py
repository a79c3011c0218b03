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
