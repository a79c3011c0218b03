"""The registry file (calibrate/data/schemes.json) as both sides read it: every entry with an
implementation is a scheme calibrate-scheme runs, and every scheme it runs has an entry; the
characters the search space's rules use; the canonical names of Pantheon's labels."""

from __future__ import annotations

import json
import subprocess

from calibrate import binaries
from calibrate.physics import DELAY_BASED, RATE_PROBING, SATURATING
from calibrate.scheme_registry import ENTRIES, TRAITS, canonical_scheme, having, implemented, traits_of
from calibrate.targets.load import load_target


def listed() -> dict[str, dict]:
    out = subprocess.run([str(binaries.find(binaries.SCHEME)), "list", "--json"], capture_output=True,
                         text=True, timeout=60, check=True)
    return {s["name"]: s for s in json.loads(out.stdout)}


def test_every_entry_with_an_implementation_runs_and_every_scheme_that_runs_has_an_entry():
    ours = listed()
    for e in implemented():
        assert e.name in ours, f"{e.name} is in schemes.json but calibrate-scheme does not know it"
        assert ours[e.name]["kind"] == e.implementation.kind, e.name
        assert ours[e.name]["run_first"] == e.implementation.run_first, e.name
        assert ours[e.name]["description"] == e.implementation.description, e.name
    names = {e.name for e in implemented()}
    # other kernel congestion controls this host offers are listed without an entry, by design
    extra = [n for n, s in ours.items() if n not in names and s["kind"] != "kernel-tcp"]
    assert not extra, f"calibrate-scheme runs {extra}, which schemes.json lacks"


def test_entries_are_unique_and_labels_agree_on_their_character():
    names = [e.name for e in ENTRIES]
    assert len(names) == len(set(names))
    for e in ENTRIES:
        assert e.character <= set(TRAITS)
        # a label that several entries answer to (our udp-copa stands in for Pantheon's copa)
        # means one character to the space's rules
        for label in e.names:
            claims = {t for other in ENTRIES if label in other.names for t in other.character}
            assert claims == e.character, (e.name, label)


def test_pantheons_labels_have_the_character_the_space_assumes():
    nepal = [s.label for s in load_target("nepal").schemes]
    expected = {
        "saturator": {"saturating", "rate-probing"}, "greg_saturator": {"saturating", "rate-probing"},
        "default_tcp": {"saturating"}, "quic": {"saturating"}, "verus": {"saturating"},
        "pcc": {"saturating"}, "copa": {"delay-based"}, "vegas": {"delay-based"},
        "ledbat": {"delay-based"}, "sprout": {"delay-based"}, "scream": {"delay-based"},
        "webrtc": {"delay-based"}, "koho_cc": {"delay-based"},
    }
    assert set(nepal) == set(expected)
    for label, traits in expected.items():
        assert traits_of([label]) == traits, label
    for name in ("bbr", "tcp_bbr", "quic-bbr", "udp-saturator"):
        assert "rate-probing" in traits_of([name])
    # the space's default hints are the same characters
    assert (SATURATING, DELAY_BASED, RATE_PROBING) == (
        having("saturating"), having("delay-based"), having("rate-probing"))
    assert {"pcc_allegro", "tcp_cubic", "quic_cubic"} <= SATURATING and "tcp_vegas" in DELAY_BASED


def test_pantheon_labels_map_to_canonical_names():
    assert canonical_scheme("default_tcp") == "cubic"
    assert canonical_scheme("TCP_BBR") == "bbr"
    assert canonical_scheme("quic") == "quic-cubic"
    assert canonical_scheme("pcc_allegro") == "pcc"
    assert canonical_scheme(" Sprout ") == "sprout"  # a label no entry renames is its own name
    assert canonical_scheme("saturator") == "saturator"  # an alias of ours is not a rename
