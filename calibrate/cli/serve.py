"""`calibrate serve`: the calibration service (HTTP API, job store, web page); and `calibrate
serve token create|list|revoke`, the API tokens writes need (`calibrate.service`)."""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
from pathlib import Path

from calibrate.cli.common import require_root


def _add_store_options(parser: argparse.ArgumentParser, *, verb: bool = True) -> None:
    """--root and --store, on `serve` and on each `serve token` verb (where, unless given,
    they leave what `serve --root` said: `calibrate serve --root DIR token list`)."""
    from calibrate.service.settings import DEFAULT_ROOT, STORE_FILE

    parser.add_argument("--root", type=Path, default=argparse.SUPPRESS if verb else DEFAULT_ROOT,
                        metavar="DIR", help="where the service keeps its jobs, cache and (by default) "
                                            f"store (default: {DEFAULT_ROOT})")
    parser.add_argument("--store", metavar="URL", default=argparse.SUPPRESS if verb else None,
                        help=f"the job store, an SQLAlchemy URL: sqlite:///PATH (default: ROOT/{STORE_FILE}) "
                             f"or postgresql+psycopg://USER@HOST/DB")


def register(subparsers: argparse._SubParsersAction) -> None:
    from calibrate.service.settings import DEFAULT_HOST, DEFAULT_MAX_UPLOAD_BYTES, DEFAULT_PORT, JOB_SLOTS
    from calibrate.targets.archive import DEFAULT_MAX_BYTES

    serve = subparsers.add_parser(
        "serve", help="run the calibration service: HTTP API, job store and web page",
        description="Serve calibrations over HTTP: researchers submit a target (a Pantheon result ID, "
        "a bundled name, or an uploaded archive or table), watch it run and download the emulator; "
        "finished calibrations form a catalogue. Jobs are `calibrate run` processes, at most "
        "--max-running at once, continued after a restart. Writes need an API token "
        "(`calibrate serve token create`). Needs root (the jobs run emulators).")
    _add_store_options(serve, verb=False)
    serve.add_argument("--host", default=DEFAULT_HOST,
                       help="address to listen on (default: %(default)s, this machine only)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default: %(default)s)")
    serve.add_argument("--address", help="run every job on this Ray cluster (default: each job its "
                                         "embedded Ray on this host)")
    serve.add_argument("--max-running", type=int, metavar="N",
                       help=f"jobs at once (default: this host's emulator slots / {JOB_SLOTS}, at least 1; "
                            f"1 with --address)")
    serve.add_argument("--max-upload-bytes", type=int, default=DEFAULT_MAX_UPLOAD_BYTES, metavar="N",
                       help="largest archive or table a request may upload (default: %(default)s)")
    serve.add_argument("--max-extract-bytes", type=int, default=DEFAULT_MAX_BYTES, metavar="N",
                       help="refuse an archive whose members expand past this (default: %(default)s)")
    serve.add_argument("--tls-cert", type=Path, metavar="PEM",
                       help="serve HTTPS with this certificate (chain) file; needs --tls-key (uvicorn's TLS)")
    serve.add_argument("--tls-key", type=Path, metavar="PEM", help="the certificate's private key file")
    serve.add_argument("--public-reads", action="store_true",
                       help="let every valid token read every job's state, events and results (by default a "
                            "token reads only the jobs it submitted); logs, uploads and cancelling stay the "
                            "submitter's alone")
    serve.set_defaults(func=_serve)

    verbs = serve.add_subparsers(dest="serve_command", title="managing the API tokens", metavar="token")
    # after add_subparsers, which names the verbs' programs from the usage: `token` is optional
    serve.usage = ("calibrate serve [-h] [--root DIR] [--store URL] [--host HOST] [--port PORT] [--address ADDRESS]\n"
                   "                       [--max-running N] [--max-upload-bytes N] [--max-extract-bytes N]\n"
                   "                       [--tls-cert PEM --tls-key PEM] [--public-reads]\n"
                   "       calibrate serve token {create,list,revoke} ...")
    token = verbs.add_parser("token", help="the API tokens writes need",
                             description="Create, list or revoke the server's API tokens (stored hashed).")
    token_verbs = token.add_subparsers(dest="token_command", metavar="VERB")
    token_verbs.required = True
    create = token_verbs.add_parser("create", help="make a token and print it (once)")
    create.add_argument("--name", default="default", help="the token's name (default: %(default)s)")
    _add_store_options(create)
    create.set_defaults(func=_token_create)
    listing = token_verbs.add_parser("list", help="the tokens' names and when they were made and used")
    listing.add_argument("--json", action="store_true", help="print JSON on stdout instead of tables")
    _add_store_options(listing)
    listing.set_defaults(func=_token_list)
    revoke = token_verbs.add_parser("revoke", help="revoke a token by name")
    revoke.add_argument("name", metavar="NAME")
    _add_store_options(revoke)
    revoke.set_defaults(func=_token_revoke)


def _settings(args: argparse.Namespace, **more):
    from calibrate.service.settings import ServiceSettings

    return ServiceSettings(root=args.root, store_url=args.store, **more)


def _store(args: argparse.Namespace):
    from calibrate.service.store import Store

    settings = _settings(args)
    settings.make_dirs()
    return Store(settings.store)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from calibrate.errors import InputError
    from calibrate.service.app import create_app

    if not 0 < args.port < 65536:
        raise InputError(f"--port must be a port number (1 to 65535), got {args.port}")
    if (args.tls_cert is None) != (args.tls_key is None):
        raise InputError("--tls-cert and --tls-key go together: give the certificate and its private key")
    for flag, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        if path is not None and not path.is_file():
            raise InputError(f"{flag} {path}: no such file; give a PEM file (e.g. of `openssl req -x509 ...`)")
    scheme = "https" if args.tls_cert else "http"
    settings = _settings(args, address=args.address, max_running=args.max_running,
                         max_upload_bytes=args.max_upload_bytes, max_extract_bytes=args.max_extract_bytes,
                         url=f"{scheme}://{args.host}:{args.port}", public_reads=args.public_reads)
    require_root()
    app = create_app(settings)
    store = app.state.store
    slots = ("jobs on the Ray cluster at " + settings.address if settings.address
             else f"{settings.job_slots} emulator slots each")
    reads = "every token reads every job (--public-reads)" if settings.public_reads else \
        "each token reads its own jobs"
    print(f"calibrate: serving {scheme}://{args.host}:{args.port} (API docs at /docs): root {settings.root}, "
          f"store {store.safe_url}, {settings.running_limit} job(s) at once, {slots}; {reads}", file=sys.stderr)
    if not store.tokens():
        print("calibrate: note: no API token yet, so nobody can submit: create one with `calibrate serve "
              f"token create --root {args.root}`", file=sys.stderr)
    try:
        loopback = ipaddress.ip_address(args.host).is_loopback
    except ValueError:
        loopback = args.host == "localhost"
    if not loopback:
        exposed = (f"calibrate: note: listening on {args.host}, reachable from other machines: the API (every "
                   f"job request needs a token), the web page at / and the API docs at /docs")
        if args.tls_cert:
            print(f"{exposed}, over HTTPS ({args.tls_cert})", file=sys.stderr)
        else:
            print(f"{exposed}, over plain HTTP: tokens and results travel in clear text; serve HTTPS with "
                  f"--tls-cert CERT.pem --tls-key KEY.pem, or put a TLS reverse proxy in front", file=sys.stderr)
    # an open event stream would hold a graceful shutdown forever: give connections 5 s
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=5,
                ssl_certfile=args.tls_cert, ssl_keyfile=args.tls_key)
    return 0


def _token_create(args: argparse.Namespace) -> int:
    store = _store(args)
    token = store.create_token(args.name)
    print(token)
    print(f"calibrate: token {args.name!r} created; it is shown only now (the store keeps a salted hash): "
          f"give it to clients as --token or CALIBRATE_TOKEN", file=sys.stderr)
    return 0


def _token_list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    tokens = _store(args).tokens()
    if args.json:
        print(json.dumps([{"name": t.name, "created": t.created, "last_used": t.last_used} for t in tokens],
                         indent=2))
        return 0
    table = Table(title=f"API tokens ({len(tokens)})", title_justify="left")
    for column in ("name", "created", "last used"):
        table.add_column(column)
    for t in tokens:
        table.add_row(t.name, t.created, t.last_used or "never")
    Console().print(table)
    return 0


def _token_revoke(args: argparse.Namespace) -> int:
    from calibrate.errors import InputError

    if not _store(args).revoke_token(args.name):
        raise InputError(f"no token named {args.name!r}; `calibrate serve token list` shows them")
    print(f"calibrate: token {args.name!r} revoked", file=sys.stderr)
    return 0
