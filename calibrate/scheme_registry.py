"""What a scheme is, read from the one registry file (calibrate/data/schemes.json) that the Rust
side (`calibrate-scheme`, emulators/schemes/src/registry.rs) builds in too.

Per scheme: its canonical name; Pantheon's other labels for it (`pantheon_labels`: archives from
a decade of Pantheon use labels that were later renamed, `default_tcp` becoming `cubic` on
2018-05-01); the labels it may further stand in for (`aliases`); its character, which the bounds
and warm-start rules assume (`calibrate.physics`: saturating, delay-based, rate-probing); the note on
whether ours is the implementation Pantheon ran; and how `calibrate-scheme` runs it, or nothing
for Pantheon's schemes we do not implement (kept for their character and labels).

A port of the program Pantheon ran names it (`port_of`: the Pantheon label, the eras in which
Pantheon ran that program, the upstream at its pinned commit, whether that program keeps a core
busy). Every implementation carries its
measured fidelity (`fidelity`: against what, when, per metric the median and worst |Δ|, and
whether it is faithful; `experiments/vs_pantheon_schemes.py --write-fidelity` writes it); kernel
TCP is faithful by construction. A Pantheon label means the implementation of the target's era
(`era_of`): Pantheon changed what some labels ran at the start of 2018.

Where no faithful port or reference of what Pantheon ran is possible (webrtc was the hosts'
unpinned Chromium; fillp was published only as binaries), the entry says so per era
(`impossible`: what cannot be done, why, and the evidence: repository, commit, file, finding), and
a target's label in that era is dropped with that reason (`impossibility`).

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

#: Pantheon's eras of scheme builds (spec: ../shared/spec/pantheon-schemes.md): "2017" is Dec
#: 2016 to the end of 2017 (genericCC 5101b0a, proto-quic 54, the saturators, koho_cc), "2018"
#: from 2018 on (genericCC d0153f8, proto-quic 60, ...).
ERAS: Mapping[str, str] = {"2017": "Dec 2016 - 2017", "2018": "2018 - 2020"}
ERA_2018_FROM = "2018-01-01"
#: the era assumed for a target without a date: most of Pantheon's archive is 2018-2020 ...
ASSUMED_ERA = "2018"
#: ... unless it has a label only the 2017 era had (the saturators and koho_cc were gone by 2018)
LABELS_OF_2017_ONLY = frozenset({"saturator", "greg_saturator", "koho_cc"})

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
class PortOf:
    """The program Pantheon ran that an implementation ports."""

    label: str  # Pantheon's label
    eras: tuple[str, ...]  # the eras in which Pantheon ran that program under the label
    upstream: str  # repository, commit, program and arguments
    busy_wait: bool = False  # that program keeps a core busy (its sender spins between sends)


@dataclass(frozen=True)
class Spread:
    """Median and worst |Δ| of one metric over a benchmark's rows."""

    median: float
    worst: float


@dataclass(frozen=True)
class Fidelity:
    """How closely an implementation reproduces the program Pantheon ran, as measured."""

    faithful: bool
    against: str  # what it was compared with
    measured: str | None = None  # ISO date
    by_construction: str | None = None  # why it is the same program (kernel TCP)
    tput_pct: Spread | None = None  # |Δ throughput| in %
    p95_ms: Spread | None = None  # |Δ p95 one-way delay| in ms
    loss_pct: Spread | None = None  # |Δ loss| in percentage points
    rows: int | None = None
    rows_passing: int | None = None
    known_emulator: Mapping[str, float] | None = None  # signed tput_pct, p95_pct vs Pantheon 2017

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Fidelity:
        def spread(key: str) -> Spread | None:
            v = data.get(key)
            return None if v is None else Spread(float(v["median"]), float(v["worst"]))
        known = data.get("known_emulator")
        return cls(bool(data["faithful"]), str(data.get("against", "")), data.get("measured"),
                   data.get("by_construction"), spread("tput_pct"), spread("p95_ms"),
                   spread("loss_pct"), data.get("rows"), data.get("rows_passing"),
                   None if known is None else {k: float(v) for k, v in known.items()})

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"faithful": self.faithful, "against": self.against}
        for key in ("measured", "by_construction", "rows", "rows_passing"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        for key in ("tput_pct", "p95_ms", "loss_pct"):
            v = getattr(self, key)
            if v is not None:
                out[key] = {"median": v.median, "worst": v.worst}
        if self.known_emulator is not None:
            out["known_emulator"] = dict(self.known_emulator)
        return out

    def short(self) -> str:
        """The measured difference in a table cell: worst |Δ| against the upstream build, else
        the difference from Pantheon's 2017 table on its known emulator."""
        if self.by_construction:
            return "by construction"
        if self.tput_pct is not None and self.p95_ms is not None:
            rows = "" if self.rows is None else f" ({self.rows_passing}/{self.rows} rows)"
            return f"tput ≤{self.tput_pct.worst:.1f} %, p95 ≤{self.p95_ms.worst:.1f} ms{rows}"
        if self.known_emulator:
            k = self.known_emulator
            return f"2017 table: tput {k['tput_pct']:+.0f} %, p95 {k['p95_pct']:+.0f} %"
        return "not measured"

    def difference(self) -> str:
        """The measured difference in a few words, e.g. "against the reference build of X
        (2026-11-27): throughput |Δ| median 0.5 % (worst 2.4 %), ...; on Pantheon's 2017 known
        emulator throughput +7 %, p95 -2 %"."""
        if self.by_construction:
            return self.by_construction
        parts = []
        if self.tput_pct is not None and self.p95_ms is not None:
            parts.append(f"throughput |Δ| median {self.tput_pct.median:.1f} % (worst "
                         f"{self.tput_pct.worst:.1f} %), p95 |Δ| median {self.p95_ms.median:.1f} ms "
                         f"(worst {self.p95_ms.worst:.1f} ms)"
                         + ("" if self.rows is None else
                            f", {self.rows_passing}/{self.rows} rows pass"))
        if self.known_emulator:
            k = self.known_emulator
            parts.append(f"on Pantheon's 2017 known emulator throughput {k['tput_pct']:+.0f} %, "
                         f"p95 {k['p95_pct']:+.0f} %")
        if not parts:
            return "not measured"
        when = f" ({self.measured})" if self.measured else ""
        return f"against {self.against}{when}: " + "; ".join(parts)


def judge(fidelity: Fidelity | None, own_wrapper: bool) -> tuple[bool, str]:
    """Whether an implementation is, or measurably behaves as, the program Pantheon ran, and its
    difference in a few words: Pantheon's own wrapper is; otherwise its measured fidelity says
    (kernel TCP's by construction), and one never measured is not."""
    if own_wrapper:
        return True, "Pantheon's own wrapper"
    if fidelity is None:
        return False, "fidelity not measured"
    return fidelity.faithful, fidelity.difference()


@dataclass(frozen=True)
class Evidence:
    """One finding in an upstream repository, at a commit."""

    repo: str
    commit: str
    path: str  # file(s), with line numbers where they matter
    finding: str

    def short(self) -> str:
        return f"{self.repo} {self.commit[:7]} {self.path}"


@dataclass(frozen=True)
class Impossible:
    """Why no faithful port (or no reference build either) of what Pantheon ran under a label in
    one era can be made."""

    label: str
    era: str
    what: str  # "port" or "port and reference"
    reason: str
    evidence: tuple[Evidence, ...]

    def message(self) -> str:
        """The reason a target's label is not scored, with where to check it."""
        what = "port or reference" if "reference" in self.what else "port"
        return (f"no faithful {what} of Pantheon's {self.label} ({ERAS[self.era]} era) is "
                f"possible: {self.reason} (evidence: "
                + "; ".join(e.short() for e in self.evidence) + ")")

    def to_json(self) -> dict[str, Any]:
        return {"era": self.era, "what": self.what, "reason": self.reason,
                "evidence": [{"repo": e.repo, "commit": e.commit, "path": e.path,
                              "finding": e.finding} for e in self.evidence]}


@dataclass(frozen=True)
class Entry:
    """One scheme of the registry file."""

    name: str
    pantheon_labels: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    character: frozenset[Trait] = frozenset()
    note: str | None = None
    implementation: Implementation | None = None
    port_of: PortOf | None = None
    fidelity: Fidelity | None = None
    impossible: Mapping[str, Impossible] | None = None  # era -> why no faithful port can be made

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
        port = data.get("port_of")
        if port is not None and not set(port["eras"]) <= set(ERAS):
            raise ValueError(f"{REGISTRY_FILE}: {data['name']}: unknown era in {port['eras']}; "
                             f"use {', '.join(ERAS)}")
        impossible = {}
        for era, why in (data.get("impossible") or {}).items():
            if era not in ERAS or why.get("what") not in ("port", "port and reference") \
                    or not why.get("reason") or not why.get("evidence"):
                raise ValueError(f"{REGISTRY_FILE}: {data['name']}: impossible[{era!r}] needs an "
                                 f"era of {', '.join(ERAS)}, what (port, port and reference), "
                                 "a reason and evidence")
            impossible[era] = Impossible(
                str(data["name"]), era, str(why["what"]), str(why["reason"]),
                tuple(Evidence(str(e["repo"]), str(e["commit"]), str(e["path"]), str(e["finding"]))
                      for e in why["evidence"]))
        fidelity = data.get("fidelity")
        if fidelity is None and impl is not None and impl["kind"] == "kernel-tcp":
            fidelity = {"faithful": True, "against": "Pantheon's kernel schemes (iperf 2)",
                        "by_construction": "the Linux kernel's own congestion control, as "
                                           "Pantheon ran it under iperf 2"}
        return cls(str(data["name"]), tuple(data.get("pantheon_labels", ())),
                   tuple(data.get("aliases", ())), character, data.get("note"),
                   None if impl is None else Implementation(
                       str(impl["kind"]), str(impl["controller"]), str(impl["run_first"]),
                       str(impl.get("description", ""))),
                   None if port is None else PortOf(str(port["label"]), tuple(port["eras"]),
                                                    str(port.get("upstream", "")),
                                                    bool(port.get("busy_wait", False))),
                   None if fidelity is None else Fidelity.from_json(fidelity),
                   impossible or None)


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


def era_of(date: str | None, labels: Iterable[str] = ()) -> tuple[str, bool]:
    """The era of Pantheon's scheme builds a measurement of `date` (ISO) with these scheme
    labels belongs to, and whether it was assumed: without a date, 2017 if a label existed only
    then, else `ASSUMED_ERA`."""
    if not date:
        only_2017 = LABELS_OF_2017_ONLY.intersection(canonical_scheme(label) for label in labels)
        return ("2017" if only_2017 else ASSUMED_ERA), True
    return ("2017" if str(date)[:10] < ERA_2018_FROM else "2018"), False


def ports_of(label: str, era: str) -> tuple[Entry, ...]:
    """The implemented entries that port what Pantheon ran as `label` in `era`."""
    names = {label, canonical_scheme(label)}
    return tuple(e for e in implemented()
                 if e.port_of is not None and e.port_of.label in names and era in e.port_of.eras)


def impossibility(label: str, era: str | None = None) -> Impossible | None:
    """Why no faithful port of what Pantheon ran as `label` in `era` can be made, if the registry
    file says so; without an era (labels of our own data dirs), the first era that says so."""
    names = {label, canonical_scheme(label)}
    for e in ENTRIES:
        if e.impossible and names.intersection(e.names):
            eras = [era] if era is not None else list(ERAS)
            found = [e.impossible[x] for x in eras if x in e.impossible]
            if found:
                return found[0]
    return None


def impossible_labels() -> tuple[Impossible, ...]:
    """Every label and era of the registry file for which no faithful port can be made."""
    return tuple(why for e in ENTRIES if e.impossible for why in e.impossible.values())


def traits_of(names: Iterable[str]) -> frozenset[Trait]:
    """The character of a scheme known by any of `names`: the traits of every entry that answers
    to one of them (its name, Pantheon labels or aliases)."""
    wanted = set(names)
    return frozenset(t for e in ENTRIES if wanted.intersection(e.names) for t in e.character)


def having(trait: Trait) -> frozenset[str]:
    """Every name and label of the entries with `trait` (`calibrate.physics`' default hint sets)."""
    return frozenset(n for e in ENTRIES if trait in e.character for n in e.names)


__all__ = ["Entry", "Implementation", "PortOf", "Fidelity", "Spread", "Evidence", "Impossible",
           "ENTRIES", "TRAITS", "ERAS", "ASSUMED_ERA", "canonical_scheme", "implemented", "era_of",
           "ports_of", "impossibility", "impossible_labels", "traits_of", "having"]
