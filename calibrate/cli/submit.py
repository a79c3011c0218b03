"""The service's client: `calibrate submit TARGET`, `calibrate jobs`, `calibrate fetch ID`.

Run anywhere that reaches a `calibrate serve` (--server URL, or CALIBRATE_SERVER); no root, no
engine, no Ray here.  `submit` takes `calibrate run`'s options and sends them as the request's
options (the server fills in the rest, and answers with the job that already has the same
target content and options, unless --force); a TARGET that is a local file (an archive or a
table) is uploaded.  --wait follows the job's events until it ends.  With --study loo|ablate it
submits a study instead (`calibrate loo` / `calibrate ablate` on the server) of TARGET or of the
target of a calibration on the server (--calibration ID).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from calibrate.cli.common import fmt_f
from calibrate.errors import InputError, RunFailed

#: how often `calibrate submit --study --wait` looks at its study
STUDY_POLL_S = 5.0


def _add_server_options(parser: argparse.ArgumentParser) -> None:
    from calibrate.service.settings import DEFAULT_SERVER, ENV_SERVER, ENV_TOKEN

    group = parser.add_argument_group("the server")
    group.add_argument("--server", metavar="URL",
                       help=f"the calibration server (env {ENV_SERVER}; default {DEFAULT_SERVER})")
    group.add_argument("--token", help=f"its API token (env {ENV_TOKEN}): your jobs are your token's; "
                                       f"`calibrate serve token create` on the server makes one")


def register(subparsers: argparse._SubParsersAction) -> None:
    from calibrate.runs.options import REQUEST, add_arguments

    submit = subparsers.add_parser(
        "submit", help="submit a calibration to a calibration server (calibrate serve)",
        description="Ask a calibration server to calibrate an emulator to TARGET (a bundled name, a "
        "Pantheon result ID, or a local archive or table, which is uploaded) with `calibrate run`'s "
        "options; print the job. The same target content and options return the job that has them "
        "already, unless --force.")
    submit.add_argument("target", metavar="TARGET", nargs="?",
                        help="a bundled name (nepal), a Pantheon result ID (P188), or a local archive "
                             "(.tar.gz/.tar.xz/.zip) or table (.csv/.json) to upload")
    study = submit.add_argument_group("a study instead of a calibration (calibrate loo / ablate)")
    study.add_argument("--study", choices=("loo", "ablate"),
                       help="leave-one-out, or the ablation of the paper's Figure 5, of TARGET")
    study.add_argument("--calibration", metavar="ID",
                       help="the study's target is that of calibration ID on the server (instead of TARGET)")
    study.add_argument("--order", metavar="greedy|rate,delay,queue,loss", help="ablate: the order of the steps")
    options = submit.add_argument_group("calibrate run's options (the server's defaults when left out)")
    add_arguments(options, REQUEST, defaults=False)
    submit.add_argument("--force", action="store_true", help="run it again even if it ran already")
    submit.add_argument("--wait", action="store_true",
                        help="follow the job (one line per finished evaluation) until it ends")
    submit.add_argument("--json", action="store_true",
                        help="print the server's answer (with --wait: the finished job) as JSON on stdout "
                             "instead of lines")
    _add_server_options(submit)
    submit.set_defaults(func=_submit)

    jobs = subparsers.add_parser("jobs", help="the calibrations on a calibration server",
                                 description="List a calibration server's calibrations, newest first.")
    jobs.add_argument("--state", choices=("queued", "running", "done", "failed", "cancelled"))
    jobs.add_argument("--studies", action="store_true", help="list the studies instead")
    jobs.add_argument("--json", action="store_true", help="print JSON on stdout instead of tables")
    _add_server_options(jobs)
    jobs.set_defaults(func=_jobs)

    fetch = subparsers.add_parser("fetch", help="download a finished calibration's (or study's) export",
                                  description="Download the export of calibration ID (emulator.json, the "
                                  "Mahimahi command line and its traces, the figures), or of study ID (its "
                                  "table, plot and each fold's or step's emulator), and unpack it.")
    fetch.add_argument("job_id", metavar="ID")
    fetch.add_argument("--out", type=Path, metavar="DIR",
                       help="where to unpack it (default: ./calibration-ID or ./study-ID)")
    _add_server_options(fetch)
    fetch.set_defaults(func=_fetch)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The request's options: those given (the server fills in the rest)."""
    from calibrate.runs.options import REQUEST, values_of_arguments

    return {k: v for k, v in values_of_arguments(args, REQUEST).items() if v is not None}


def _progress_text(job: dict[str, Any]) -> str:
    return ", ".join(f"{link} {p['done']}/{p['budget']}" for link, p in (job.get("progress") or {}).items())


def _announced(args: argparse.Namespace, client: Any, answer: dict[str, Any], kind: str, noun: str) -> bool:
    """Say what the server answered to a submission; True when that is all (no --wait)."""
    if args.json and not args.wait:
        print(json.dumps(answer, indent=2))
        return True
    how = f"the same {kind} exists already" if answer.get("existing") else "submitted"
    print(f"calibrate: {how}: {noun} {answer['id']} ({answer['state']}), {client.server}{answer['urls']['self']}",
          file=sys.stderr)
    if not args.wait:
        print(answer["id"])
        return True
    return False


def _submit(args: argparse.Namespace) -> int:
    from calibrate.service.client import Client

    client = Client.from_options(args.server, args.token)
    if args.study or args.calibration or args.order:
        return _submit_study(args, client)
    if args.target is None:
        raise InputError("give TARGET: a bundled name (nepal), a Pantheon result ID or a local archive")
    answer = client.submit(args.target, _options(args), force=args.force)
    job_id = answer["id"]
    if _announced(args, client, answer, "calibration", "job"):
        return 0
    for event in client.events(job_id):
        if event.name == "evaluation":
            r = event.data
            print(f"{r['link']:>8} #{r['n']:<3} f = {r['f']:6.1f} %  (noise {fmt_f(r.get('noise'))})  "
                  f"{r['emulator']}", file=sys.stderr)
        elif event.name == "state":
            print(f"calibrate: job {job_id}: {event.data['state']}", file=sys.stderr)
        elif event.name == "end":
            break
    job = client.job(job_id)
    if args.json:
        print(json.dumps(job, indent=2))
    if job["state"] != "done":
        raise RunFailed(f"job {job_id} ended {job['state']}" + (f": {job['message']}" if job.get("message") else ""))
    best = job.get("best") or {}
    if not args.json:
        print(f"calibrate: job {job_id} done in {job.get('elapsed_s') or 0:.0f} s: {best.get('link')} f = "
              f"{fmt_f(best.get('f'))}; emulator: {best.get('text')}", file=sys.stderr)
        print(f"calibrate: download it with `calibrate fetch {job_id} --server {client.server}`", file=sys.stderr)
        print(job_id)
    return 0


def _submit_study(args: argparse.Namespace, client: Any) -> int:
    """`calibrate submit --study loo|ablate`: POST /v1/studies; --wait polls it to its end."""
    if not args.study:
        raise InputError("--calibration and --order belong to a study: add --study loo or --study ablate")
    if (args.target is None) == (args.calibration is None):
        raise InputError("a study needs TARGET or --calibration ID (the target of a calibration on the "
                         "server), one of the two")
    answer = client.submit_study(args.study, target=args.target, calibration=args.calibration,
                                 options=_options(args), order=args.order, force=args.force)
    job_id = answer["id"]
    if _announced(args, client, answer, "study", "study"):
        return 0
    shown = None
    while True:
        job = client.job(job_id, "studies")
        line = f"{job['state']}, {job['evaluations']} evaluations, best f {fmt_f(job.get('best_f'))}"
        if line != shown:
            print(f"calibrate: study {job_id}: {line}", file=sys.stderr)
            shown = line
        if job["state"] in ("done", "failed", "cancelled"):
            break
        time.sleep(STUDY_POLL_S)
    if args.json:
        print(json.dumps(job, indent=2))
    if job["state"] != "done":
        raise RunFailed(f"study {job_id} ended {job['state']}" + (f": {job['message']}" if job.get("message") else ""))
    if not args.json:
        result = job["result"] or {}
        if args.study == "loo":
            held = result.get("held_out") or {}
            what = (f"held-out f mean {fmt_f(held.get('mean'))}, median {fmt_f(held.get('median'))} "
                    f"({held.get('n')} folds)")
        else:
            what = f"{len(result.get('steps') or [])} steps"
        print(f"calibrate: study {job_id} done in {job.get('elapsed_s') or 0:.0f} s: {what}; download it "
              f"with `calibrate fetch {job_id} --server {client.server}`", file=sys.stderr)
        print(job_id)
    return 0


def _jobs(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from calibrate.service.client import Client

    client = Client.from_options(args.server, args.token)
    collection = "studies" if args.studies else "calibrations"
    jobs = client.jobs(args.state, collection)
    if args.json:
        print(json.dumps(jobs, indent=2))
        return 0
    table = Table(title=f"{collection} on {client.server} ({len(jobs)})", title_justify="left")
    kind = ["study"] if args.studies else []  # a study's column: loo or ablate
    for column in ("id", *kind, "state", "target", "evaluations", "best f", "created", "message"):
        table.add_column(column)
    for job in jobs:
        if args.studies:
            done, best = str(job["evaluations"]), job.get("best_f")
        else:
            done, best = _progress_text(job), (job.get("best") or {}).get("f")
        table.add_row(job["id"], *[job[k] for k in kind], job["state"], job["target"], done, fmt_f(best),
                      job["created"], (job.get("message") or "")[:80])
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    return 0


def _fetch(args: argparse.Namespace) -> int:
    from calibrate.service.client import Client

    client = Client.from_options(args.server, args.token)
    collection = client.collection_of(args.job_id)
    kind = "study" if collection == "studies" else "calibration"
    out = client.fetch(args.job_id, args.out or Path(f"{kind}-{args.job_id}"), collection)
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    main = out / "mahimahi.txt" if kind == "calibration" else next(
        (out / name for name in ("loo.csv", "ablation.csv") if (out / name).is_file()), out)
    print(f"calibrate: export of {kind} {args.job_id} in {out} ({len(files)} files; "
          f"{'the emulator' if kind == 'calibration' else 'the table'}: {main})", file=sys.stderr)
    print(out)
    return 0
