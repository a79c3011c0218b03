"""Pantheon's throughput–delay summary plot of a target (plot.py's pantheon_summary).

One point per scheme at (mean p95 one-way delay, mean throughput), with its valid runs as small
dots and a 1-σ ellipse: the covariance ellipse of the runs when there are runs, an axis-aligned
one from the per-metric std when the target only has aggregates.  The delay axis is inverted
(better is up and to the right) and logarithmic when delays span a wide range, as Pantheon does.
Rendered with the Agg canvas directly, so no GUI backend or pyplot global state is involved.

Layout rules shared with the export's Figure 3 (`calibrate.export.plot_figure3`), checked by eye
at the size written: legends and notes outside the data (right of, and under, the axes);
scheme labels inside their axes (`keep_labels_inside`); titles wrapped to the canvas; and no
axis spanning less than `MIN_RELATIVE_SPAN` of its values (`delay_axis`), so that a scatter of
a thousandth of a Mbit/s is drawn as the noise it is rather than magnified to fill the panel.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from calibrate.metrics import TOTAL
from calibrate.targets.model import SchemeResult, Target

# Pantheon's src/config.yml colours and markers, by canonical name.
SCHEME_STYLE: dict[str, tuple[str, str]] = {
    "cubic": ("black", "*"), "vegas": ("silver", "h"), "bbr": ("gold", "^"),
    "ledbat": ("green", "<"), "pcc": ("cyan", ">"), "verus": ("skyblue", "H"),
    "sprout": ("orange", "p"), "quic-cubic": ("magenta", "8"), "scream": ("pink", "1"),
    "webrtc": ("brown", "v"), "copa": ("red", "o"), "taova": ("gray", "d"),
    "vivace": ("blue", "<"), "pcc_experimental": ("olive", "<"), "fillp": ("violet", "+"),
    "indigo": ("indigo", "D"), "fillp_sheep": ("violet", "D"),
}
_FALLBACK_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:olive", "tab:cyan",
                    "darkgoldenrod", "teal")
_FALLBACK_MARKERS = ("s", "X", "P", "d", "^", "v")
# Pantheon switches the delay axis to a log scale when delays span a wide range.
LOG_DELAY_RATIO = 4.0
#: the smallest span of a linear axis, as a fraction of the largest value it shows ...
MIN_RELATIVE_SPAN = 0.25
#: ... and in absolute terms: throughput (Mbit/s), delay (ms)
MIN_TPUT_SPAN_MBPS = 0.1
MIN_DELAY_SPAN_MS = 2.0
#: a title line's width in characters, per inch of figure width (at 10 pt)
TITLE_CHARS_PER_INCH = 11


def scheme_style(scheme: str, index: int) -> tuple[str, str]:
    """(colour, marker) of a scheme: Pantheon's, else a fallback by position."""
    return SCHEME_STYLE.get(scheme, (_FALLBACK_COLORS[index % len(_FALLBACK_COLORS)],
                                     _FALLBACK_MARKERS[index % len(_FALLBACK_MARKERS)]))


def sigma_ellipse(scheme: SchemeResult, flow: str = TOTAL, points: int = 100
                  ) -> np.ndarray | None:
    """Vertices (delay, tput) of the 1-σ ellipse, or None when there is no spread to draw."""
    theta = np.linspace(0, 2 * np.pi, points)
    circle = np.stack([np.cos(theta), np.sin(theta)])
    runs = [r.flows[flow] for r in scheme.runs if flow in r.flows and r.flows[flow].delay is not None]
    if len(runs) >= 2:
        data = np.array([[m.delay, m.throughput] for m in runs], dtype=float)
        cov = np.cov(data.T, ddof=scheme.summary[flow].tput_mbps.ddof)
        values, vectors = np.linalg.eigh(cov)
        shape = vectors @ np.diag(np.sqrt(np.clip(values, 0, None))) @ circle
        return (data.mean(axis=0)[:, None] + shape).T
    summary = scheme.summary[flow]
    if summary.delay_ms.std is None or summary.tput_mbps.std is None:
        return None
    if summary.delay_ms.mean is None or summary.tput_mbps.mean is None:
        return None
    centre = np.array([[summary.delay_ms.mean], [summary.tput_mbps.mean]])
    return (centre + np.diag([summary.delay_ms.std, summary.tput_mbps.std]) @ circle).T


def delay_axis(ax, delays: list[float]) -> None:
    """Pantheon's axes: p95 one-way delay on x, inverted (lower delay is better: right), on a
    log scale when the delays span a wide range; average throughput on y.  Call it once the
    data is drawn: a linear axis is widened to its minimum span (module docstring)."""
    from matplotlib.ticker import ScalarFormatter

    positive = [d for d in delays if d > 0]
    if positive and max(positive) / min(positive) > LOG_DELAY_RATIO:
        ax.set_xscale("log", base=2)
        formatter = ScalarFormatter()
        formatter.set_scientific(False)
        ax.xaxis.set_major_formatter(formatter)
    else:
        _widen(ax, "x", MIN_DELAY_SPAN_MS)
    _widen(ax, "y", MIN_TPUT_SPAN_MBPS)
    for axis in (ax.xaxis, ax.yaxis):
        formatter = axis.get_major_formatter()
        if hasattr(formatter, "set_useOffset"):
            formatter.set_useOffset(False)  # ticks say the values, not "+7.5" on the side
    ax.invert_xaxis()
    ax.set_xlabel("95th percentile one-way delay (ms)")
    ax.set_ylabel("Average throughput (Mbit/s)")


def _widen(ax, axis: str, floor: float) -> None:
    """Give a linear axis at least MIN_RELATIVE_SPAN x its largest value (and `floor`) of span,
    around what it shows; one that showed no negative value is not widened below zero."""
    lo, hi = sorted(ax.get_xlim() if axis == "x" else ax.get_ylim())
    span = max(MIN_RELATIVE_SPAN * max(abs(lo), abs(hi)), floor)
    if hi - lo >= span:
        return
    middle = (lo + hi) / 2
    new = (middle - span / 2, middle + span / 2)
    if lo >= 0 > new[0]:
        new = (0.0, span)
    (ax.set_xlim if axis == "x" else ax.set_ylim)(*new)


def wrap_title(text: str, width_in: float, fontsize: float = 10) -> str:
    """`text` wrapped to lines that fit a figure `width_in` inches wide."""
    chars = max(20, int(TITLE_CHARS_PER_INCH * width_in * 10 / fontsize))
    return "\n".join(textwrap.fill(line, chars) for line in text.split("\n"))


def keep_labels_inside(fig: Any, labels: Iterable[Any]) -> None:
    """Scheme labels (annotations offset from their point) stay inside their axes: one that
    would cross the right edge goes left of its point, one over the top goes under it.  Call
    it after the layout (`tight_layout`), before saving."""
    renderer = fig.canvas.get_renderer()
    for label in labels:
        box = label.axes.get_window_extent(renderer)
        extent = label.get_window_extent(renderer)
        dx, dy = label.xyann
        if extent.x1 > box.x1:
            label.xyann = (dx := -abs(dx), dy)
            label.set_horizontalalignment("right")
        if extent.y1 > box.y1:
            label.xyann = (dx, -abs(dy))
            label.set_verticalalignment("top")


def note_under(ax: Any, text: str, fontsize: float = 7) -> None:
    """A note under the axes' x label, outside the data."""
    ax.annotate(text, (0.5, 0), xycoords="axes fraction", xytext=(0, -36), textcoords="offset points",
                ha="center", va="top", fontsize=fontsize, color="dimgray")


def plot_target(target: Target, out: Path | str, *, flow: str = TOTAL) -> Path:
    """Write the summary plot of `target` to `out` (its type by the suffix)."""
    out = Path(out)
    fig = target_figure(target, flow=flow)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150)
    return out


def target_figure(target: Target, *, flow: str = TOTAL) -> Any:
    """The summary plot of `target`, laid out (a matplotlib Figure on the Agg canvas)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    width = 9.0
    fig = Figure(figsize=(width, 6.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    delays: list[float] = []
    labels = []
    for index, scheme in enumerate(target.schemes):
        if flow not in scheme.summary:
            continue
        summary = scheme.summary[flow]
        if summary.delay_ms.mean is None or summary.tput_mbps.mean is None:
            continue
        color, marker = scheme_style(scheme.scheme, index)
        runs = [(m.delay, m.throughput) for m in (r.flows[flow] for r in scheme.runs if flow in r.flows)
                if m.delay is not None]
        if runs:
            ax.scatter([d for d, _ in runs], [t for _, t in runs], s=10, color=color,
                       alpha=0.45, linewidths=0)
            delays += [d for d, _ in runs]
        ellipse = sigma_ellipse(scheme, flow)
        if ellipse is not None:
            ellipse[:, 0] = np.clip(ellipse[:, 0], 1e-3, None)  # stays drawable on a log axis
            ax.fill(ellipse[:, 0], ellipse[:, 1], color=color, alpha=0.18, linewidth=0)
            ax.plot(ellipse[:, 0], ellipse[:, 1], color=color, alpha=0.6, linewidth=0.8)
            delays += list(ellipse[:, 0])
        x, y = summary.delay_ms.mean, summary.tput_mbps.mean
        delays.append(x)
        label = scheme.scheme if scheme.label == scheme.scheme else \
            f"{scheme.scheme} ({scheme.label})"
        filled = marker not in ("1", "2", "3", "4", "+", "x", "|", "_")
        ax.scatter([x], [y], s=70, color=color, marker=marker,
                   edgecolors="black" if filled else None, linewidths=0.5 if filled else 1.5,
                   zorder=3, label=f"{label}, {scheme.n_runs} runs")
        labels.append(ax.annotate(scheme.scheme, (x, y), xytext=(5, 4), textcoords="offset points",
                                  fontsize=8))
    delay_axis(ax, delays)
    prov = target.provenance
    title = target.name or prov.name or prov.source
    sub = " · ".join(p for p in (prov.path_description, prov.date,
                                 f"{target.workload.flows} flow(s), {target.workload.runtime_s:g} s")
                     if p)
    # the axes are about two thirds of the figure (the legend takes the rest)
    ax.set_title(wrap_title(f"{title}\n{sub}", width * 0.66), fontsize=10)
    ellipse_kind = "covariance of runs" if target.has_runs else \
        f"axis-aligned from std (ddof={prov.std_ddof}); no per-run values"
    note_under(ax, f"flow: {flow}; shaded: 1-σ ellipse ({ellipse_kind})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    keep_labels_inside(fig, labels)
    return fig
