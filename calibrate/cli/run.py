"""`calibrate run TARGET` and `calibrate resume RUN_DIR`: the main job, with a live display."""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from calibrate.cli.common import (
    add_evaluation_options,
    add_ray_options,
    dropped_lines,
    fmt_duration,
    fmt_f,
    load_target_of,
    parse_links,
    print_result,
    ray_settings,
    require_root,
    run_config,
    workload_text,
)
from calibrate.errors import CalibrateError, InputError
from calibrate.space import PARAMETERS


def register(subparsers: argparse._SubParsersAction) -> None:
    from calibrate.runs.config import LINK_KINDS, RunConfig

    d = RunConfig(target="")
    run = subparsers.add_parser(
        "run", help="calibrate an emulator to a target (GP Bayesian optimization on Ray)",
        description="Find the emulator <rate, one-way delay, DropTail queue, uplink loss> that "
        "minimizes the Pantheon paper's replication error against TARGET, once with constant and "
        "once with Poisson deliveries, by running every scheme over candidate emulators in "
        "parallel on Ray; write the run directory and export the winner. Needs root.")
    add_evaluation_options(run)
    run.add_argument("--budget", type=int, default=d.budget,
                     help="evaluations per link kind (default: %(default)s)")
    run.add_argument("--optimizer", choices=("gpytorch", "skopt", "random"), default=d.optimizer,
                     help="GP with qLogNEI (BoTorch), scikit-optimize GP-EI, or random search "
                          "(default: %(default)s)")
    run.add_argument("--links", metavar="KINDS",
                     help=f"link kinds to search, each its own search, of {','.join(LINK_KINDS)} (default: "
                          "the kind the target's link logs show, else both)")
    run.add_argument("--time-limit", type=float, metavar="S",
                     help="stop proposing after this many seconds of calibration")
    run.add_argument("--n-initial", type=int, metavar="N",
                     help="size of the initial Sobol design after the warm start (default: 2 x dims, at most budget/4)")
    run.add_argument("--fix", action="append", default=[], metavar="NAME=VALUE",
                     help=f"fix a parameter ({', '.join(PARAMETERS)}), e.g. --fix loss=0; repeatable")
    run.add_argument("--bound", action="append", default=[], metavar="NAME=LO:HI",
                     help="override a parameter's search bounds, e.g. --bound queue=10:400; repeatable")
    run.add_argument("--out", type=Path, metavar="RUN_DIR",
                     help="run directory (default: runs/<target>-<UTC time>)")
    add_ray_options(run)
    run.set_defaults(func=_run)

    resume = subparsers.add_parser(
        "resume", help="continue a calibration after a crash, Ctrl-C or kill -9",
        description="Continue the calibration in RUN_DIR: finished evaluations are kept (the "
        "optimizers are rebuilt from the journal); candidates that were running are proposed again.")
    resume.add_argument("run_dir", metavar="RUN_DIR", type=Path,
                        help="the run directory of an interrupted `calibrate run`, `loo` or `ablate` "
                             "(their --out; by default runs/<target>-<UTC time>)")
    add_ray_options(resume)
    resume.set_defaults(func=_resume)


# ----------------------------------------------------------------------------------------------
# Options -> settings


def _assignments(items: list[str], what: str) -> dict[str, str]:
    form = {"fix": "NAME=VALUE, e.g. --fix loss=0", "bound": "NAME=LO:HI, e.g. --bound queue=10:400"}[what]
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep:
            raise InputError(f"--{what} {item!r}: expected {form}")
        if name not in PARAMETERS:
            raise InputError(f"--{what} {item!r}: unknown parameter {name!r}; the parameters are "
                             f"{', '.join(PARAMETERS)} ({form})")
        out[name] = value.strip()
    return out


def _number(text: str, option: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InputError(f"{option}: {text!r} is not a number") from None


def parse_fixed(items: list[str]) -> dict[str, float]:
    return {k: _number(v, f"--fix {k}") for k, v in _assignments(items, "fix").items()}


def parse_bounds(items: list[str]) -> dict[str, tuple[float, float]]:
    out = {}
    for name, text in _assignments(items, "bound").items():
        lo, sep, hi = text.partition(":")
        if not sep:
            raise InputError(f"--bound {name}={text}: expected LO:HI, e.g. --bound {name}=1:10")
        low, high = _number(lo, f"--bound {name}"), _number(hi, f"--bound {name}")
        if not low < high:
            raise InputError(f"--bound {name}={text}: the low bound must be below the high one")
        out[name] = (low, high)
    return out


def default_run_dir(target: str) -> Path:
    from calibrate.targets.load import BUNDLED_PREFIX

    target = target.removeprefix(BUNDLED_PREFIX)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(target.rstrip("/")).name or "target").strip("-")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path("runs") / f"{stem or 'target'}-{stamp}"


# ----------------------------------------------------------------------------------------------
# The display


class Display:
    """Live table on a terminal; one line per finished evaluation otherwise (or with --quiet)."""

    def __init__(self, live: bool) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.live = None
        self.seen: dict[str, int] = {}
        if live and self.console.is_terminal:
            from rich.live import Live

            self.live = Live(console=self.console, refresh_per_second=2, transient=False)

    def __enter__(self) -> Display:
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self.live:
            self.live.__exit__(exc_type, exc, traceback)

    def __call__(self, info: Any) -> None:
        for record in info.latest:
            line = (f"{record['link']:>8} #{record['n']:<3} f = {record['f']:6.1f} %  "
                    f"(noise {fmt_f(record['noise'])})  {record['emulator']}")
            if self.live:
                self.live.console.print(line, highlight=False, soft_wrap=True)
            else:
                self.console.print(line, highlight=False, soft_wrap=True)
        if self.live:
            self.live.update(self._table(info))

    def _table(self, info: Any):
        from rich.table import Table

        table = Table(title="calibration", title_justify="left")
        for column in ("link kind", "evaluations", "best f", "state",
                       "indistinguishable from the best"):
            table.add_column(column)
        for link, done in info.done.items():
            state = info.stopped.get(link) or ("refining" if info.refining.get(link) else "searching")
            ranges = info.ranges.get(link)
            table.add_row(link, f"{done}/{info.budget}", fmt_f(info.best.get(link)), state,
                          "–" if ranges is None else ranges.text())
        table.caption = (f"{info.running_tasks} runs on {info.running_candidates} candidates in "
                         f"flight · elapsed {fmt_duration(info.elapsed_s)} · ETA {fmt_duration(info.eta_s)}")
        return table


# ----------------------------------------------------------------------------------------------
# Commands


def _calibrate(calibration: Any, args: argparse.Namespace, settings: Any) -> int:
    """Run (or continue) `calibration` to its end and export it; its run directory is claimed
    (`RunDir.claim`) by the caller."""
    from calibrate.evaluation import Evaluator
    from calibrate.export import export

    console_note = sys.stderr
    require_root()
    calibration.schemes()  # a scheme this host cannot run stops us here, before Ray starts
    problem = calibration.problem
    print(f"calibrate: {calibration.run_dir}: {workload_text(problem, calibration.config)} an evaluation, "
          f"links {', '.join(calibration.searches)}, budget {calibration.config.budget} each; starting Ray",
          file=console_note)
    for line in dropped_lines(problem):
        print(line, file=console_note)
    started = time.monotonic()
    try:
        with Evaluator(settings) as evaluator, Display(live=not args.quiet) as display:
            print(f"calibrate: Ray up in {time.monotonic() - started:.0f} s, {evaluator.slots} "
                  f"emulator slots", file=console_note)
            result = calibration.run(evaluator, display)
    except KeyboardInterrupt as interrupt:
        interrupt.add_note(f"finished evaluations are kept; continue with `calibrate resume "
                           f"{calibration.run_dir}`")
        raise
    try:
        exported = export(calibration.run_dir)
    except Exception as error:  # the result first (it is in result.json too), then the error
        print_result(result, calibration.run_dir, None)
        if not isinstance(error, (CalibrateError, OSError)):
            raise
        why = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise CalibrateError(f"the calibration is complete (above; {calibration.run_dir}/result.json) "
                             f"but its export failed: {why}; export it again with `calibrate "
                             f"export {calibration.run_dir}`") from None
    print_result(result, calibration.run_dir, exported)
    return 0


def _run(args: argparse.Namespace) -> int:
    from calibrate.runs.config import links_for
    from calibrate.runs.journal import RunDir
    from calibrate.runs.loop import Calibration

    requested = parse_links(args.links)
    settings = ray_settings(args)
    run_dir = args.out or default_run_dir(args.target)
    RunDir.check_new(run_dir)  # before the target is fetched: names a writer running there
    target = load_target_of(args)
    config = run_config(args, budget=args.budget, optimizer=args.optimizer, links=links_for(target, requested),
                        time_limit_s=args.time_limit, n_initial=args.n_initial,
                        fixed=parse_fixed(args.fix), bounds=parse_bounds(args.bound))
    require_root()
    # every input is checked by now, or by Calibration.start before it writes run.json
    with RunDir.claim(run_dir, make=True):
        return _calibrate(Calibration.start(run_dir, config, target), args, settings)


def _resume(args: argparse.Namespace) -> int:
    from calibrate.cli import command_for_kind
    from calibrate.runs.journal import CALIBRATION, RunDir
    from calibrate.runs.loop import Calibration

    kind = RunDir.open(args.run_dir, None).kind
    if kind != CALIBRATION:  # a study: its own command continues it
        return int(command_for_kind(kind).resume(args))
    settings = ray_settings(args)
    with RunDir.claim(args.run_dir):  # refused while another process writes it
        return _calibrate(Calibration.open(args.run_dir), args, settings)
