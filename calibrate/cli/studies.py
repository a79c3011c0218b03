"""What `calibrate loo` and `calibrate ablate` print: their tables (also for `resume` and
`export` of a study), and `calibrate export` of a study."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from calibrate.cli.common import fmt_duration, fmt_f, writable

if TYPE_CHECKING:
    from calibrate.runs.study_result import AblationResult, LooResult

# ----------------------------------------------------------------------------------------------
# Tables


def _console():
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 160)


def _pm(f: float | None, noise: float | None) -> str:
    from calibrate.study_export import fmt

    return "–" if f is None else f"{fmt(f)} %" + ("" if noise is None else f" ± {fmt(noise)}")


def print_loo(result: LooResult, run_dir: Path, exported: Path | None) -> None:
    from rich.table import Table

    from calibrate.study_export import PAPER_LOO_PCT, fmt, params_text

    console = _console()
    share = result.sharing
    per_link = ", ".join(f"{n} {link}" for link, n in share.evaluations.items())
    table = Table(title=f"leave-one-out of {result.head.target}: {share.folds} folds over "
                        f"{result.head.evaluations} shared evaluations ({per_link}), "
                        f"{fmt_duration(result.head.wall_s)}", title_justify="left")
    for column in ("held out", "link", "held-out f", "tput err %", "p95 err %", "in-sample f",
                   "emulator (fitted without it)"):
        table.add_column(column)
    for fold in result.folds:
        held, ins = fold.held_out, fold.in_sample
        if held is None or ins is None:
            table.add_row(fold.fold, "–", "–", "–", "–", "–", fold.failed or "–")
            continue
        if fold.failed:
            shown = "failed"
        else:
            shown = _pm(held.f, held.noise)
        table.add_row(fold.fold, fold.link, shown, fmt(held.errors_pct["tput"]),
                      fmt(held.errors_pct["delay"]), _pm(ins.f, ins.noise),
                      params_text(fold.params or {}))
    h, i = result.held_out, result.in_sample
    table.add_section()
    table.add_row(f"mean ({h.n})", "", _pm(h.mean, None), "", "", _pm(i.mean, None), "")
    table.add_row("median", "", _pm(h.median, None), "", "", _pm(i.median, None), "")
    console.print(table)
    for fold in result.folds:
        if fold.failed and fold.held_out:
            console.print(f"fold {fold.fold}: the held-out scheme did not run at its emulator "
                          f"({fold.failed}); not averaged", highlight=False)
    saved = share.saved
    pct = 100 * saved / share.independent_scheme_runs if share.independent_scheme_runs else 0.0
    console.print(f"sharing: {share.scheme_runs} scheme runs made; independent folds would have "
                  f"made {share.independent_scheme_runs} (each fold's own evaluations of its "
                  f"{share.folds - 1} schemes, and its held-out scheme at its emulator, "
                  f"{share.replicates} replicates each): {saved} saved ({pct:.0f} %)",
                  highlight=False)
    console.print(f"the Pantheon paper: calibrated without it, an emulator predicted the held-out "
                  f"scheme within about {PAPER_LOO_PCT:.0f} %", highlight=False)
    console.print(f"run directory: {run_dir}" + (f"; export: {exported} (loo.csv, loo.json, "
                                                   f"loo.png, folds/)" if exported else ""),
                  highlight=False)


def print_ablation(result: AblationResult, run_dir: Path, exported: Path | None) -> None:
    from rich.table import Table

    from calibrate.study_export import fmt, params_text

    console = _console()
    head = result.head
    table = Table(title=f"ablation of {head.target} (order {result.order_text}): {head.evaluations} "
                        f"evaluations, {fmt_duration(head.wall_s)}", title_justify="left")
    for column in ("step", "parameter added", "f", "noise", "change", "emulator", "evals",
                   "other candidates (f)"):
        table.add_column(column)
    best_step = result.best_step
    for s in result.steps:
        if s.f is None:
            table.add_row(str(s.step), "–", "–", "–", "–", "not evaluated", "0", "")
            continue
        change = "" if s.change is None else f"{s.change:+.1f}" + (" ▲" if s.rise else "")
        others = ", ".join(f"{t.adds} {fmt(t.f)}" for t in s.trials if not t.chosen and t.f is not None)
        mark = " *" if s.step == best_step else ""
        table.add_row(str(s.step) + mark, s.label or "", f"{fmt(s.f)} %", fmt_f(s.noise), change,
                      f"{s.link}: {params_text(s.params)}", str(s.all_evaluations), others)
    console.print(table)
    console.print(f"step 0 is the rate alone, the rest at the emulator's defaults: "
                  f"{result.defaults_text}; each next step starts from the previous one's best "
                  f"point (* = lowest f; ▲ = f rose by more than the two steps' measured noise, "
                  f"√(σ₁² + σ₂²))", highlight=False)
    console.print("the Pantheon paper (Figure 5): China wired, rate only 211.8 % → + delay 189.7 % → "
                  "+ buffer 32.3 % → + loss 17.7 %; Colombia cellular, constant 23.7 % → Poisson "
                  "13.0 %", highlight=False)
    console.print(f"run directory: {run_dir}" + (f"; export: {exported} (ablation.csv, "
                                                   f"ablation.json, ablation.png, steps/)" if exported else ""),
                  highlight=False)


def export_command(args: argparse.Namespace, *, stem: str,
                   show: Callable[[dict[str, Any], Path, Path | None], None]) -> int:
    """`calibrate export RUN_DIR` of a study: its export (`stem`.json its result, as the export
    wrote it), printed with `show` (`calibrate.cli.export.presentations` gives both per kind)."""
    from calibrate.study_export import export_study

    if args.out is not None:  # before any work
        writable(args.out, "--out", directory=True)
    out = export_study(args.run_dir, args.out)
    result = json.loads((out / f"{stem}.json").read_text())
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return 0
    show(result, args.run_dir, out)
    return 0
