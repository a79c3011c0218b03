"""`calibrate target show|plot TARGET`: inspect what a calibration would aim for."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from calibrate.cli.common import TARGET_HELP, add_source_options, load_target_of, old_spelling
from calibrate.errors import InputError
from calibrate.evidence import PathEvidence
from calibrate.metrics import TOTAL, Aggregate


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("target", help="show or plot a real-path target",
                                   description="Read a target and show or plot it.")
    sub = parser.add_subparsers(dest="target_command", metavar="ACTION")
    sub.required = True

    show = sub.add_parser("show", help="per-scheme table of runs, throughput, delay and loss")
    show.add_argument("target", metavar="TARGET", help=TARGET_HELP)
    show.add_argument("--json", action="store_true",
                      help="print the normalized target as JSON on stdout instead of tables")
    show.add_argument("--json-out", metavar="FILE", type=Path,
                      help="also write the normalized target JSON to FILE (a TARGET of its own)")
    old_spelling(show, "--write", "--json-out", "json_out", type=Path, metavar="FILE")
    show.add_argument("--flow", default=TOTAL, help="flow to show: all (default), 1, 2, ...")
    show.add_argument("--runs", action="store_true", help="also list every valid run")
    add_source_options(show)
    show.set_defaults(func=_show)

    plot = sub.add_parser("plot", help="Pantheon's throughput-delay scatter with 1-sigma ellipses")
    plot.add_argument("target", metavar="TARGET", help=TARGET_HELP)
    plot.add_argument("--out", metavar="PNG", type=Path,
                      help="output image (default: <target name>-summary.png here)")
    plot.add_argument("--flow", default=TOTAL, help="flow to plot: all (default), 1, 2, ...")
    add_source_options(plot)
    plot.set_defaults(func=_plot)


def _fmt(agg: Aggregate, digits: int, scale: float = 1.0) -> str:
    if agg.mean is None:
        return "–"
    text = f"{agg.mean * scale:.{digits}f}"
    if agg.std is not None:
        text += f" ± {agg.std * scale:.{digits}f}"
    return text


def _show(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from calibrate.cli.common import writable

    if args.json_out is not None:  # before the target is fetched
        args.json_out = writable(args.json_out, "--json-out")
    target = load_target_of(args)
    if args.json_out:
        try:
            args.json_out.write_text(target.dumps())
        except OSError as error:
            raise InputError(f"cannot write --json-out {args.json_out}: {error.strerror or error}") from None
    if args.json:
        sys.stdout.write(target.dumps())
        return 0

    console = Console(width=None if sys.stdout.isatty() else 100)
    prov = target.provenance
    table = Table(title=f"{target.name or prov.source} (flow {args.flow})", title_justify="left")
    table.add_column("scheme", no_wrap=True)
    table.add_column("label", no_wrap=True)
    table.add_column("runs", justify="right", no_wrap=True)
    table.add_column("tput (Mbit/s)", justify="right", no_wrap=True)
    table.add_column("p95 delay (ms)", justify="right", no_wrap=True)
    table.add_column("loss (%)", justify="right", no_wrap=True)
    shown = 0
    for scheme in target.schemes:
        if args.flow not in scheme.summary:
            continue
        s = scheme.summary[args.flow]
        table.add_row(scheme.scheme, "" if scheme.label == scheme.scheme else scheme.label,
                      str(scheme.n_runs), _fmt(s.tput_mbps, 2), _fmt(s.delay_ms, 2),
                      _fmt(s.loss, 2, 100.0))
        shown += 1
    if not shown:
        flows = sorted({key for scheme in target.schemes for key in scheme.summary})
        raise InputError(f"no scheme of {target.name or prov.source} has flow {args.flow!r}; its "
                         f"flows are {', '.join(flows)} (--flow {flows[0] if flows else TOTAL})")
    console.print(table)
    w = target.workload
    console.print(f"mean ± std over valid runs (std ddof={prov.std_ddof}); workload: {w.flows} "
                  f"flow(s), interval {w.interval_s:g} s, runtime {w.runtime_s:g} s"
                  + (f", {w.run_times} runs" if w.run_times else ""), highlight=False)
    details = [("source", f"{prov.kind}: {prov.source}"), ("path", prov.path_description),
               ("date", prov.date), ("archive", prov.archive_name), ("url", prov.url),
               ("sha256", prov.sha256), ("metrics", prov.metrics_from)]
    for key, value in details:
        if value:
            console.print(f"{key}: {value}", highlight=False, soft_wrap=True)
    for note in prov.notes:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)
    if args.runs:
        for scheme in target.schemes:
            for run in scheme.runs:
                m = run.flows.get(args.flow)
                if m:
                    delay = "–" if m.delay is None else f"{m.delay:.2f}"
                    loss = "–" if m.loss is None else f"{100 * m.loss:.2f}"
                    console.print(f"  {scheme.scheme} run {run.run}: {m.throughput:.2f} Mbit/s, "
                                  f"{delay} ms, {loss} % ({run.source})", highlight=False)
    if target.evidence is not None:
        _show_evidence(console, target.evidence)
    if target.dropped:
        console.print(f"[yellow]dropped {len(target.dropped)}:[/yellow]")
        for dropped in target.dropped:
            console.print(f"  {dropped}", highlight=False, soft_wrap=True, markup=False)
    return 0


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _show_evidence(console, evidence: PathEvidence) -> None:
    """Per scheme and for the whole path, what the per-packet logs show (calibrate.evidence)."""
    from rich.table import Table

    table = Table(title="per-packet evidence (the logs of every valid run; delay ≤: p95 one-way − "
                        "time in the link; most pkts: most packets in the link at once)",
                  title_justify="left")
    for column in ("scheme", "runs", "min 1-way ms", "delay ≤ ms", "max link ms", "most pkts",
                   "drops (runs)", "capacity Mbit/s", "kind"):
        table.add_column(column, justify="left" if column == "scheme" else "right")
    for label in evidence.labels:
        e = evidence.of_schemes([label])
        most = [r.max_in_link for r in e.runs if r.max_in_link is not None]
        drops = "–" if e.drops is None else f"{e.drops} ({e.dropping_runs}/{e.link_logged_runs})"
        table.add_row(label, str(len(e.runs)), _num(e.min_delay_ms, ".1f"),
                      _num(e.propagation_max_ms, ".1f"), _num(e.max_link_delay_ms, ".0f"),
                      _num(max(most) if most else None, "d"), drops, _num(e.capacity_mbps, ".3f"),
                      e.deliveries or "–")
    console.print(table)
    facts = []
    if evidence.min_delay_ms is not None:
        facts.append(f"smallest one-way delay {evidence.min_delay_ms:.1f} ms")
    if evidence.propagation_max_ms is not None:
        facts.append(f"propagation delay ≤ {evidence.propagation_max_ms:.1f} ms (p95 one-way − "
                     f"p95 in link: {_num(evidence.propagation_ms, '.1f')} ms)")
    low, high = evidence.queue_at_least, evidence.queue_at_most
    if low is not None:
        span = f"{low}" if high == low else f"{low}–{high}"
        facts.append(f"DropTail queue {span} packets (from the packets in the link at its drops)"
                     if high is not None else f"DropTail queue ≥ {low} packets (it never dropped)")
    if evidence.capacity_mbps is not None:
        noise = evidence.capacity_noise
        facts.append(f"capacity {evidence.capacity_mbps:.3f} Mbit/s"
                     + (f" (± {100 * noise:.1f} % per run)" if noise is not None else "")
                     + (f", {evidence.deliveries} deliveries" if evidence.deliveries else ""))
    if facts:
        console.print("path: " + "; ".join(facts), highlight=False, soft_wrap=True)


def _image_path(out: Path) -> Path:
    """`--out` checked before any work: a type of image matplotlib writes (by its suffix; PNG
    when it has none), in a writable directory."""
    from matplotlib.backend_bases import FigureCanvasBase

    from calibrate.cli.common import writable

    kinds = FigureCanvasBase.get_supported_filetypes()
    if not out.suffix:
        out = out.with_suffix(".png")
    if out.suffix[1:].lower() not in kinds:
        raise InputError(f"--out {out}: cannot write {out.suffix} images; give the file one of "
                         f"the suffixes {', '.join('.' + k for k in sorted(kinds))} (e.g. "
                         f"{out.with_suffix('.png')})")
    return writable(out, "--out")


def _plot(args: argparse.Namespace) -> int:
    from calibrate.summary_plot import plot_target

    if args.out is not None:
        args.out = _image_path(args.out)
    target = load_target_of(args)
    name = (target.name or "target").replace("/", "_")
    out = args.out or Path(f"{name}-summary.png")
    try:
        path = plot_target(target, out, flow=args.flow)
    except OSError as error:
        raise InputError(f"cannot write {out}: {error.strerror or error}") from None
    print(path)
    return 0
