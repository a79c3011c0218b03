"""Exporting a calibration: the winning emulator, ready to use, with its fidelity report.

`export(RUN_DIR)` reads a run directory (`calibrate.runs.journal.RunDir`) and writes
RUN_DIR/export/ (or ``out``):

- ``emulator.json``: per link kind (winner first, ``winner`` marks it) the incumbent emulator
  (rate Mbit/s, one-way delay ms, DropTail packets, uplink loss, seed), f, its noise and noise
  floor, the mean throughput/delay/loss errors, the per-scheme real-vs-emulated table, the
  evaluations (and how many the local refinement made), per parameter the range of values
  indistinguishable from the incumbent (`calibrate.ranges`; null with a note where no model
  can say); the run's wall time; provenance (target, run settings, calibrate version, export
  time); ``files``, every file of the export; ``units`` and ``fields``, what the numbers are
  (`fields_text`: delay_ms one-way, what f and its noise are, why noise can be null, whether
  the loss error is part of f); ``scheme_fidelity``: per scored label, the implementation that
  ran for it and its measured fidelity to the program Pantheon ran (a stand-in is marked).
- ``mahimahi.txt``, ``pantheon_args.txt``, ``engine.txt``: the winner as a Mahimahi command line,
  as Pantheon ``test.py local`` arguments, and as this project's engine command
  (``calibrate-link``; with no endpoints it opens a shell, like mm-link);
  ``constant/`` and ``poisson/`` hold the same three files for each link kind that was evaluated.
- ``traces/``: the trace files all of them use.  Trace paths in the command files are relative
  to the export directory (``traces/NAME``): run them from there, or copy the directory along.
- ``figure3.png`` / ``.svg``: the Pantheon paper's Figure 3 — per scheme, real (filled) and
  emulated (open) at (p95 one-way delay, throughput), one panel per link kind, captioned with
  the ranges of values indistinguishable from the incumbent and the schemes scored (stand-ins
  marked).
- ``convergence.png``: f per evaluation and the best so far, per link kind.

Each file is rendered into a hidden staging directory beside ``out`` and only then renamed into
place, so a failed export leaves nothing half-written, and a reader never sees a partial file.
Files a previous export listed and this one does not write (traces of another rate) are removed.

When result.json is missing (an interrupted run) or older than the journal (an interrupted
resume), the result is computed again from the journal (`Calibration.outcome`).
"""

from __future__ import annotations

import datetime as dt
import os
import shlex
import shutil
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from calibrate import binaries, installed_version
from calibrate.emulator import EmulatorConfig
from calibrate.errors import InputError
from calibrate.jsonfile import read_json
from calibrate.metrics import TOTAL
from calibrate.parameters import PARAMETER_TABLE
from calibrate.ranges import Ranges
from calibrate.runs.calibration import Calibration
from calibrate.runs.config import LINK_KINDS, emulator_of
from calibrate.runs.journal import JOURNAL, RESULT, Evaluation, RunDir, jsonable, write_atomic
from calibrate.runs.result import CalibrationResult
from calibrate.scheme_registry import ENTRIES, judge
from calibrate.schemes import PANTHEON_PREFIX

EXPORT_DIR = "export"
EXPORT_FORMAT = "calibrate-export"
#: 2: a scheme's real and emulated numbers are spelt as everywhere else, {"tput", "delay",
#: "loss"} (Pantheon's pantheon_perf.json); 1 had {"tput_mbps", "delay_p95_ms", "loss"}
EXPORT_VERSION = 2
REPORT = "emulator.json"
TRACES = "traces"
COMMAND_FILES = {"mahimahi": "mahimahi.txt", "pantheon_args": "pantheon_args.txt",
                 "engine": "engine.txt"}
FIGURE3 = ("figure3.png", "figure3.svg")
CONVERGENCE = "convergence.png"
#: what each file of an export is, by name (the CLI's listing)
FILE_ROLES = {REPORT: "parameters, per-scheme real vs emulated, provenance",
              "mahimahi.txt": "Mahimahi command line", "pantheon_args.txt": "Pantheon test.py local arguments",
              "engine.txt": "calibrate-link command (a shell over the emulated path)",
              FIGURE3[0]: "real vs emulated per scheme (paper Figure 3)", FIGURE3[1]: "the same, SVG",
              CONVERGENCE: "f per evaluation, best so far"}
LINK_COLORS = {"constant": "tab:blue", "poisson": "tab:orange"}


# ----------------------------------------------------------------------------------------------
# What is exported


@dataclass(frozen=True)
class CalibrationRun:
    """A run directory as read for export: the directory, its journal and its result."""

    directory: RunDir
    records: Sequence[Evaluation]  # the journal, in order
    result: CalibrationResult  # result.json's content
    result_source: str  # "result.json", or why it was computed again

    @property
    def run_dir(self) -> Path:
        return self.directory.path


def load_run(run_dir: Path | str) -> CalibrationRun:
    """Open RUN_DIR (`RunDir.open`) and its result, with errors that say what is wrong and what
    to do.  Reads only: a run may still be writing its journal."""
    directory = RunDir.open(run_dir)
    records = directory.evaluations()
    if not records:
        raise InputError(f"{directory.path}: nothing evaluated yet ({JOURNAL} has no finished "
                         f"evaluation); let the calibration run (`calibrate resume "
                         f"{directory.path}`) and export once it has journaled evaluations")
    saved, source = directory.read_result(), RESULT
    if saved is None:
        source = f"no {RESULT} (interrupted run); computed from the journal"
    elif not isinstance(saved, dict) or saved.get("evaluations") != len(records):
        saved, source = None, f"{RESULT} is older than the journal; computed from the journal"
    if saved is None:
        saved = jsonable(Calibration.of(directory, records).result())
    result = CalibrationResult.from_json(saved, str(directory.result_file))
    if result.winner is None:
        raise InputError(f"{directory.path}: no link kind has a scored evaluation; nothing to export")
    return CalibrationRun(directory, tuple(records), result, source)


# ----------------------------------------------------------------------------------------------
# The emulator in its three spellings


def emulator_files(config: EmulatorConfig, root: Path, folder: str = "") -> dict[str, str | list[str]]:
    """Write ``config``'s traces into root/traces and its command files into root/folder; return
    {kind: path relative to root} for the three command files and the traces.  Commands name
    the traces relative to ``root``."""
    up, down = config.trace_paths(root / TRACES)
    rel_up, rel_down = (f"{TRACES}/{p.name}" for p in (up, down))
    # the same path with the traces given as files, so engine_args names them as written here
    as_files = replace(config, uplink_trace=Path(rel_up), downlink_trace=Path(rel_down))
    texts = {
        "mahimahi": config.mahimahi_command(rel_up, rel_down),
        "pantheon_args": shlex.join(config.pantheon_args(rel_up, rel_down)),
        "engine": shlex.join([binaries.LINK, *as_files.engine_args(root)]),
    }
    files: dict[str, str | list[str]] = {}
    for kind, text in texts.items():
        rel = f"{folder}/{COMMAND_FILES[kind]}" if folder else COMMAND_FILES[kind]
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text + "\n")
        files[kind] = rel
    files["traces"] = sorted({rel_up, rel_down})
    return files


def _ranges_json(ranges: Ranges) -> dict[str, Any]:
    """A link kind's ranges in emulator.json: per parameter [low, high] under its emulator key,
    the note (what they mean, or why there are none) and the sentence the figure shows."""
    return {"ranges": {PARAMETER_TABLE[r.name].key: [r.low, r.high] for r in ranges.ranges} or None,
            "ranges_note": ranges.to_json()["ranges_note"], "ranges_text": ranges.sentence()}


def _emulator_json(config: EmulatorConfig) -> dict[str, Any]:
    return {"link": config.link, "rate_mbps": config.rate_mbps, "delay_ms": config.delay_ms,
            "queue": config.queue.kind, "queue_packets": config.queue.packets,
            "uplink_loss": config.uplink_loss, "seed": config.trace_seed,
            "description": config.describe()}


# ----------------------------------------------------------------------------------------------
# The report (emulator.json)


def _scheme_rows(rows: Sequence[Mapping[str, Any]], ours: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"scheme": r["scheme"], "flow": r.get("flow", TOTAL), "ran_as": ours.get(r["scheme"]),
             "real": r["real"], "emulated": r.get("emulated"),
             "error_pct": r["error_pct"], "replicates": r.get("replicates"),
             "failures": r.get("failures", [])} for r in rows]


def read_report(report: dict[str, Any]) -> dict[str, Any]:
    """An emulator.json of any version as this version writes it: version 1's scheme numbers
    ({"tput_mbps", "delay_p95_ms", "loss"}) in today's spelling (`EXPORT_VERSION`)."""
    if report.get("format") != EXPORT_FORMAT or report.get("version", 1) >= EXPORT_VERSION:
        return report

    def numbers(v: Mapping[str, Any] | None) -> dict[str, Any] | None:
        return None if v is None else {"tput": v.get("tput_mbps"), "delay": v.get("delay_p95_ms"),
                                       "loss": v.get("loss")}

    links = {link: {**entry, "schemes": [{**row, "real": numbers(row.get("real")),
                                          "emulated": numbers(row.get("emulated"))}
                                         for row in entry["schemes"]]} if "schemes" in entry else entry
             for link, entry in report.get("links", {}).items()}
    return {**report, "links": links, "version": EXPORT_VERSION}


def scheme_fidelity(ours: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Per scored label, the implementation that ran for it and its measured fidelity to the
    program Pantheon ran, as this version's registry file records it."""
    entries = {e.name: e for e in ENTRIES}
    out: dict[str, dict[str, Any]] = {}
    for label, name in ours.items():
        entry = entries.get(name)
        own_wrapper = name.startswith(PANTHEON_PREFIX)
        fidelity = None if entry is None or own_wrapper else entry.fidelity
        faithful, difference = judge(fidelity, own_wrapper)
        out[label] = {"ran_as": name, "faithful": faithful, "difference": difference}
        if fidelity is not None:
            out[label]["fidelity"] = fidelity.to_json()
    return out


def fidelity_caption(fidelity: Mapping[str, Mapping[str, Any]]) -> str:
    """One line for Figure 3: each scored label, what ran for it, and whether it is faithful."""
    return "scored: " + ", ".join(
        f"{label}{'' if v['ran_as'] == label else ' as ' + v['ran_as']}"
        f"{'' if v['faithful'] else ' (STAND-IN)'}" for label, v in fidelity.items())


def fields_text(include_loss: bool) -> dict[str, str]:
    """emulator.json's ``fields``: what its less obvious keys mean, for a reader of the file."""
    loss_term = ("it is part of f: this run was made with --include-loss" if include_loss else
                 "it is reported, not part of f (a run made with --include-loss adds it as a third "
                 "term)")
    return {
        "rate_mbps": "bottleneck rate of IP packets, Mbit/s, both directions (the traces)",
        "delay_ms": "one-way propagation delay added in each direction (mm-delay), ms; the round "
                    "trip is 2 x delay_ms plus the link's transmission and queueing time",
        "queue_packets": "DropTail limit of the uplink queue, packets waiting (mm-link "
                         "--uplink-queue-args=packets=N)",
        "uplink_loss": "i.i.d. loss probability of data packets (mm-loss uplink), a fraction",
        "seed": "the search's emulator seed: it makes Poisson traces and the engine command's "
                "loss draws",
        "f": "the replication error of the Pantheon paper (5.2), %: the mean over the scored "
             "schemes of the relative throughput error and the relative p95 one-way delay error "
             "between the real path and this emulator, each scheme run `replicates` times; "
             "lower is better",
        "noise": "the standard error of f, %, from the spread of the replicates (delta method); "
                 "null where it could not be estimated (no scheme had two valid replicates, e.g. "
                 "a run with --replicates 1)",
        "floor": "the f an exact emulator would still show through the replicates' scatter, %",
        "loss_error_pct": f"the relative error of the loss rate, %; {loss_term}",
        "real": "a scheme's numbers on the real path (the target's aggregate): tput, Mbit/s; delay, "
                "p95 one-way delay, ms; loss, a fraction",
        "emulated": "the same over this emulator, aggregated over its replicates",
        "ranges": "per parameter, the values whose f the search's model cannot tell from the "
                  "winner's (ranges_note says how they were found, or why there are none)",
    }


def build_report(run: CalibrationRun, emulators: Mapping[str, EmulatorConfig],
                 files: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """emulator.json's content.  ``emulators``/``files``: per link kind with an incumbent, its
    emulator and `emulator_files`' answer (``files[""]`` is the winner's top-level copy)."""
    result, meta, target = run.result, run.directory.meta, run.directory.target
    winner = result.winner
    assert winner is not None  # load_run refuses a result without one
    ours = meta.get("schemes", {})
    links: dict[str, Any] = {}
    for link in [winner, *(other for other in result.links if other != winner)]:
        v = result.links[link]
        entry: dict[str, Any] = {"winner": link == winner,
                                 "evaluations": sum(r.link == link for r in run.records),
                                 "stopped": v.stopped}
        if link in emulators:
            record = next((r for r in run.records if r.candidate == v.candidate), None)
            entry.update({
                "candidate": v.candidate, "emulator": _emulator_json(emulators[link]),
                "f": v.f, "noise": v.noise, "floor": v.floor,
                "model_mean": v.model_mean, "best_observed_f": v.best_observed_f,
                "errors_pct": dict(v.errors_pct), "loss_error_pct": v.errors_pct.get("loss"),
                "loss_seeds": None if record is None else list(record.loss_seeds),
                "refined": v.refined,
                **_ranges_json(v.ranges_of()),
                "schemes": _scheme_rows(v.schemes, ours), "files": dict(files[link])})
        links[link] = entry
    best = links[winner]
    return {
        "format": EXPORT_FORMAT, "version": EXPORT_VERSION,
        "target": target.name or target.provenance.source,
        "winner": winner,
        "emulator": {**best["emulator"], "f": best["f"], "noise": best["noise"],
                     "ranges": best["ranges"], "ranges_text": best["ranges_text"],
                     "files": dict(files[""])},
        "links": links,
        "evaluations": len(run.records),
        "wall_s": result.wall_s,
        "dropped": dict(result.dropped) if result.dropped is not None else meta.get("dropped", {}),
        "scheme_fidelity": scheme_fidelity(ours),
        "units": {"f, noise, floor, errors_pct, error_pct": "percent",
                  "loss, uplink_loss": "fraction", "paths": "relative to this directory",
                  "ranges": "[low, high] in the unit of the emulator key it is under"},
        "fields": fields_text(bool((meta.get("config") or {}).get("include_loss"))),
        "provenance": {
            "target": {"name": target.name, "workload": target.workload.to_json(),
                       "provenance": target.provenance.to_json()},
            "run": {"run_dir": str(run.run_dir.resolve()), "created": meta.get("created"),
                    "settings": meta.get("config"), "space": meta.get("space"),
                    "warm_start": meta.get("warm_start"), "schemes": ours,
                    "workload": meta.get("workload"), "seeds": meta.get("seeds"),
                    "result": run.result_source},
            "calibrate_version": installed_version(),
            "exported_at": dt.datetime.now(dt.UTC).isoformat(),
        },
    }


# ----------------------------------------------------------------------------------------------
# Figures


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _f_text(entry: Mapping[str, Any]) -> str:
    noise = entry.get("noise")
    return f"f = {entry['f']:.1f} %" + ("" if noise is None else f" ± {noise:.1f}")


def plot_figure3(report: Mapping[str, Any], outs: Sequence[Path]) -> None:
    """Write `figure3` to each of `outs`."""
    fig = figure3(report)
    for out in outs:
        fig.savefig(out, dpi=150)


def figure3(report: Mapping[str, Any]) -> Any:
    """The Pantheon paper's Figure 3 from a report: per scheme a filled dot at the real (p95
    one-way delay, throughput), an open one at the emulated, joined by a line; one panel per
    link kind with an incumbent (a matplotlib Figure, laid out)."""
    from calibrate.summary_plot import delay_axis, keep_labels_inside, scheme_style, wrap_title

    panels = [(link, entry) for link, entry in report["links"].items() if "schemes" in entry]
    fig = _figure(6.5 * len(panels) + 1.2, 5.5)  # + the legend's column, right of the panels
    labels = []
    for i, (link, entry) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        delays: list[float] = []
        for index, row in enumerate(entry["schemes"]):
            color, _ = scheme_style(row["ran_as"] or row["scheme"], index)
            real, emu = row["real"], row["emulated"] or {}
            name = row["scheme"] if row["flow"] == TOTAL else f"{row['scheme']} #{row['flow']}"
            x, y = real["delay"], real["tput"]
            ax.scatter([x], [y], s=55, color=color, edgecolors="black", linewidths=0.5, zorder=3)
            delays.append(x)
            ex, ey = emu.get("delay"), emu.get("tput")
            if ex is not None and ey is not None:
                ax.plot([x, ex], [y, ey], color=color, linewidth=1.0, alpha=0.8)
                ax.scatter([ex], [ey], s=55, facecolors="white", edgecolors=color,
                           linewidths=1.5, zorder=3)
                delays.append(ex)
            else:
                name += " (no emulated run)"
            labels.append(ax.annotate(name, (x, y), xytext=(5, 4), textcoords="offset points",
                                      fontsize=8))
        delay_axis(ax, delays)
        ax.grid(True, which="both", alpha=0.3)
        mark = ", winner" if entry["winner"] else ""
        ax.set_title(wrap_title(f"{link} deliveries{mark}: {_f_text(entry)}\n"
                                f"{entry['emulator']['description']}", 6.0, 9), fontsize=9)
        ax.text(0.5, -0.13, textwrap.fill(entry["ranges_text"], width=90), transform=ax.transAxes,
                ha="center", va="top", fontsize=8, color="dimgray")
    ax = fig.axes[-1]  # the legend right of the last panel, outside the data
    ax.scatter([], [], s=55, color="gray", edgecolors="black", linewidths=0.5, label="real")
    ax.scatter([], [], s=55, facecolors="white", edgecolors="gray", linewidths=1.5, label="emulated")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, frameon=False)
    prov = report["provenance"]["target"]["provenance"]
    title = " · ".join(p for p in (report["target"], prov.get("path_description")) if p)
    fig.suptitle(textwrap.shorten(title, width=60 * len(fig.axes), placeholder=" …"), fontsize=11)
    if report.get("scheme_fidelity"):
        fig.text(0.01, 0.005, textwrap.fill(fidelity_caption(report["scheme_fidelity"]),
                                            width=int(60 * len(fig.axes) * 1.6)),
                 ha="left", va="bottom", fontsize=7, color="dimgray")
        fig.tight_layout(rect=(0, 0.05, 1, 1))  # the caption's strip at the bottom
    else:
        fig.tight_layout()
    keep_labels_inside(fig, labels)
    return fig


def plot_convergence(records: Sequence[Evaluation], out: Path,
                     incumbents: Mapping[str, int] | None = None) -> None:
    """f against the evaluation number of each link kind: observations (with their noise as
    error bars), the best so far as a step line, the incumbent starred."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    fig = _figure(8, 5)
    ax = fig.add_subplot(1, 1, 1)
    values = []
    for link in LINK_KINDS:
        mine = [r for r in records if r.link == link]
        if not mine:
            continue
        color = LINK_COLORS[link]
        n = list(range(1, len(mine) + 1))
        f = [r.f for r in mine]
        noise = [r.noise or 0.0 for r in mine]
        values += f
        ax.errorbar(n, f, yerr=noise if any(noise) else None, fmt="o", markersize=4,
                    color=color, alpha=0.6, elinewidth=0.8, capsize=2, label=f"{link}: f")
        best = [min(f[: i + 1]) for i in range(len(f))]
        ax.step(n, best, where="post", color=color, linewidth=1.5, label=f"{link}: best so far")
        chosen = (incumbents or {}).get(link)
        for i, r in enumerate(mine):
            if r.candidate == chosen:
                ax.scatter([n[i]], [f[i]], marker="*", s=160, color=color, edgecolors="black",
                           zorder=4, label=f"{link}: chosen")
    positive = [v for v in values if v > 0]
    if positive and len(positive) == len(values) and max(positive) / min(positive) > 10:
        ax.set_yscale("log")
        plain = FuncFormatter(lambda v, _: f"{v:g}")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("evaluation (per link kind)")
    ax.set_ylabel("replication error f (%)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=150)


# ----------------------------------------------------------------------------------------------
# Writing


def _listed(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def _previous_files(out: Path) -> set[str]:
    """Files the previous export here listed (empty when there is none, or it is unreadable)."""
    try:
        old = read_json(out / REPORT, what="previous export")
    except InputError:
        return set()
    if not isinstance(old, dict) or old.get("format") != EXPORT_FORMAT:
        return set()
    return {f for f in old.get("files", []) if isinstance(f, str)}


def foreign_files(out: Path | str, run_dir: Path | str) -> list[str]:
    """What in the directory ``out`` an export of ``run_dir`` would write over or beside without
    it being that run's earlier export: its entries (sorted), or [] when it is missing, empty,
    or holds an export of this very run (which a new export replaces)."""
    out = Path(out)
    try:
        entries = sorted(p.name for p in out.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    if not entries:
        return []
    try:
        old = read_json(out / REPORT, what="previous export")
    except InputError:
        return entries
    run = ((old.get("provenance") or {}).get("run") or {}) if isinstance(old, dict) else {}
    earlier = run.get("run_dir") if isinstance(run, dict) else None
    if (isinstance(old, dict) and old.get("format") == EXPORT_FORMAT and isinstance(earlier, str)
            and os.path.realpath(earlier) == os.path.realpath(run_dir)):
        return []
    return entries


def _publish(staging: Path, out: Path) -> list[str]:
    """Rename every staged file into ``out`` (the report last); remove what only the previous
    export had."""
    files = _listed(staging)
    stale = _previous_files(out) - set(files)
    for rel in sorted(files, key=lambda f: f == REPORT):
        src, dst = staging / rel, out / rel
        with open(src, "rb") as f:
            os.fsync(f.fileno())
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
    root = out.resolve()
    for rel in stale:
        path = (out / rel).resolve()
        if root in path.parents and path.is_file():
            path.unlink()
            for parent in path.relative_to(root).parents:  # folders it leaves empty
                if str(parent) != "." and not any((root / parent).iterdir()):
                    (root / parent).rmdir()
    return files


def write_export(run: CalibrationRun, out: Path | str | None = None) -> Path:
    """Write the export of ``run`` into ``out`` (default RUN_DIR/export); return it."""
    out = Path(out) if out is not None else run.run_dir / EXPORT_DIR
    if out.exists() and not out.is_dir():
        raise InputError(f"{out} is a file; choose another --out for the export")
    result = run.result
    # The exported engine command draws its losses with the search's emulator seed too (its
    # runs used that seed·1000 + replicate; any fixed loss seed reproduces the path).
    emulators = {link: replace(emulator_of(v.params, link, v.seed), loss_seed=v.seed)
                 for link, v in result.links.items() if v.params is not None and v.seed is not None}
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", suffix=".tmp", dir=out.parent))
    except OSError as error:
        raise InputError(f"cannot create the export directory {out} ({error.strerror or error}); "
                         f"choose another --out") from None
    try:
        files: dict[str, Any] = {link: emulator_files(config, staging, link)
                                 for link, config in emulators.items()}
        files[""] = emulator_files(emulators[str(result.winner)], staging)
        report = build_report(run, emulators, files)
        plot_figure3(report, [staging / name for name in FIGURE3])
        plot_convergence(run.records, staging / CONVERGENCE,
                         {link: v.candidate for link, v in result.links.items() if v.candidate is not None})
        report["files"] = sorted([*_listed(staging), REPORT])
        write_atomic(staging / REPORT, jsonable(report))
        out.mkdir(exist_ok=True)
        _publish(staging, out)
    except OSError as error:
        raise InputError(f"cannot write the export to {out} ({error.strerror or error}); "
                         f"choose another --out") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def export(run_dir: Path | str, out: Path | str | None = None) -> Path:
    """Export the calibration in ``run_dir`` (module docstring) and return the directory."""
    return write_export(load_run(run_dir), out)

