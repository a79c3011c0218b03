"""`calibrate emulate`: Pantheon-style scripted runs (as its test.py) of schemes over an
emulator, written in Pantheon's data-dir layout, with a per-scheme table at the end."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from calibrate.cli.common import (
    add_backend_options,
    add_pantheon_options,
    backend_from,
    old_spelling,
    registry_from,
)
from calibrate.emulator import EmulatorConfig
from calibrate.errors import InputError
from calibrate.metrics import TOTAL, Aggregate, aggregate
from calibrate.scripted import MAX_RUNTIME_S, Experiment, RunOutcome, check_workload, metadata, prepare_data_dir
from calibrate.targets.model import Workload

# Files of Pantheon's layout that --overwrite may remove (and nothing else).
_PANTHEON_FILE = re.compile(r"^(pantheon_metadata\.json|pantheon_perf\.json|"
                            r".+_(datalink|acklink|stats|engine)_run\d+\.(log|json))$")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "emulate", help="run schemes over an emulator like Pantheon's test.py",
        description="Run congestion-control schemes over an emulated path exactly as Pantheon's "
                    "test.py does (first sides, 3 s of setup, second sides `interval` apart, stop "
                    "at `runtime`), one engine instance per scheme and run, and write Pantheon's "
                    "data-dir layout (logs, stats logs, pantheon_metadata.json, pantheon_perf.json). "
                    "Needs root.")
    parser.add_argument("--emulator", required=True, metavar="EMU",
                        help="Mahimahi command line (mm-delay 20 mm-link 12mbps.trace 12mbps.trace "
                             "--uplink-queue=droptail --uplink-queue-args=packets=100) or Pantheon "
                             "test.py arguments")
    parser.add_argument("--schemes", required=True, metavar="A,B|all",
                        help="scheme names or Pantheon labels (default_tcp, quic, vegas, ...), "
                             "comma-separated, or `all` (every available scheme); see `calibrate schemes`")
    parser.add_argument("--runtime", "-t", type=float, default=30.0, metavar="S",
                        help=f"seconds from the first second side to the stop, <= {MAX_RUNTIME_S:g} "
                             "(default: 30)")
    parser.add_argument("--flows", "-f", type=int, default=1, metavar="F",
                        help="flows per run (default: 1)")
    parser.add_argument("--interval", type=float, default=0.0, metavar="I",
                        help="seconds between flow starts; (flows-1) x interval <= runtime (default: 0)")
    parser.add_argument("--replicates", type=int, default=1, metavar="N",
                        help="runs per scheme, Pantheon's --run-times (default: 1)")
    old_spelling(parser, "--run-times", "--replicates", "replicates", type=int, metavar="N")
    parser.add_argument("--start-run-id", type=int, default=1, metavar="ID", help="first run id (default: 1)")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="the data directory to write, in Pantheon's layout (required)")
    old_spelling(parser, "--data-dir", "--out", "out", type=Path, metavar="DIR")
    parser.add_argument("--overwrite", action="store_true",
                        help="remove Pantheon files already in --out first (otherwise refuse)")
    parser.add_argument("--random-order", action="store_true",
                        help="shuffle the scheme order once (seeded by --seed), as test.py does")
    parser.add_argument("--parallel", type=int, default=1, metavar="K",
                        help="engine instances running at once (default: 1); keep K x (endpoints' CPU) "
                             "within the host's cores, or the schemes are measured CPU-starved")
    parser.add_argument("--seed", type=int, default=0, metavar="S",
                        help="seed of Poisson traces, the random order and the losses (default: 0)")
    parser.add_argument("--json", action="store_true",
                        help="print the runs and per-scheme means as JSON on stdout instead of tables")
    add_pantheon_options(parser)
    add_backend_options(parser)
    parser.set_defaults(func=run)
    _one_line_errors(parser)


def _one_line_errors(parser: argparse.ArgumentParser) -> None:
    """argparse prints the whole usage before its error; one line that says what to do is enough."""
    def error(message: str) -> NoReturn:
        print(f"{parser.prog}: error: {message} (see {parser.prog} --help)", file=sys.stderr)
        sys.exit(2)
    # argparse has no hook for its error line: replace the method on this one parser
    parser.error = error  # type: ignore[method-assign]


def _experiment(args: argparse.Namespace) -> Experiment:
    """Every argument checked before anything runs."""
    if args.out is None:
        raise InputError("give --out DIR: the data directory to write the runs to, in Pantheon's "
                         "layout")
    workload = Workload(args.flows, args.interval, args.runtime, args.replicates)
    check_workload(workload)
    if args.start_run_id < 1:
        raise InputError(f"--start-run-id must be >= 1, got {args.start_run_id}")
    if args.parallel < 1:
        raise InputError(f"--parallel must be >= 1, got {args.parallel}")
    if args.seed < 0:
        raise InputError(f"--seed must be >= 0, got {args.seed}")
    emulator = EmulatorConfig.parse(args.emulator, trace_seed=args.seed)
    emulator.check_trace_files()
    backend = backend_from(args)
    schemes = registry_from(args).select(args.schemes)
    data_dir = prepare_data_dir(args.out)  # the first write: every input is checked by now
    existing = sorted(p for p in data_dir.iterdir() if _PANTHEON_FILE.match(p.name))
    if existing and not args.overwrite:
        raise InputError(f"--out {data_dir} already holds Pantheon results ({existing[0].name}, "
                         f"{len(existing)} files); choose an empty directory or pass --overwrite")
    for path in existing:
        path.unlink()
    return Experiment(emulator, tuple(schemes), workload, data_dir, args.random_order, args.seed,
                      args.parallel, args.start_run_id, backend)


def run(args: argparse.Namespace) -> int:
    from calibrate.scripted import run_experiment

    experiment = _experiment(args)
    err = Console(stderr=True)
    runs = experiment.runs()
    err.print(f"emulator: {experiment.emulator.mahimahi_command()}  ({experiment.emulator.describe()})")
    err.print("schemes: " + ", ".join(label if label == s.name else f"{label} -> {s.name}"
                                      for label, s in experiment.schemes)
              + f"; {len(runs)} runs of {experiment.workload.runtime_s + 3:g} s, {experiment.parallel} at a time")
    spinning = [s.name for _, s in experiment.schemes if s.busy_wait]
    cores, flows = os.cpu_count() or 1, experiment.workload.flows
    if spinning and min(experiment.parallel, len(runs)) * flows > cores:
        err.print(f"warning: {', '.join(spinning)} spin on a core per sender between sends, as their "
                  f"upstream's UDT did: {experiment.parallel} runs at once of {flows} flow(s) need "
                  f"more than this host's {cores} cores, so those runs are measured CPU-starved; "
                  f"use --parallel {max(1, cores // flows)}")
    running: dict[tuple[str, int], None] = {}
    lock = threading.Lock()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=False) as progress:
        task = progress.add_task("starting", total=len(runs))

        def on_event(event: str, cc: str, run_id: int, outcome: RunOutcome | None) -> None:
            with lock:
                if event == "start":
                    running[(cc, run_id)] = None
                else:
                    running.pop((cc, run_id), None)
                    if outcome is not None and not outcome.valid:
                        progress.console.print(f"[yellow]{cc} run {run_id}: invalid: "
                                               f"{outcome.validity.reason}[/yellow]")
                now = ", ".join(f"{c} run {r}" for c, r in running)
                progress.update(task, description=f"running {now}" if now else "all runs done",
                                advance=1 if event == "done" else 0)

        outcomes = run_experiment(experiment, on_event)

    summary = summarize(outcomes, [label for label, _ in experiment.schemes])
    invalid = [o for o in outcomes if not o.valid]
    if args.json:
        print(json.dumps({"data_dir": str(experiment.data_dir), "metadata": metadata(experiment),
                          "summary": summary, "runs": [o.to_json() for o in outcomes]}, indent=2))
    else:
        _print_table(experiment, summary)
        for o in invalid:
            err.print(f"[yellow]{o.cc} run {o.run_id} invalid: {o.validity.reason}[/yellow]")
        err.print(f"data dir: {experiment.data_dir}")
    if invalid:
        err.print(f"calibrate: {len(invalid)} of {len(outcomes)} runs invalid (reasons above); the "
                  "valid ones are in the data dir")
        return 4
    return 0


def summarize(outcomes: Sequence[RunOutcome], labels: Sequence[str]) -> dict[str, dict]:
    """Per scheme and flow, mean/median/std over valid runs (Pantheon's report uses the mean)."""
    out: dict[str, dict] = {}
    for label in labels:
        mine = [o for o in outcomes if o.cc == label]
        valid = [o.stats for o in mine if o.valid and o.stats is not None]
        flows: dict[str, dict[str, Aggregate]] = {}
        keys = sorted({k for stats in valid for k in stats.metrics()}, key=lambda k: (k != TOTAL, k))
        for key in keys:
            per_run = [stats.metrics().get(key) for stats in valid]
            flows[key] = {"tput": aggregate(m.throughput if m else None for m in per_run),
                          "delay": aggregate(m.delay if m else None for m in per_run),
                          "loss": aggregate(m.loss if m else None for m in per_run)}
        util = aggregate(stats.utilization for stats in valid)
        out[label] = {"scheme": mine[0].scheme if mine else None, "runs": len(mine), "valid_runs": len(valid),
                      "utilization": util.to_json(),
                      "flows": {k: {m: a.to_json() for m, a in v.items()} for k, v in flows.items()}}
    return out


def _fmt(value: float | None, scale: float = 1.0, digits: int = 2) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def _print_table(experiment: Experiment, summary: dict[str, dict]) -> None:
    w = experiment.workload
    per_flow = w.flows > 1  # one flow's row would repeat the total
    table = Table(title=f"{experiment.emulator.describe()}: mean over valid runs "
                        f"({w.flows} flow{'s' if per_flow else ''}, {w.runtime_s:g} s)")
    table.add_column("scheme")
    if per_flow:
        table.add_column("flow")
    for name in ("runs", "tput Mbit/s", "util %", "p95 delay ms", "loss %"):
        table.add_column(name, justify="right")
    for label, s in summary.items():
        shown = label if label == s["scheme"] else f"{label} ({s['scheme']})"
        flows = s["flows"] or {TOTAL: None}
        for key, m in flows.items():
            if key != TOTAL and not per_flow:
                continue
            first = key == TOTAL
            cells = [shown if first else ""] + ([key] if per_flow else [])
            cells.append(f"{s['valid_runs']}/{s['runs']}" if first else "")
            if m is None:
                cells += ["-"] * 4
            else:
                util = s["utilization"]["mean"] if first else None
                cells += [_fmt(m["tput"]["mean"]), _fmt(util, 100, 1), _fmt(m["delay"]["mean"], 1, 1),
                          _fmt(m["loss"]["mean"], 100, 2)]
            table.add_row(*cells)
    Console().print(table)
