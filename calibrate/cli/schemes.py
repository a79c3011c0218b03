"""`calibrate schemes`: the schemes this host can run, their Pantheon aliases, which side
starts first, which program of Pantheon's each ports (label and era), its measured fidelity to
that program, where ours differs from what Pantheon ran, why any is unavailable, and the Pantheon
labels whose program no faithful port can reproduce (the registry file's `impossible`, with the
evidence)."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from calibrate.cli.common import add_pantheon_options, registry_from
from calibrate.scheme_registry import Impossible, impossible_labels


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "schemes", help="list the congestion-control schemes available on this host",
        description="List the schemes (Pantheon's wrapper contract) this host can run, with their "
                    "aliases (Pantheon labels), which side runs first, the Pantheon label and era "
                    "each port reproduces, its measured fidelity (a calibration scores only "
                    "faithful ones unless a scheme is named), notes where our implementation is "
                    "not the one Pantheon ran, why any is unavailable, and the Pantheon labels "
                    "for which no faithful port is possible, with the evidence (in --json, "
                    "entries of kind \"impossible\").")
    parser.add_argument("--json", action="store_true",
                        help="print the registry as JSON on stdout instead of tables")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="also show each scheme's description and its command lines")
    add_pantheon_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    registry = registry_from(args)
    impossible = _by_label(impossible_labels())
    if args.json:
        print(json.dumps([s.to_json() for s in registry.schemes]
                         + [{"name": label, "kind": "impossible", "available": False,
                             "unavailable_reason": whys[0].message(),
                             "impossible": [why.to_json() for why in whys]}
                            for label, whys in impossible.items()], indent=2))
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
    if impossible:
        gone = Table(title="Pantheon labels no faithful port can reproduce (not scored)")
        gone.add_column("label", style="bold", no_wrap=True)
        gone.add_column("era")
        gone.add_column("impossible")
        gone.add_column("why", overflow="fold")
        for label, whys in impossible.items():
            same: dict[tuple[str, str], list[str]] = {}  # one row for the eras that agree
            for why in whys:
                same.setdefault((why.what, why.reason), []).append(why.era)
            for (what, reason), eras in same.items():
                gone.add_row(label, ", ".join(eras), what, reason)
        console.print(gone)
        if args.verbose:
            for label, whys in impossible.items():
                for why in whys:
                    for e in why.evidence:
                        console.print(f"{label} ({why.era}): evidence: {e.repo} {e.commit} "
                                      f"{e.path}: {e.finding}", highlight=False)
    if not args.verbose:
        console.print("A calibration scores the faithful implementation of each Pantheon label in "
                      "the target's era; a stand-in only when named (--schemes). --verbose: "
                      "upstream, measured difference, notes, commands, evidence.", highlight=False)
    return 0


def _by_label(whys: tuple[Impossible, ...]) -> dict[str, list[Impossible]]:
    out: dict[str, list[Impossible]] = {}
    for why in whys:
        out.setdefault(why.label, []).append(why)
    return out
