"""`calibrate run TARGET` and `calibrate resume RUN_DIR`: the main job, with a live display."""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from calibrate.cli.common import add_backend_options
from calibrate.cli.schemes import add_pantheon_options
from calibrate.cli.target import TARGET_HELP, _load, _source_options
from calibrate.errors import EnvironmentProblem, InputError
from calibrate.space import PARAMETERS


def register(subparsers: argparse._SubParsersAction) -> None:
    from calibrate.calibration import LINK_KINDS, RunConfig

    d = RunConfig(target="")
    run = subparsers.add_parser(
        "run", help="calibrate an emulator to a target (GP Bayesian optimization on Ray)",
        description="Find the emulator <rate, one-way delay, DropTail queue, uplink loss> that "
        "minimizes the Pantheon paper's replication error against TARGET, once with constant and "
        "once with Poisson deliveries, by running every scheme over candidate emulators in "
        "parallel on Ray; write the run directory and export the winner. Needs root.")
    evaluation_options(run)
    run.add_argument("--budget", type=int, default=d.budget,
                     help="evaluations per link kind (default: %(default)s)")
    run.add_argument("--optimizer", choices=("gpytorch", "skopt", "random"), default=d.optimizer,
                     help="GP with qLogNEI (BoTorch), scikit-optimize GP-EI, or random search "
                          "(default: %(default)s)")
    run.add_argument("--links", default=",".join(LINK_KINDS), metavar="KINDS",
                     help="link kinds to search, each its own search (default: %(default)s)")
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
    _ray_options(run)
    run.set_defaults(func=_run)

    resume = subparsers.add_parser(
        "resume", help="continue a calibration after a crash, Ctrl-C or kill -9",
        description="Continue the calibration in RUN_DIR: finished evaluations are kept (the "
        "optimizers are rebuilt from the journal); candidates that were running are proposed again.")
    resume.add_argument("run_dir", metavar="RUN_DIR", type=Path)
    _ray_options(resume)
    resume.set_defaults(func=_resume)


def evaluation_options(parser: argparse.ArgumentParser) -> None:
    """TARGET and how one evaluation runs and is scored (`run` and `score`)."""
    from calibrate.calibration import RunConfig

    d = RunConfig(target="")
    parser.add_argument("target", metavar="TARGET", help=TARGET_HELP)
    parser.add_argument("--schemes", metavar="A,B", help="target schemes to score (labels or "
                        "names; default: every one this host runs)")
    parser.add_argument("--runtime", type=float, default=d.runtime_s, metavar="S",
                        help="seconds per scheme run, Pantheon's -t (default: %(default)s)")
    parser.add_argument("--replicates", type=int, default=d.replicates, metavar="K",
                        help="runs of each scheme per evaluation (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=d.seed,
                        help="seed of traces, losses and the optimizers (default: %(default)s)")
    parser.add_argument("--aggregate", choices=("mean", "median"), default=d.aggregate,
                        help="the target's per-scheme aggregate (default: %(default)s)")
    parser.add_argument("--include-loss", action="store_true",
                        help="add the loss error to f (reported either way)")
    add_pantheon_options(parser)
    add_backend_options(parser)
    _source_options(parser)


def _ray_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Ray")
    group.add_argument("--address", help="join this Ray cluster (env RAY_ADDRESS); default: start "
                                         "an embedded one on this host")
    group.add_argument("--slots", type=int, metavar="N",
                       help="embedded Ray only: engines at once (default: 4 per core)")
    group.add_argument("--quiet", action="store_true", help="no live display; one line per evaluation")


# ----------------------------------------------------------------------------------------------
# Options -> settings


def _assignments(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in PARAMETERS:
            raise InputError(f"--{what} {item!r}: expected NAME=VALUE with NAME one of "
                             f"{', '.join(PARAMETERS)}")
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
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(target.rstrip("/")).name or "target").strip("-")
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path("runs") / f"{stem or 'target'}-{stamp}"


def _settings(args: argparse.Namespace):
    from calibrate.evaluation import RaySettings

    if args.slots is not None and args.slots < 1:
        raise InputError(f"--slots must be at least 1, got {args.slots}")
    return RaySettings(address=args.address, slots=args.slots)


# ----------------------------------------------------------------------------------------------
# The display


def _fmt_f(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.1f} %"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


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

    def __enter__(self) -> "Display":
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.live.__exit__(*exc)

    def __call__(self, info: Any) -> None:
        for record in info.latest:
            line = (f"{record['link']:>8} #{record['n']:<3} f = {record['f']:6.1f} %  "
                    f"(noise {_fmt_f(record['noise'])})  {record['emulator']}")
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
            table.add_row(link, f"{done}/{info.budget}", _fmt_f(info.best.get(link)), state,
                          "–" if ranges is None else ranges.text())
        table.caption = (f"{info.running_tasks} runs on {info.running_candidates} candidates in "
                         f"flight · elapsed {_duration(info.elapsed_s)} · ETA {_duration(info.eta_s)}")
        return table


def print_result(result: dict[str, Any], run_dir: Path, exported: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    from calibrate.ranges import Ranges

    console = Console(width=None if sys.stdout.isatty() else 160)
    table = Table(title=f"calibration of {result['target']}: {result['evaluations']} evaluations, "
                        f"{_duration(result['wall_s'])}", title_justify="left")
    for column in ("link kind", "f", "noise", "rate Mbit/s", "delay ms", "queue pkts", "loss %",
                   "evals", "stopped"):
        table.add_column(column)
    for link, v in result["links"].items():
        if "f" not in v:
            table.add_row(link, "–", "–", "–", "–", "–", "–", "0", str(v.get("stopped")))
            continue
        p = v["params"]
        mark = " *" if link == result["winner"] else ""
        table.add_row(link + mark, _fmt_f(v["f"]), _fmt_f(v["noise"]), f"{p['rate']:.2f}",
                      f"{p['delay']:.0f}", f"{p['queue']:.0f}", f"{100 * p['loss']:.3f}",
                      str(v["evaluations"]), str(v["stopped"]))
    console.print(table)
    for link, v in result["links"].items():
        if "f" in v:
            console.print(f"{link}: {Ranges.from_json(v).sentence()}", highlight=False)
    best = result.get("best")
    if best:
        console.print(scheme_rows(best["schemes"],
                                  f"per scheme, {result['winner']} (* = winner): real vs emulated"))
        console.print(f"emulator: {best['emulator']}", highlight=False)
    if result.get("dropped"):
        console.print(f"not scored: {', '.join(result['dropped'])} (reasons in run.json)",
                      highlight=False)
    console.print(f"run directory: {run_dir}" + (f"; export: {exported}" if exported else ""),
                  highlight=False)


def scheme_rows(schemes: list[dict[str, Any]], title: str):
    """The per-scheme real-vs-emulated table (rows of `calibration.scheme_table`)."""
    from rich.table import Table

    rows = Table(title=title, title_justify="left")
    for column in ("scheme", "flow", "tput real", "tput emu", "p95 real", "p95 emu",
                   "loss real %", "loss emu %", "error %"):
        rows.add_column(column)
    for s in schemes:
        real, emu = s["real"], s["emulated"] or {}
        err = s["error_pct"]
        rows.add_row(s["scheme"], s["flow"], f"{real['tput']:.2f}", _num(emu.get("tput"), 2),
                     f"{real['delay']:.1f}", _num(emu.get("delay"), 1),
                     f"{100 * real['loss']:.2f}", _num(emu.get("loss"), 2, 100),
                     f"{(err['tput'] + err['delay']) / 2:.1f}")
    return rows


def _num(value: float | None, digits: int, scale: float = 1.0) -> str:
    return "–" if value is None else f"{value * scale:.{digits}f}"


# ----------------------------------------------------------------------------------------------
# Commands


def require_root() -> None:
    if os.geteuid() != 0:
        raise EnvironmentProblem("calibration runs emulators in network namespaces, which needs "
                                 "root (CAP_NET_ADMIN); run calibrate as root")


def _calibrate(calibration: Any, args: argparse.Namespace) -> int:
    from calibrate.evaluation import Evaluator
    from calibrate.export import export

    console_note = sys.stderr
    require_root()
    problem = calibration.problem
    print(f"calibrate: {calibration.run_dir}: {len(problem.schemes)} schemes scored "
          f"({', '.join(problem.schemes)}), links {', '.join(calibration.searches)}, budget "
          f"{calibration.config.budget} each, {calibration.config.replicates} replicates of "
          f"{calibration.config.runtime_s:g} s; starting Ray", file=console_note)
    unknown = [label for label, why in problem.dropped.items() if why.startswith("unknown scheme")]
    if unknown:
        print(f"calibrate: not scored, no implementation on this host (see `calibrate schemes`): "
              f"{', '.join(unknown)}", file=console_note)
    for label, why in problem.dropped.items():
        if label not in unknown:
            print(f"calibrate: not scored: {label}: {why}", file=console_note)
    started = time.monotonic()
    with Evaluator(_settings(args)) as evaluator, Display(live=not args.quiet) as display:
        print(f"calibrate: Ray up in {time.monotonic() - started:.0f} s, {evaluator.slots} emulator "
              f"slots", file=console_note)
        result = calibration.run(evaluator, display)
    exported = export(calibration.run_dir)
    print_result(result, calibration.run_dir, exported)
    return 0


def run_config(args: argparse.Namespace, **search: Any):
    """RunConfig from `evaluation_options` (plus a search's own settings)."""
    from calibrate.calibration import RunConfig

    schemes = tuple(s.strip() for s in (args.schemes or "").split(",") if s.strip())
    return RunConfig(target=args.target, schemes=schemes, runtime_s=args.runtime,
                     replicates=args.replicates, seed=args.seed, aggregate=args.aggregate,
                     include_loss=args.include_loss,
                     pantheon_dir=None if args.pantheon_dir is None else str(args.pantheon_dir.resolve()),
                     pantheon_python=args.pantheon_python, backend=args.backend,
                     mahimahi_user=args.mahimahi_user, **search)


def _run(args: argparse.Namespace) -> int:
    from calibrate.calibration import Calibration

    links = tuple(k.strip() for k in args.links.split(",") if k.strip())
    config = run_config(args, budget=args.budget, optimizer=args.optimizer, links=links,
                        time_limit_s=args.time_limit, n_initial=args.n_initial,
                        fixed=parse_fixed(args.fix), bounds=parse_bounds(args.bound))
    target = _load(args)
    run_dir = args.out or default_run_dir(args.target)
    return _calibrate(Calibration.start(run_dir, config, target), args)


def _resume(args: argparse.Namespace) -> int:
    from calibrate.calibration import Calibration

    return _calibrate(Calibration.open(args.run_dir), args)
