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
    table.add_column("scheme", style="bold", no_wrap=True)
    table.add_column("Pantheon label (era) / aliases", overflow="fold")
    table.add_column("faithful")
    table.add_column("measured difference", overflow="fold")
    notes: list[str] = []
    for s in registry.schemes:
        labels = ", ".join(s.aliases)
        if s.port_of is not None:
            labels = f"{s.port_of.label} ({', '.join(s.port_of.eras)})"
        faithful = "[green]yes[/green]" if s.faithful else (
            "[yellow]unmeasured[/yellow]" if s.fidelity is None else "[red]no[/red]")
        difference = ("Pantheon's own wrapper" if s.kind == "pantheon-wrapper" else
                      "–" if s.fidelity is None else s.fidelity.short())
        table.add_row(s.name if s.available else f"[red]{s.name} (unavailable)[/red]",
                      labels, faithful, difference)
        if not s.available:
            notes.append(f"{s.name}: [red]unavailable[/red]: {s.unavailable_reason}")
        if args.verbose:
            notes += [f"{s.name}: {x}" for x in (f"{s.kind}, {s.run_first} runs first",
                                                 s.port_of and s.port_of.upstream,
                                                 s.difference(), s.note, s.description,
                                                 s.command(s.run_first, 50001),
                                                 s.command(s.run_second, 50001)) if x]
    console = Console()
    console.print(table)
    for line in notes:
        console.print(line, highlight=False)
    if not args.verbose:
        console.print("A calibration scores the faithful implementation of each Pantheon label in "
                      "the target's era; a stand-in only when named (--schemes). --verbose: "
                      "upstream, measured difference, notes, commands.", highlight=False)
    return 0
