"""Ray's token authentication, made deliberate for the clusters calibrate starts and joins.

How the token reaches every process (Ray 2.60).  Each Ray process — GCS, raylet, worker,
driver, the `ray` command — reads the token itself when it starts: from ``RAY_AUTH_TOKEN``, else
the file ``RAY_AUTH_TOKEN_PATH`` names, else ``~/.ray/auth_token`` of the user it runs as; it
attaches and checks the token only when ``RAY_AUTH_MODE=token`` is in its environment.  Workers
are started by their node's raylet and inherit its environment, so they use what that node's
`ray start` was given; nothing is sent from the driver to the workers.

Ray turns token mode on by itself in two places only: a `ray.init()` that starts a cluster
(always; it writes ``~/.ray/auth_token`` when none exists) and `ray start --head` *when a token
already exists*.  A node joining with `ray start --address` and a driver joining with
`ray.init(address=HOST:PORT)` never do.  That asymmetry makes ``InvalidAuthToken`` look flaky:
on a machine where any embedded `ray.init()` has run (a `calibrate run` without ``--address``,
a test), ``~/.ray/auth_token`` exists, so `ray start --head` enables token auth, and the nodes
and drivers joining it by address connect without a token and are refused
(``Unauthenticated: InvalidAuthToken``, retried for many seconds, then "Failed to connect"); on
a fresh machine, or under another ``HOME``, no token exists, the head starts without auth and
everything joins.

calibrate's rule:
- the clusters it starts set ``RAY_AUTH_MODE`` explicitly on every node (`calibrate cluster
  local`: token mode with ``~/.ray/auth_token``, made if missing; KubeRay: the RayCluster's
  ``authOptions``, so the operator puts one generated token into every Ray container);
- a driver joining by address turns token mode on when a token is available, as
  `ray.init(address="auto")` does (a cluster without authentication ignores the token);
- a refusal says where this side's token came from and how to give it the cluster's.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import secrets
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

MODE = "RAY_AUTH_MODE"
TOKEN = "RAY_AUTH_TOKEN"
TOKEN_PATH = "RAY_AUTH_TOKEN_PATH"


def default_token_path() -> Path:
    """Where Ray looks for a token when neither variable names one (per user: ``$HOME``)."""
    return Path.home() / ".ray" / "auth_token"


def token_source(environ: Mapping[str, str] | None = None) -> str | None:
    """Where Ray would read this process's token from, in Ray's order, or None if nowhere."""
    env = os.environ if environ is None else environ
    if env.get(TOKEN):
        return f"${TOKEN}"
    if env.get(TOKEN_PATH):
        return f"${TOKEN_PATH} ({env[TOKEN_PATH]})"
    path = default_token_path()
    try:
        if path.read_text().strip():
            return str(path)
    except OSError:
        pass
    return None


def joining_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a driver joining a cluster by address needs set: token mode when a token
    is available and no mode was chosen (an explicit ``RAY_AUTH_MODE`` is respected)."""
    env = os.environ if environ is None else environ
    if env.get(MODE) is None and token_source(env) is not None:
        return {MODE: "token"}
    return {}


def _refresh_ray() -> None:
    """Make an already imported Ray see RAY_AUTH_MODE as it is now: Ray reads it into a cached
    config when it is imported, and its own switch (`ray.init(address="auto")` finding a token)
    refreshes that config the same way."""
    if "ray" not in sys.modules:
        return  # read when imported
    try:
        importlib.import_module("ray._raylet").Config.initialize("")
    except (ImportError, AttributeError):
        pass


def enable_for_joining() -> dict[str, str]:
    """Set `joining_environment` in this process (a driver about to join by address) and make
    an already imported Ray see it; returns what was set, for the caller to unset when done."""
    changes = joining_environment()
    if changes:
        os.environ.update(changes)
        _refresh_ray()
    return changes


@contextlib.contextmanager
def token_mode() -> Iterator[None]:
    """Token mode for what this process asks Ray meanwhile (the state API of a cluster with
    token authentication); the mode as it was afterwards."""
    saved = os.environ.get(MODE)
    os.environ[MODE] = "token"
    _refresh_ray()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(MODE, None)
        else:
            os.environ[MODE] = saved
        _refresh_ray()


def ensure_token(path: Path | None = None) -> tuple[Path, bool]:
    """The token file a new local cluster uses (``~/.ray/auth_token``): kept if it holds a
    token, else written atomically, readable by its owner only, in Ray's format (64 hex digits).
    Returns (path, created)."""
    path = path or default_token_path()
    try:
        if path.read_text().strip():
            return path, False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)
    return path, True


def refusal_hint(address: str, environ: Mapping[str, str] | None = None) -> str:
    """What to tell a person whose driver could not join `address`, token-wise."""
    env = os.environ if environ is None else environ
    source = token_source(env)
    mode = env.get(MODE)
    if mode is not None and mode.lower() != "token":
        sent = f"no token ({MODE}={mode})"
    elif source is None:
        sent = "no token (none found)"
    else:
        sent = f"the token from {source}"
    return (f"if Ray's messages above say InvalidAuthToken, the cluster uses token authentication "
            f"and refused {sent}: give this side the cluster's token — copy the head's "
            f"~/.ray/auth_token here, or set {TOKEN} (`ray get-auth-token` on the head prints it; "
            f"on KubeRay it is in the Secret the operator made) — and set {MODE}=token")


__all__ = ["MODE", "TOKEN", "TOKEN_PATH", "default_token_path", "enable_for_joining", "ensure_token",
           "joining_environment", "refusal_hint", "token_mode", "token_source"]
