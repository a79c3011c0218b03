"""Pantheon's throughput–delay summary plot of a target (plot.py's pantheon_summary).

One point per scheme at (mean p95 one-way delay, mean throughput), with its valid runs as small
dots and a 1-σ ellipse: the covariance ellipse of the runs when there are runs, an axis-aligned
one from the per-metric std when the target only has aggregates.  The delay axis is inverted
(better is up and to the right) and logarithmic when delays span a wide range, as Pantheon does.
Rendered with the Agg canvas directly, so no GUI backend or pyplot global state is involved.
"""

from __future__ import annotations

from pathlib import Path

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


def scheme_style(scheme: str, index: int) -> tuple[str, str]:
    """(colour, marker) of a scheme: Pantheon's, else a fallback by position."""
    return SCHEME_STYLE.get(scheme, (_FALLBACK_COLORS[index % len(_FALLBACK_COLORS)],
                                     _FALLBACK_MARKERS[index % len(_FALLBACK_MARKERS)]))


def sigma_ellipse(scheme: SchemeResult, flow: str = TOTAL, points: int = 100
                  ) -> np.ndarray | None:
    """Vertices (delay, tput) of the 1-σ ellipse, or None when there is no spread to draw."""
    theta = np.linspace(0, 2 * np.pi, points)
    circle = np.stack([np.cos(theta), np.sin(theta)])
    runs = [r.flows[flow] for r in scheme.runs if flow in r.flows and r.flows[flow].delay_ms is not None]
    if len(runs) >= 2:
        data = np.array([[m.delay_ms, m.tput_mbps] for m in runs], dtype=float)
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
    log scale when the delays span a wide range; average throughput on y."""
    from matplotlib.ticker import ScalarFormatter

    positive = [d for d in delays if d > 0]
    if positive and max(positive) / min(positive) > LOG_DELAY_RATIO:
        ax.set_xscale("log", base=2)
        formatter = ScalarFormatter()
        formatter.set_scientific(False)
        ax.xaxis.set_major_formatter(formatter)
    ax.invert_xaxis()
    ax.set_xlabel("95th percentile one-way delay (ms)")
    ax.set_ylabel("Average throughput (Mbit/s)")


def plot_target(target: Target, out: Path | str, *, flow: str = TOTAL) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out = Path(out)
    fig = Figure(figsize=(9, 6.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    delays: list[float] = []
    for index, scheme in enumerate(target.schemes):
        if flow not in scheme.summary:
            continue
        summary = scheme.summary[flow]
        if summary.delay_ms.mean is None or summary.tput_mbps.mean is None:
            continue
        color, marker = scheme_style(scheme.scheme, index)
        runs = [(m.delay_ms, m.tput_mbps) for m in (r.flows[flow] for r in scheme.runs if flow in r.flows)
                if m.delay_ms is not None]
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
        ax.annotate(scheme.scheme, (x, y), xytext=(5, 4), textcoords="offset points", fontsize=8)
    delay_axis(ax, delays)
    prov = target.provenance
    title = target.name or prov.name or prov.source
    sub = " · ".join(p for p in (prov.path_description, prov.date,
                                 f"{target.workload.flows} flow(s), {target.workload.runtime_s:g} s")
                     if p)
    ax.set_title(f"{title}\n{sub}", fontsize=10)
    ellipse_kind = "covariance of runs" if target.has_runs else \
        f"axis-aligned from std (ddof={prov.std_ddof}); no per-run values"
    ax.text(0.01, 0.01, f"flow: {flow}; shaded: 1-σ ellipse ({ellipse_kind})",
            transform=ax.transAxes, fontsize=7, color="dimgray")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150)
    return out
