"""`calibrate schemes`: the schemes this host can run, their Pantheon aliases, which side
starts first, which program of Pantheon's each ports (label and era), its measured fidelity to
that program, where ours differs from what Pantheon ran, and why any is unavailable."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from calibrate.cli.common import add_pantheon_options, registry_from


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "schemes", help="list the congestion-control schemes available on this host",
        description="List the schemes (Pantheon's wrapper contract) this host can run, with their "
                    "aliases (Pantheon labels), which side runs first, the Pantheon label and era "
                    "each port reproduces, its measured fidelity (a calibration scores only "
                    "faithful ones unless a scheme is named), notes where our implementation is "
                    "not the one Pantheon ran, and why any is unavailable.")
    parser.add_argument("--json", action="store_true",
                        help="print the registry as JSON on stdout instead of tables")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="also show each scheme's description and its command lines")
    add_pantheon_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    registry = registry_from(args)
    if args.json:
        print(json.dumps([s.to_json() for s in registry.schemes], indent=2))
        return 0
    available = registry.available()
    table = Table(title=f"{len(available)} of {len(registry.schemes)} schemes available on this host")
    table.add_column("scheme", style="bold")
    table.add_column("ok")
    table.add_column("first")
    table.add_column("Pantheon label (era) / aliases")
    table.add_column("kind")
    table.add_column("faithful")
    table.add_column("fidelity; note / why unavailable", overflow="fold")
    for s in registry.schemes:
        labels = ", ".join(s.aliases)
        if s.port_of is not None:
            labels = f"{s.port_of.label} ({', '.join(s.port_of.eras)})"
        faithful = "[green]yes[/green]" if s.faithful else (
            "[yellow]unmeasured[/yellow]" if s.fidelity is None else "[red]no[/red]")
        remark = "; ".join(x for x in (s.difference() if s.fidelity or s.port_of else "", s.note) if x)
        if not s.available:
            remark = f"[red]unavailable: {s.unavailable_reason}[/red]"
        if args.verbose:
            remark = "\n".join(x for x in (remark, s.description, s.command(s.run_first, 50001),
                                          s.command(s.run_second, 50001)) if x)
        table.add_row(s.name, "[green]yes[/green]" if s.available else "[red]no[/red]",
                      s.run_first, labels, s.kind, faithful, remark)
    Console().print(table)
    return 0
