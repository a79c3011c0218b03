"""What `calibrate loo` and `calibrate ablate` share: their search options, the run with its live
display and export, and the tables they print (also for `resume` and `export` of a study)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from calibrate.cli.common import (
    dropped_lines,
    fmt_duration,
    fmt_f,
    load_target_of,
    parse_links,
    ray_settings,
    require_root,
    run_config,
    workload_text,
    writable,
)
from calibrate.cli.run import Display, default_run_dir, parse_bounds, parse_fixed
from calibrate.errors import CalibrateError


def add_search_options(parser: argparse.ArgumentParser, *, links_help: str, fix: bool = True) -> None:
    """`calibrate run`'s search options, as a study reads them."""
    from calibrate.runs.config import LINK_KINDS, RunConfig

    d = RunConfig(target="")
    parser.add_argument("--budget", type=int, default=d.budget,
                        help="evaluations per search (default: %(default)s)")
    parser.add_argument("--optimizer", choices=("gpytorch", "skopt", "random"), default=d.optimizer,
                        help="GP with qLogNEI (BoTorch), scikit-optimize GP-EI, or random search "
                             "(default: %(default)s)")
    parser.add_argument("--links", metavar="KINDS", help=f"of {','.join(LINK_KINDS)}: {links_help}")
    parser.add_argument("--time-limit", type=float, metavar="S",
                        help="stop proposing after this many seconds of the study")
    parser.add_argument("--n-initial", type=int, metavar="N",
                        help="size of each search's Sobol design after its warm start (default: 2 x "
                             "dims, at most budget/4)")
    if fix:
        parser.add_argument("--fix", action="append", default=[], metavar="NAME=VALUE",
                            help="fix a parameter, e.g. --fix loss=0; repeatable")
    parser.add_argument("--bound", action="append", default=[], metavar="NAME=LO:HI",
                        help="override a parameter's search bounds, e.g. --bound queue=10:400; repeatable")
    parser.add_argument("--out", type=Path, metavar="RUN_DIR",
                        help="run directory (default: runs/<target>-<kind>-<UTC time>)")


def study_config(args: argparse.Namespace, links: tuple[str, ...]):
    """The RunConfig of a study from its options."""
    return run_config(args, budget=args.budget, optimizer=args.optimizer, links=links,
                      time_limit_s=args.time_limit, n_initial=args.n_initial,
                      fixed=parse_fixed(getattr(args, "fix", [])), bounds=parse_bounds(args.bound))


def requested_links(args: argparse.Namespace) -> tuple[str, ...]:
    return parse_links(args.links)


def study_dir(args: argparse.Namespace, kind: str) -> Path:
    return Path(args.out) if args.out else default_run_dir(f"{args.target.rstrip('/')}-{kind}")


class StudyDisplay(Display):
    """The live display of `calibrate run`, a row per search of the study."""

    def _table(self, info: Any):
        from rich.table import Table

        table = Table(title="study", title_justify="left")
        for column in ("search", "evaluations", "best f", "state", "indistinguishable from the best"):
            table.add_column(column)
        for name, done in info.done.items():
            state = info.stopped.get(name) or ("refining" if info.refining.get(name) else "searching")
            ranges = info.ranges.get(name)
            table.add_row(name, f"{done}/{info.budget}", fmt_f(info.best.get(name)), state,
                          "–" if ranges is None else ranges.text())
        table.caption = (f"{info.running_tasks} runs on {info.running_candidates} candidates in "
                         f"flight · elapsed {fmt_duration(info.elapsed_s)} · ETA {fmt_duration(info.eta_s)}")
        return table


def start_study(args: argparse.Namespace, kind: str, make: Any) -> int:
    """Start a study as `calibrate run` starts a calibration: RUN_DIR checked before the target
    is fetched, every input checked, then the directory claimed (its writer lock) while
    `make(run_dir, target)` creates the study and it runs."""
    from calibrate.runs.journal import RunDir

    settings = ray_settings(args)
    run_dir = study_dir(args, kind)
    RunDir.check_new(run_dir)  # before the target is fetched: names a writer running there
    target = load_target_of(args)
    require_root()
    with RunDir.claim(run_dir, make=True):
        return run_study(make(run_dir, target), args, settings)


def resume_study(args: argparse.Namespace, cls: Any) -> int:
    """Continue a study (`calibrate resume RUN_DIR`), its directory claimed while it runs."""
    from calibrate.runs.journal import RunDir

    settings = ray_settings(args)
    with RunDir.claim(args.run_dir):  # refused while another process writes it
        return run_study(cls.open(args.run_dir), args, settings)


def run_study(study: Any, args: argparse.Namespace, settings: Any) -> int:
    """Run (or continue) a study on Ray with the live display, export it, print its table; its
    run directory is claimed by the caller."""
    from calibrate.evaluation import Evaluator
    from calibrate.study_export import export_study

    note = sys.stderr
    require_root()
    study.schemes()  # a scheme this host cannot run stops us here, before Ray starts
    config, problem = study.config, study.problem
    run_dir = study.directory.path
    print(f"calibrate: {run_dir}: {study.kind} study, {workload_text(problem, config)} an evaluation, "
          f"links {', '.join(config.links)}, budget {config.budget} per search; starting Ray", file=note)
    for line in dropped_lines(problem):
        print(line, file=note)
    started = time.monotonic()
    try:
        with Evaluator(settings) as evaluator, StudyDisplay(live=not args.quiet) as display:
            print(f"calibrate: Ray up in {time.monotonic() - started:.0f} s, {evaluator.slots} emulator "
                  f"slots", file=note)
            result = study.run(evaluator, display)
    except KeyboardInterrupt as interrupt:
        interrupt.add_note(f"finished evaluations are kept; continue with `calibrate resume {run_dir}`")
        raise
    try:
        exported = export_study(run_dir, study=study, result=result)
    except Exception as error:  # the result first (it is in result.json too), then the error
        print_study(result, run_dir, None)
        if not isinstance(error, (CalibrateError, OSError)):
            raise
        why = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise CalibrateError(f"the study is complete (above; {run_dir}/result.json) but its export "
                             f"failed: {why}; export it again with `calibrate export {run_dir}`") from None
    print_study(result, run_dir, exported)
    return 0


# ----------------------------------------------------------------------------------------------
# Tables


def _console():
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 160)


def _pm(f: float | None, noise: float | None) -> str:
    from calibrate.study_export import fmt

    return "–" if f is None else f"{fmt(f)} %" + ("" if noise is None else f" ± {fmt(noise)}")


def print_loo(result: dict[str, Any], run_dir: Path, exported: Path | None) -> None:
    from rich.table import Table

    from calibrate.study_export import PAPER_LOO_PCT, fmt, params_text

    console = _console()
    share = result["sharing"]
    per_link = ", ".join(f"{n} {link}" for link, n in share["evaluations"].items())
    table = Table(title=f"leave-one-out of {result['target']}: {share['folds']} folds over "
                        f"{result['evaluations']} shared evaluations ({per_link}), "
                        f"{fmt_duration(result['wall_s'])}", title_justify="left")
    for column in ("held out", "link", "held-out f", "tput err %", "p95 err %", "in-sample f",
                   "emulator (fitted without it)"):
        table.add_column(column)
    for fold in result["folds"]:
        held, ins = fold.get("held_out"), fold.get("in_sample")
        if not held:
            table.add_row(fold["fold"], "–", "–", "–", "–", "–", fold.get("failed") or "–")
            continue
        if fold.get("failed"):
            shown = "failed"
        else:
            shown = _pm(held["f"], held["noise"])
        table.add_row(fold["fold"], fold["link"], shown, fmt(held["errors_pct"]["tput"]),
                      fmt(held["errors_pct"]["delay"]), _pm(ins["f"], ins["noise"]),
                      params_text(fold["params"]))
    h, i = result["held_out"], result["in_sample"]
    table.add_section()
    table.add_row(f"mean ({h['n']})", "", _pm(h["mean"], None), "", "", _pm(i["mean"], None), "")
    table.add_row("median", "", _pm(h["median"], None), "", "", _pm(i["median"], None), "")
    console.print(table)
    for fold in result["folds"]:
        if fold.get("failed") and fold.get("held_out"):
            console.print(f"fold {fold['fold']}: the held-out scheme did not run at its emulator "
                          f"({fold['failed']}); not averaged", highlight=False)
    saved = share["saved"]
    pct = 100 * saved / share["independent_scheme_runs"] if share["independent_scheme_runs"] else 0.0
    console.print(f"sharing: {share['scheme_runs']} scheme runs made; independent folds would have "
                  f"made {share['independent_scheme_runs']} (each fold's own evaluations of its "
                  f"{share['folds'] - 1} schemes, and its held-out scheme at its emulator, "
                  f"{share['replicates']} replicates each): {saved} saved ({pct:.0f} %)",
                  highlight=False)
    console.print(f"the Pantheon paper: calibrated without it, an emulator predicted the held-out "
                  f"scheme within about {PAPER_LOO_PCT:.0f} %", highlight=False)
    console.print(f"run directory: {run_dir}" + (f"; export: {exported} (loo.csv, loo.json, "
                                                   f"loo.png, folds/)" if exported else ""),
                  highlight=False)


def print_ablation(result: dict[str, Any], run_dir: Path, exported: Path | None) -> None:
    from rich.table import Table

    from calibrate.study_export import fmt, params_text

    console = _console()
    order = result["order"] if isinstance(result["order"], str) else ",".join(result["order"])
    table = Table(title=f"ablation of {result['target']} (order {order}): {result['evaluations']} "
                        f"evaluations, {fmt_duration(result['wall_s'])}", title_justify="left")
    for column in ("step", "parameter added", "f", "noise", "change", "emulator", "evals",
                   "other candidates (f)"):
        table.add_column(column)
    for s in result["steps"]:
        if s.get("f") is None:
            table.add_row(str(s["step"]), "–", "–", "–", "–", "not evaluated", "0", "")
            continue
        change = "" if s.get("change") is None else f"{s['change']:+.1f}" + (" ▲" if s.get("rise") else "")
        others = ", ".join(f"{t['adds']} {fmt(t['f'])}" for t in s["trials"]
                           if not t["chosen"] and t.get("f") is not None)
        mark = " *" if s["step"] == result.get("best_step") else ""
        table.add_row(str(s["step"]) + mark, s["label"] + ("" if s["link"] == result["links"][0] else ""),
                      f"{fmt(s['f'])} %", fmt_f(s.get("noise")), change,
                      f"{s['link']}: {params_text(s.get('params'))}",
                      str(sum(t["evaluations"] for t in s["trials"])), others)
    console.print(table)
    console.print(f"step 0 is the rate alone, the rest at the emulator's defaults: "
                  f"{result.get('defaults_text')}; each next step starts from the previous one's best "
                  f"point (* = lowest f; ▲ = f rose by more than the two steps' measured noise, "
                  f"√(σ₁² + σ₂²))", highlight=False)
    console.print("the Pantheon paper (Figure 5): China wired, rate only 211.8 % → + delay 189.7 % → "
                  "+ buffer 32.3 % → + loss 17.7 %; Colombia cellular, constant 23.7 % → Poisson "
                  "13.0 %", highlight=False)
    console.print(f"run directory: {run_dir}" + (f"; export: {exported} (ablation.csv, "
                                                   f"ablation.json, ablation.png, steps/)" if exported else ""),
                  highlight=False)


def print_study(result: dict[str, Any], run_dir: Path, exported: Path | None) -> None:
    from calibrate.runs import loo

    (print_loo if result.get("kind") == loo.KIND else print_ablation)(result, run_dir, exported)


def export_command(args: argparse.Namespace) -> int:
    """`calibrate export RUN_DIR` of a study."""
    from calibrate.runs import loo
    from calibrate.runs.journal import RunDir
    from calibrate.study_export import export_study

    if args.out is not None:  # before any work
        writable(args.out, "--out", directory=True)
    stem = "loo" if RunDir.open(args.run_dir, None).kind == loo.KIND else "ablation"
    out = export_study(args.run_dir, args.out)
    result = json.loads((out / f"{stem}.json").read_text())
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return 0
    print_study(result, args.run_dir, out)
    return 0
