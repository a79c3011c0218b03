"""What a scheme is, read from the one registry file (calibrate/data/schemes.json) that the Rust
side (`calibrate-scheme`, emulators/schemes/src/registry.rs) builds in too.

Per scheme: its canonical name; Pantheon's other labels for it (`pantheon_labels`: archives from
a decade of Pantheon use labels that were later renamed, `default_tcp` becoming `cubic` on
2018-05-01); the labels it may further stand in for (`aliases`); its character, which the search
space's rules assume (`calibrate.space`: saturating, delay-based, rate-probing); the note on
whether ours is the implementation Pantheon ran; and how `calibrate-scheme` runs it, or nothing
for Pantheon's schemes we do not implement (kept for their character and labels).

Everything downstream (targets, the scheme registry of this host in `calibrate.schemes`, the
objective) speaks canonical names; targets keep the original label next to it so nothing is lost.
This module is plain data: no subprocess, no host.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

REGISTRY_FILE = "schemes.json"

Trait = Literal["saturating", "delay-based", "rate-probing"]
TRAITS: tuple[Trait, ...] = ("saturating", "delay-based", "rate-probing")
KINDS = ("kernel-tcp", "quic", "udp")
RUN_FIRST = ("receiver", "sender")


@dataclass(frozen=True)
class Implementation:
    """How `calibrate-scheme` runs a scheme."""

    kind: str  # kernel-tcp, quic, udp
    controller: str  # the congestion control (the kernel's name for kernel-tcp)
    run_first: str  # receiver or sender
    description: str


@dataclass(frozen=True)
class Entry:
    """One scheme of the registry file."""

    name: str
    pantheon_labels: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    character: frozenset[Trait] = frozenset()
    note: str | None = None
    implementation: Implementation | None = None

    @property
    def labels(self) -> tuple[str, ...]:
        """Every label it answers to besides its name: Pantheon's, then the aliases."""
        return tuple(dict.fromkeys(self.pantheon_labels + self.aliases))

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.labels)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Entry:
        impl = data.get("implementation")
        character = frozenset(data.get("character", ()))
        unknown = sorted(set(character) - set(TRAITS))
        if unknown:
            raise ValueError(f"{REGISTRY_FILE}: {data['name']}: unknown character {unknown}; "
                             f"use {', '.join(TRAITS)}")
        if impl is not None and (impl["kind"] not in KINDS or impl["run_first"] not in RUN_FIRST):
            raise ValueError(f"{REGISTRY_FILE}: {data['name']}: implementation {impl}")
        return cls(str(data["name"]), tuple(data.get("pantheon_labels", ())),
                   tuple(data.get("aliases", ())), character, data.get("note"),
                   None if impl is None else Implementation(
                       str(impl["kind"]), str(impl["controller"]), str(impl["run_first"]),
                       str(impl.get("description", ""))))


def _load() -> tuple[Entry, ...]:
    text = resources.files("calibrate.data").joinpath(REGISTRY_FILE).read_text()
    return tuple(Entry.from_json(e) for e in json.loads(text)["schemes"])


#: every entry of the registry file, in its order (the order of preference among our schemes)
ENTRIES: tuple[Entry, ...] = _load()

#: Pantheon label -> canonical name, for the labels whose canonical name differs
CANONICAL: Mapping[str, str] = {label: e.name for e in ENTRIES for label in e.pantheon_labels}


def implemented() -> tuple[Entry, ...]:
    """The entries `calibrate-scheme` runs, in the file's order."""
    return tuple(e for e in ENTRIES if e.implementation is not None)


def canonical_scheme(label: str) -> str:
    """The canonical name for a Pantheon scheme label (labels are case-sensitive in Pantheon,
    but a table typed in by hand may capitalize them, so matching ignores case).  A label no
    entry lists is its own canonical name."""
    key = label.strip()
    return CANONICAL.get(key, CANONICAL.get(key.lower(), key.lower()))


def traits_of(names: Iterable[str]) -> frozenset[Trait]:
    """The character of a scheme known by any of `names`: the traits of every entry that answers
    to one of them (its name, Pantheon labels or aliases)."""
    wanted = set(names)
    return frozenset(t for e in ENTRIES if wanted.intersection(e.names) for t in e.character)


def having(trait: Trait) -> frozenset[str]:
    """Every name and label of the entries with `trait` (the space's default hint sets)."""
    return frozenset(n for e in ENTRIES if trait in e.character for n in e.names)


__all__ = ["Entry", "Implementation", "ENTRIES", "TRAITS", "canonical_scheme", "implemented",
           "traits_of", "having"]
