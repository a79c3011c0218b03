"""`calibrate score TARGET --emulator EMU`: the replication error of one given emulator.

The question a researcher asks before (or instead of) a calibration: how well does this
emulator — a hand-set one, a published calibrated one, the winner of another run — reproduce
this target?  Every scheme of the target that runs here is run `--replicates` times over the
emulator on Ray, exactly as one evaluation of `calibrate run`, and scored with the same
objective (f, its noise and floor, the per-scheme table).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from calibrate.cli.common import (
    add_evaluation_options,
    add_ray_options,
    fmt_f,
    load_target_of,
    ray_settings,
    require_root,
    run_config,
    scheme_rows,
)


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
    parser.add_argument("--json", type=Path, metavar="FILE",
                        help="also write f, its terms and the per-scheme table to FILE")
    add_ray_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from calibrate.emulator import EmulatorConfig
    from calibrate.evaluation import Evaluator
    from calibrate.runs.config import host_schemes, problem_of, registry_of, scheme_table, score_emulator
    from calibrate.runs.journal import jsonable, write_atomic

    config = run_config(args)
    emulator = EmulatorConfig.parse(args.emulator, trace_seed=args.seed)
    target = load_target_of(args)
    registry = registry_of(config)
    problem = problem_of(target, config, registry)
    schemes = host_schemes(problem, registry)
    require_root()
    err = Console(stderr=True)
    err.print(f"calibrate: scoring {emulator.mahimahi_command()} against {args.target}: "
              f"{len(problem.schemes)} schemes ({', '.join(problem.schemes)}), "
              f"{config.replicates} replicates of {config.runtime_s:g} s", highlight=False)
    if problem.dropped:
        err.print(f"calibrate: not scored: {', '.join(problem.dropped)} (see `calibrate schemes`)",
                  highlight=False)

    def on_run(metrics, done: int, total: int) -> None:
        if not args.quiet:
            state = "ok" if metrics.valid else f"invalid: {metrics.reason}"
            err.print(f"  run {done}/{total}: {metrics.label} #{metrics.replicate} {state}",
                      highlight=False)

    started = time.monotonic()
    with Evaluator(ray_settings(args)) as evaluator:
        error = score_emulator(problem, config, schemes, evaluator, emulator, on_run)
    seconds = time.monotonic() - started
    table = scheme_table(error)
    console = Console(width=None if sys.stdout.isatty() else 160)
    console.print(scheme_rows(table, f"per scheme: real vs emulated ({args.target})"))
    console.print(f"f = {fmt_f(error.f)}  (noise {fmt_f(error.noise)}, floor {fmt_f(error.floor)}; "
                  f"throughput {error.throughput:.1f} %, delay {error.delay:.1f} %, loss "
                  f"{error.loss:.1f} %)  in {seconds:.0f} s", highlight=False)
    if args.json:
        write_atomic(args.json, jsonable({
            "format": "calibrate-score", "target": args.target,
            "emulator": emulator.mahimahi_command(), "config": config.to_json(),
            "f": error.f, "noise": error.noise, "floor": error.floor,
            "errors_pct": {"tput": error.throughput, "delay": error.delay, "loss": error.loss},
            "schemes": table, "penalized": {str(k): v for k, v in error.penalized.items()},
            "dropped": dict(problem.dropped), "seconds": round(seconds, 3)}))
    return 0
