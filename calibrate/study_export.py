"""Exporting a study: its table (CSV, JSON), its figure, and every fitted emulator.

`export_study(RUN_DIR)` reads a leave-one-out or ablation run directory (`open_study`, read
only: the study is rebuilt from its journal, as a resume would) and writes RUN_DIR/export/
(or ``out``):

- leave-one-out: ``loo.json`` (result.json's content: per fold the emulator calibrated without
  the held-out scheme, its in-sample and held-out errors, the mean and median, what the shared
  evaluations saved), ``loo.csv`` (a row per fold), ``loo.png`` (`plot_loo`: per held-out
  scheme, held-out vs in-sample error), and ``folds/<scheme>/``: each fold's emulator exported
  as a calibration's (`calibrate.export.write_export`: emulator.json, the Mahimahi, Pantheon and
  engine commands with their traces, Figure 3 and convergence over the fold's f);
- ablation: ``ablation.json``, ``ablation.csv`` (a row per step), ``ablation.png``
  (`plot_ablation`: the paper's Figure 5, f per step), and ``steps/<k>-<parameter>/``: each
  step's emulator exported the same way.

The plots return their figure (and save it when given a path), so notebooks show them inline.
"""

from __future__ import annotations

import csv
import io
import math
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from calibrate.errors import InputError
from calibrate.export import EXPORT_DIR, LINK_COLORS, CalibrationRun, write_export
from calibrate.runs import ablation, loo
from calibrate.runs.controller import Run, Search
from calibrate.runs.journal import RunDir, jsonable, write_atomic
from calibrate.runs.kinds import kind_of
from calibrate.runs.result import CalibrationResult
from calibrate.runs.study_result import AblationResult

#: the Pantheon paper's numbers (§5; Figure 5) the tables are printed beside
PAPER_LOO_PCT = 20.0
PAPER_ABLATION = {
    "China wired (AWS Korea → China)": [("rate only", 211.8), ("+ delay", 189.7),
                                         ("+ queue (DropTail)", 32.3), ("+ loss", 17.7)],
    "Colombia cellular (AWS Brazil → Colombia)": [("constant deliveries", 23.7),
                                                   ("+ Poisson deliveries", 13.0)],
}



def open_study(run_dir: Path | str, *, read_only: bool = True) -> Run:
    """A leave-one-out or ablation study from its run directory, whatever its kind."""
    kind = kind_of(run_dir)
    if kind.kind not in STUDY_EXPORTS:
        raise InputError(f"{run_dir} holds a {kind.kind} run, not a study (leave-one-out or ablation)")
    return kind.open(run_dir, read_only=read_only)


def study_result(run_dir: Path | str) -> dict[str, Any]:
    """The study's result as result.json holds it (computed again from the journal when the
    study was interrupted)."""
    directory = RunDir.open(run_dir, None)
    saved = directory.read_result()
    if isinstance(saved, dict) and saved.get("evaluations") == len(directory.evaluations()):
        return saved
    return jsonable(open_study(run_dir).result())


# ----------------------------------------------------------------------------------------------
# Tables


def write_csv(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    buffer = io.StringIO()
    if rows:
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else (f"{v:.6g}" if isinstance(v, float) else v)
                             for k, v in row.items()})
    path.write_text(buffer.getvalue())


def fmt(value: float | None, digits: int = 1) -> str:
    return "–" if value is None or (isinstance(value, float) and not math.isfinite(value)) else f"{value:.{digits}f}"


def params_text(params: Mapping[str, float] | None) -> str:
    """rate, delay, queue, loss in a few characters."""
    if not params:
        return "–"
    queue = params["queue"]
    q = "∞" if queue >= ablation.DEFAULTS["queue"] else f"{queue:.0f}"
    return (f"{params['rate']:.2f} Mbit/s, {params['delay']:.0f} ms, {q} pkts, "
            f"{100 * params['loss']:.2f} % loss")


# ----------------------------------------------------------------------------------------------
# Figures


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _scale(ax, values: Sequence[float | None]) -> None:
    """A logarithmic axis (plain numbers) when the errors span more than a factor 20, as a
    rate-only model's or an unpredictable scheme's do."""
    from matplotlib.ticker import FuncFormatter

    positive = [v for v in values if v is not None and v > 0]
    if positive and max(positive) / min(positive) > 20:
        ax.set_yscale("log")
        plain = FuncFormatter(lambda v, _: f"{v:g}")
        ax.yaxis.set_major_formatter(plain)
        if max(positive) / min(positive) < 1000:  # few decades: label the 2s and 5s too
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if str(v)[0] in "25" else ""))


def plot_loo(result: Mapping[str, Any], out: Path | str | None = None):
    """Per held-out scheme: its held-out error (f of the scheme alone) beside the in-sample error
    of the same emulator (f over the schemes it was fitted on), with their noise; the mean
    held-out error and the paper's ~20 %.  Returns the figure; saves it to `out` if given."""
    folds = result["folds"]
    fig = _figure(max(6.0, 1.1 * len(folds) + 2), 4.8)
    ax = fig.add_subplot(1, 1, 1)
    xs = range(len(folds))
    width = 0.38
    for i, fold in enumerate(folds):
        held, ins = fold.get("held_out"), fold.get("in_sample")
        if ins:
            ax.bar(i + width / 2, ins["f"], width, yerr=ins.get("noise") or 0, color="tab:gray",
                   alpha=0.7, capsize=3, label="in-sample (fitted schemes)" if i == 0 else None)
        if held and not fold.get("failed"):
            ax.bar(i - width / 2, held["f"], width, yerr=held.get("noise") or 0, color="tab:red",
                   capsize=3, label="held-out scheme" if i == 0 else None)
            ax.text(i - width / 2, held["f"], f"{held['f']:.0f}", ha="center", va="bottom", fontsize=7)
        else:
            ax.text(i - width / 2, 0, "failed" if fold.get("failed") else "–", rotation=90,
                    ha="center", va="bottom", fontsize=8, color="tab:red")
    mean = result["held_out"]["mean"]
    if mean is not None:
        ax.axhline(mean, color="tab:red", linestyle="--", linewidth=1,
                   label=f"held-out mean {mean:.1f} % (median {result['held_out']['median']:.1f} %)")
    ax.axhline(PAPER_LOO_PCT, color="black", linestyle=":", linewidth=1,
               label=f"Pantheon paper: within about {PAPER_LOO_PCT:.0f} %")
    _scale(ax, [v for f in folds for v in ((f.get("held_out") or {}).get("f"),
                                          (f.get("in_sample") or {}).get("f"), PAPER_LOO_PCT)])
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f["fold"] for f in folds], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("replication error (%)")
    ax.set_xlabel("held-out scheme")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(textwrap.shorten(f"leave-one-out of {result['target']}", 80, placeholder=" …")
                 + f" ({result['evaluations']} shared evaluations)", fontsize=10)
    fig.tight_layout()
    if out is not None:
        fig.savefig(out, dpi=150)
    return fig


def plot_ablation(result: AblationResult | Mapping[str, Any], out: Path | str | None = None):
    """The paper's Figure 5: f of each step's model, with its noise, the nested steps in the
    first link kind's colour and the deliveries step in the other's; a greedy step's other
    candidates as open circles; a rise beyond the noise marked.  `result` is the ablation's, or
    its JSON (result.json, `study_result`).  Returns the figure; saves it to `out` if given."""
    if not isinstance(result, AblationResult):
        result = AblationResult.from_json(result)
    steps = [s for s in result.steps if s.f is not None]
    fig = _figure(max(5.5, 1.3 * len(steps) + 2), 4.8)
    ax = fig.add_subplot(1, 1, 1)
    for i, step in enumerate(steps):
        f = step.f or 0.0
        color = LINK_COLORS.get(step.link, "tab:gray")
        ax.bar(i, f, 0.6, yerr=step.noise or 0, color=color, capsize=3, alpha=0.85)
        ax.text(i, f, f"{f:.1f} %", ha="center", va="bottom", fontsize=8)
        others = [t for t in step.trials if not t.chosen and t.f is not None]
        for t in others:
            ax.scatter([i + 0.38], [t.f], facecolors="white", edgecolors=color, s=30, zorder=3)
            ax.annotate(t.adds, (i + 0.38, t.f), xytext=(4, 0), textcoords="offset points",
                        fontsize=7, va="center")
        if step.rise:
            ax.annotate("rise > noise", (i, f), xytext=(0, 14), textcoords="offset points",
                        ha="center", fontsize=8, color="tab:red")
    _scale(ax, [s.f for s in steps] + [t.f for s in steps for t in s.trials])
    ax.set_xticks(range(len(steps)))
    ax.set_xticklabels([s.label for s in steps], rotation=15, ha="right", fontsize=8)
    ax.set_ylabel("replication error f (%)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title(textwrap.shorten(f"ablation of {result.head.target} (order {result.order_text})", 90,
                                  placeholder=" …")
                 + f"\nstep 0: the rate; {result.defaults_text or ''}", fontsize=9)
    fig.tight_layout()
    if out is not None:
        fig.savefig(out, dpi=150)
    return fig


# ----------------------------------------------------------------------------------------------
# Writing


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", name).strip("_") or "x"


def _export_searches(study: Run, searches: Mapping[str, Search], calibration: Mapping[str, Any],
                     out: Path) -> Path:
    """One fitted emulator (searches by link kind, their calibration result) exported as a
    calibration's, with the records those searches were told (their f)."""
    search = next(iter(searches.values()))
    directory = study.directory.narrowed(replace(search.problem, space=search.space))
    records = sorted({r.index: r for s in searches.values() for r in s.records}.values(),
                     key=lambda r: r.index)
    run = CalibrationRun(directory, tuple(records), CalibrationResult.from_json(jsonable(calibration)),
                         f"the {study.kind} study's model, computed from its journal")
    return write_export(run, out)


def _export_loo(study: Run, result: Mapping[str, Any], out: Path
                ) -> tuple[str, list[dict[str, Any]], Callable[[Path], Any]]:
    """Each fold's emulator under folds/<scheme>/; the table and figure of the folds."""
    assert isinstance(study, loo.LeaveOneOut)
    for i, fold in enumerate(result["folds"]):
        if fold["calibration"].get("winner"):
            searches = {link: s[i] for link, s in study.by_link.items()}
            _export_searches(study, searches, fold["calibration"], out / "folds" / _safe(fold["fold"]))
    return "loo", loo.rows(result), partial(plot_loo, result)


def _export_ablation(study: Run, result: Mapping[str, Any], out: Path
                     ) -> tuple[str, list[dict[str, Any]], Callable[[Path], Any]]:
    """Each step's emulator under steps/<k>-<parameter>/; the table and Figure 5."""
    assert isinstance(study, ablation.Ablation)
    typed = AblationResult.from_json(result)
    for step, entry in zip(study.steps, typed.steps, strict=True):
        if entry.calibration is not None:
            search = next(s for s in step.trials if s.name == entry.search)
            _export_searches(study, {search.link: search}, entry.calibration.to_json(),
                             out / "steps" / f"{step.index}-{_safe(entry.adds or '')}")
    return "ablation", ablation.rows(typed), partial(plot_ablation, typed)


#: per study kind: its fitted emulators written under the export, and the stem, rows and figure
#: of its table
STUDY_EXPORTS: dict[str, Callable[[Run, Mapping[str, Any], Path],
                                  tuple[str, list[dict[str, Any]], Callable[[Path], Any]]]] = {
    loo.KIND: _export_loo, ablation.KIND: _export_ablation}


def export_study(run_dir: Path | str, out: Path | str | None = None, *, study: Run | None = None,
                 result: Mapping[str, Any] | None = None) -> Path:
    """Export the study in ``run_dir`` (module docstring) and return the directory.  A study that
    has just run can pass itself and its result, so they are not computed again."""
    study = study or open_study(run_dir)
    if not study.records:
        raise InputError(f"{run_dir}: nothing evaluated yet; let the study run (`calibrate "
                         f"resume {run_dir}`) and export once it has journaled evaluations")
    out = Path(out) if out is not None else Path(run_dir) / EXPORT_DIR
    result = jsonable(result if result is not None else study.result())
    try:
        out.mkdir(parents=True, exist_ok=True)
        stem, table, plot = STUDY_EXPORTS[study.kind](study, result, out)
        write_atomic(out / f"{stem}.json", result)
        write_csv(table, out / f"{stem}.csv")
        plot(out / f"{stem}.png")
    except OSError as error:
        raise InputError(f"cannot write the export to {out} ({error.strerror or error}); "
                         f"choose another --out") from None
    return out


__all__ = ["PAPER_ABLATION", "PAPER_LOO_PCT", "export_study", "fmt", "open_study",
           "params_text", "plot_ablation", "plot_loo", "study_result", "write_csv"]
