"""`calibrate run TARGET` and `calibrate resume RUN_DIR`, and what every command that makes a run
(`run`, `loo`, `ablate`) shares: its search options, the live display, and one path from the
run directory to the printed table (`start`, `execute`) for a run of any kind."""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from calibrate.cli.common import (
    add_evaluation_options,
    add_ray_options,
    dropped_lines,
    fmt_duration,
    fmt_f,
    load_target_of,
    ray_settings,
    requested_links,
    require_root,
    run_config,
    workload_text,
)
from calibrate.errors import CalibrateError

if TYPE_CHECKING:  # the run layer (and Ray) is imported when a command runs, not to parse options
    from rich.table import Table

    from calibrate.evaluation import RaySettings
    from calibrate.runs.config import RunConfig
    from calibrate.runs.controller import Run
    from calibrate.runs.progress import ProgressInfo
    from calibrate.targets.model import Target


def register(subparsers: argparse._SubParsersAction) -> None:
    add_run_command(
        subparsers, "run", _run, per="link kind",
        help="calibrate an emulator to a target (GP Bayesian optimization on Ray)",
        description="Find the emulator <rate, one-way delay, DropTail queue, uplink loss> that "
        "minimizes the Pantheon paper's replication error against TARGET, once with constant and "
        "once with Poisson deliveries, by running every scheme over candidate emulators in "
        "parallel on Ray; write the run directory and export the winner. Needs root.",
        links_help="link kinds to search, each its own search (default: the kind the target's "
                   "link logs show, else both)")

    resume = subparsers.add_parser(
        "resume", help="continue a calibration after a crash, Ctrl-C or kill -9",
        description="Continue the calibration in RUN_DIR: finished evaluations are kept (the "
        "optimizers are rebuilt from the journal); candidates that were running are proposed again.")
    resume.add_argument("run_dir", metavar="RUN_DIR", type=Path,
                        help="the run directory of an interrupted `calibrate run`, `loo` or `ablate` "
                             "(their --out; by default runs/<target>-<UTC time>)")
    add_ray_options(resume)
    resume.set_defaults(func=_resume)


def add_run_command(subparsers: argparse._SubParsersAction, name: str,
                    func: Callable[[argparse.Namespace], int], *, help: str, description: str,
                    per: str = "search", links_help: str, fix: bool = True) -> argparse.ArgumentParser:
    """A command that starts a run of some kind (`run`, `loo`, `ablate`): TARGET and how one
    evaluation runs (`add_evaluation_options`), the search's options, Ray's."""
    parser = subparsers.add_parser(name, help=help, description=description)
    add_evaluation_options(parser)
    add_search_options(parser, per=per, links_help=links_help, fix=fix)
    add_ray_options(parser)
    parser.set_defaults(func=func)
    return parser


def add_search_options(parser: argparse.ArgumentParser, *, per: str, links_help: str,
                       fix: bool = True) -> None:
    """The search's options of `run`, `loo` and `ablate` (`calibrate.runs.options.SEARCH`): the
    budget of each search (`per` names one), the optimizer, the link kinds, the time limit, the
    design, fixed parameters (unless not `fix`) and bounds; and the run directory."""
    from calibrate.runs.config import LINK_KINDS
    from calibrate.runs.options import SEARCH, add_arguments

    add_arguments(parser, [name for name in SEARCH if fix or name != "fix"],
                  helps={"budget": f"evaluations per {per}",
                         "links": f"of {','.join(LINK_KINDS)}: {links_help}"})
    parser.add_argument("--out", type=Path, metavar="RUN_DIR",
                        help="run directory (default: runs/<target>-<UTC time>, a study's with its "
                             "command: runs/<target>-loo-<UTC time>)")


def search_config(args: argparse.Namespace, links: tuple[str, ...]) -> RunConfig:
    """The RunConfig `add_evaluation_options` and `add_search_options` give, for `links`."""
    from calibrate.runs.options import SEARCH

    return run_config(args, *(name for name in SEARCH if name != "links" and hasattr(args, name)), links=links)


def default_run_dir(target: str, command: str | None = None) -> Path:
    """runs/<target>-<UTC time>; a study's with the command that makes it, e.g.
    runs/<target>-loo-<UTC time>."""
    from calibrate.targets.load import BUNDLED_PREFIX

    name = Path(target.removeprefix(BUNDLED_PREFIX).rstrip("/")).name or "target"
    if command:
        name = f"{name}-{command}"
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path("runs") / f"{stem or 'target'}-{stamp}"


# ----------------------------------------------------------------------------------------------
# The display


class Display:
    """Live table on a terminal, a row per search; one line per finished evaluation otherwise
    (or with --quiet).  A calibration's searches are its link kinds."""

    def __init__(self, live: bool, title: str = "calibration", column: str = "link kind") -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.title, self.column = title, column
        self.live = None
        if live and self.console.is_terminal:
            from rich.live import Live

            self.live = Live(console=self.console, refresh_per_second=2, transient=False)

    @classmethod
    def of(cls, run: Run, live: bool) -> Display:
        return cls(live, run.noun, run.search_noun)

    def __enter__(self) -> Display:
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self.live:
            self.live.__exit__(exc_type, exc, traceback)

    def __call__(self, info: ProgressInfo) -> None:
        for record in info.latest:
            line = (f"{record.search:>8} #{record.n:<3} f = {record.f:6.1f} %  "
                    f"(noise {fmt_f(record.noise)})  {record.emulator}")
            if self.live:
                self.live.console.print(line, highlight=False, soft_wrap=True)
            else:
                self.console.print(line, highlight=False, soft_wrap=True)
        if self.live:
            self.live.update(self._table(info))

    def _table(self, info: ProgressInfo) -> Table:
        from rich.table import Table

        table = Table(title=self.title, title_justify="left")
        for column in (self.column, "evaluations", "best f", "state", "indistinguishable from the best"):
            table.add_column(column)
        for name, done in info.done.items():
            state = info.stopped.get(name) or ("refining" if info.refining.get(name) else "searching")
            ranges = info.ranges.get(name)
            table.add_row(name, f"{done}/{info.budget}", fmt_f(info.best.get(name)), state,
                          "–" if ranges is None else ranges.text())
        table.caption = (f"{info.running_tasks} runs on {info.running_candidates} candidates in "
                         f"flight · elapsed {fmt_duration(info.elapsed_s)} · ETA {fmt_duration(info.eta_s)}")
        return table


# ----------------------------------------------------------------------------------------------
# Commands


def start(args: argparse.Namespace, command: str | None, kind: type[Run],
          configure: Callable[[Target], RunConfig], **options: Any) -> int:
    """Start a run of `kind` (`Run.start` with `options`): RUN_DIR (--out, or one named after
    the target and the `command` of a study) checked before the target is fetched, the settings
    `configure(target)` gives checked, then the directory claimed (its writer lock) while the
    run is created there and runs."""
    from calibrate.runs.journal import RunDir

    settings = ray_settings(args)
    run_dir = args.out or default_run_dir(args.target, command)
    RunDir.check_new(run_dir)  # before the target is fetched: names a writer running there
    target = load_target_of(args)
    config = configure(target)
    require_root()
    with RunDir.claim(run_dir, make=True):
        return execute(kind.start(run_dir, config, target, **options), args, settings)


def execute(run: Run, args: argparse.Namespace, settings: RaySettings) -> int:
    """Run (or continue) `run`, of any kind, to its end on Ray with the live display, export
    it and print its table; its run directory is claimed by the caller."""
    from calibrate.cluster.evaluator import Evaluator

    note = sys.stderr
    require_root()
    run.schemes()  # a scheme this host cannot run stops us here, before Ray starts
    config, problem, run_dir = run.config, run.problem, run.run_dir
    print(f"calibrate: {run_dir}: {run.title}, {workload_text(problem, config)} an evaluation, "
          f"links {', '.join(config.links)}, budget {config.budget} per {run.search_noun}; "
          "starting Ray", file=note)
    for line in dropped_lines(problem):
        print(line, file=note)
    started = time.monotonic()
    try:
        with Evaluator(settings) as evaluator, Display.of(run, live=not args.quiet) as display:
            print(f"calibrate: Ray up in {time.monotonic() - started:.0f} s, {evaluator.slots} "
                  f"emulator slots", file=note)
            result = run.run(evaluator, display)
    except KeyboardInterrupt as interrupt:
        interrupt.add_note(f"finished evaluations are kept; continue with `calibrate resume {run_dir}`")
        raise
    try:
        exported = _export(run, result)
    except Exception as error:  # the result first (it is in result.json too), then the error
        _show(run, result, None)
        if not isinstance(error, (CalibrateError, OSError)):
            raise
        why = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise CalibrateError(f"the {run.noun} is complete (above; {run_dir}/result.json) but its "
                             f"export failed: {why}; export it again with `calibrate export "
                             f"{run_dir}`") from None
    _show(run, result, exported)
    return 0


def _export(run: Run, result: dict[str, Any]) -> Path:
    from calibrate.cli.export import presentations

    return presentations()[run.kind].export(run, result)


def _show(run: Run, result: dict[str, Any], exported: Path | None) -> None:
    from calibrate.cli.export import presentations

    presentations()[run.kind].show(result, run.run_dir, exported)


def _run(args: argparse.Namespace) -> int:
    from calibrate.runs.calibration import Calibration
    from calibrate.runs.problem import links_for

    requested = requested_links(args)
    return start(args, None, Calibration, lambda target: search_config(args, links_for(target, requested)))


def _resume(args: argparse.Namespace) -> int:
    """`calibrate resume RUN_DIR` of a run of any kind, its directory claimed while it runs."""
    from calibrate.runs.journal import RunDir
    from calibrate.runs.kinds import kind_of

    kind = kind_of(args.run_dir)
    settings = ray_settings(args)
    with RunDir.claim(args.run_dir):  # refused while another process writes it
        return execute(kind.open(args.run_dir), args, settings)
