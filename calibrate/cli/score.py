"""`calibrate score TARGET --emulator EMU`: the replication error of one given emulator.

The question a researcher asks before (or instead of) a calibration: how well does this
emulator — a hand-set one, a published calibrated one, the winner of another run — reproduce
this target?  Every scheme of the target that runs here is run `--replicates` times over the
emulator on Ray, exactly as one evaluation of `calibrate run`, and scored with the same
objective (f, its noise and floor, the per-scheme table).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from calibrate.cli.common import (
    add_evaluation_options,
    add_ray_options,
    dropped_lines,
    fmt_f,
    load_target_of,
    ray_settings,
    require_root,
    run_config,
    scheme_rows,
    workload_text,
    writable,
)
from calibrate.errors import InputError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "score", help="the replication error of one given emulator against a target",
        description="Run every scheme of TARGET that runs here over the emulator EMU (on Ray, "
        "like one evaluation of `calibrate run`) and print the Pantheon paper's replication error "
        "f with its per-scheme table. Needs root.")
    add_evaluation_options(parser)
    parser.add_argument("--emulator", required=True, metavar="EMU",
                        help="Mahimahi command line (mm-delay 28 mm-loss uplink 0.004 mm-link "
                             "10mbps.trace 10mbps.trace --uplink-queue=droptail "
                             "--uplink-queue-args=packets=50), Pantheon test.py arguments, or the "
                             "`emulator` line of a calibration's result")
    parser.add_argument("--json", nargs="?", const=True, default=False, metavar="FILE",
                        help="print f, its terms and the per-scheme table as JSON on stdout instead "
                             "of tables (--json FILE: the former spelling of --json-out FILE)")
    parser.add_argument("--json-out", type=Path, metavar="FILE",
                        help="also write that JSON to FILE (checked before anything runs)")
    add_ray_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from calibrate.cluster.evaluator import Evaluator
    from calibrate.emulator import EmulatorConfig
    from calibrate.runs.evaluate import host_schemes, scheme_table, score_emulator
    from calibrate.runs.journal import jsonable, write_atomic
    from calibrate.runs.problem import problem_of, registry_of

    option = "--json-out"
    if isinstance(args.json, str):  # --json FILE, the former spelling of --json-out FILE
        print("calibrate: note: --json FILE is now spelled --json-out FILE (--json alone prints "
              "the JSON); the old spelling goes in a later release", file=sys.stderr)
        args.json_out, args.json, option = Path(args.json), False, "--json"
    # every input and the output are checked before Ray starts
    config = run_config(args)
    settings = ray_settings(args)
    out = None if args.json_out is None else writable(args.json_out, option)
    emulator = EmulatorConfig.parse(args.emulator, trace_seed=args.seed)
    emulator.check_trace_files()
    target = load_target_of(args)
    registry = registry_of(config)
    problem = problem_of(target, config, registry)
    schemes = host_schemes(problem, registry)
    require_root()
    err = Console(stderr=True)
    err.print(f"calibrate: scoring {emulator.mahimahi_command()} against {args.target}: "
              f"{workload_text(problem, config)}", highlight=False)
    for line in dropped_lines(problem):
        err.print(line, highlight=False)

    def on_run(metrics, done: int, total: int) -> None:
        if not args.quiet:
            state = "ok" if metrics.valid else f"invalid: {metrics.reason}"
            err.print(f"  run {done}/{total}: {metrics.label} #{metrics.replicate} {state}",
                      highlight=False)

    started = time.monotonic()
    with Evaluator(settings) as evaluator:
        error = score_emulator(problem, config, schemes, evaluator, emulator, on_run)
    seconds = time.monotonic() - started
    table = scheme_table(error)
    report = jsonable({
        "format": "calibrate-score", "target": args.target,
        "emulator": emulator.mahimahi_command(), "config": config.to_json(),
        "f": error.f, "noise": error.noise, "floor": error.floor,
        "errors_pct": {"tput": error.throughput, "delay": error.delay, "loss": error.loss},
        "schemes": table, "penalized": {str(k): v for k, v in error.penalized.items()},
        "dropped": dict(problem.dropped), "seconds": round(seconds, 3)})
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        console = Console(width=None if sys.stdout.isatty() else 160)
        console.print(scheme_rows(table, f"per scheme: real vs emulated ({args.target})"))
        console.print(f"f = {fmt_f(error.f)}  (noise {fmt_f(error.noise)}, floor {fmt_f(error.floor)}; "
                      f"throughput {error.throughput:.1f} %, delay {error.delay:.1f} %, loss "
                      f"{error.loss:.1f} %)  in {seconds:.0f} s", highlight=False)
    if out is not None:  # the result is printed above: an error here loses nothing
        try:
            write_atomic(out, report)
        except OSError as failure:
            raise InputError(f"the score is above, but {option} {out} could not be written "
                             f"({failure.strerror or failure})") from None
    return 0
