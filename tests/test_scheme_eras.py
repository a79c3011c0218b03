"""A Pantheon label means the program Pantheon ran in the target's era, and a calibration scores
only faithful implementations unless a scheme is named (calibrate.scheme_registry's eras and
fidelity, calibrate.schemes.Registry.resolve). Pure: registries built from Scheme values."""

from __future__ import annotations

import pytest

from calibrate.errors import InputError
from calibrate.scheme_registry import ENTRIES, Fidelity, PortOf, Spread, era_of, impossibility, ports_of
from calibrate.schemes import Registry, Scheme

FAITHFUL = Fidelity(True, "upstream build", "2026-11-27", tput_pct=Spread(1.0, 3.0),
                    p95_ms=Spread(0.5, 2.0), rows=8, rows_passing=8)
OFF = Fidelity(False, "Pantheon's 2017 table", known_emulator={"tput_pct": 99.8, "p95_pct": 9.2})


def scheme(name: str, aliases: tuple[str, ...] = (), port: PortOf | None = None,
           fidelity: Fidelity | None = None, kind: str = "udp", available: bool = True) -> Scheme:
    return Scheme(name, "receiver", ("prog", name), aliases, kind=kind, available=available,
                  unavailable_reason=None if available else "not here", port_of=port,
                  fidelity=fidelity)


def registry(*schemes: Scheme) -> Registry:
    return Registry(tuple(schemes))


def test_the_era_comes_from_the_targets_date():
    assert era_of("2017-01-03T21:30") == ("2017", False)
    assert era_of("2017-12-31") == ("2017", False)
    assert era_of("2018-01-01") == ("2018", False)
    assert era_of("2019-06-11T03-12") == ("2018", False)
    assert era_of(None) == ("2018", True)  # assumed, and said so
    assert era_of(None, ["cubic", "saturator"]) == ("2017", True)  # a label only 2017 had
    assert era_of("", ["default_tcp", "copa"]) == ("2018", True)


def test_a_label_resolves_to_the_port_of_its_era_and_never_to_a_stand_in_by_default():
    copa_2017 = scheme("copa-2017", port=PortOf("copa", ("2017",), "genericCC 5101b0a"), fidelity=FAITHFUL)
    stand_in = scheme("udp-copa", aliases=("copa",), fidelity=OFF)
    reg = registry(stand_in, copa_2017)
    assert reg.resolve("copa", "2017", substitutes=False) is copa_2017
    assert reg.resolve("copa", "2017") is copa_2017  # named: the faithful one still wins
    with pytest.raises(InputError, match=r"no faithful implementation of 'copa' \(2018 - 2020 era\).*"
                                         r"udp-copa stands in \(.*\+100 %.*name copa in --schemes"):
        reg.resolve("copa", "2018", substitutes=False)
    assert reg.resolve("copa", "2018") is stand_in  # named: the stand-in runs
    assert reg.resolve("copa") is stand_in  # no era (emulate's labels): no port is implied
    # a label that names one of ours exactly is the program that was measured (a data dir made
    # by `calibrate emulate`): it runs, stand-in or not
    assert reg.resolve("udp-copa", "2018", substitutes=False) is stand_in


def test_an_unmeasured_port_of_the_era_is_the_stand_in_named_before_a_generic_one():
    # a port whose fidelity is unmeasured (quic-2018 before its reference build) before a generic stand-in
    port = scheme("quic-2018", port=PortOf("quic", ("2018",), "google/proto-quic 77961f1"))
    generic = scheme("quic-cubic", aliases=("quic",), fidelity=OFF)
    reg = registry(generic, port)
    with pytest.raises(InputError, match=r"no faithful implementation of 'quic' \(2018 - 2020 era\).*"
                                         r"quic-2018 stands in \(fidelity not measured\)"):
        reg.resolve("quic", "2018", substitutes=False)
    assert reg.resolve("quic", "2018") is port


def test_an_unmeasured_or_unfaithful_port_is_not_faithful():
    port = PortOf("ledbat", ("2017", "2018"), "libutp")
    unmeasured = scheme("ledbat-2017", port=port)
    assert not unmeasured.faithful and unmeasured.difference() == "fidelity not measured"
    with pytest.raises(InputError, match="no faithful implementation"):
        registry(unmeasured).resolve("ledbat", "2018", substitutes=False)
    failed = scheme("ledbat-2017", port=port, fidelity=Fidelity(False, "libutp", tput_pct=Spread(9, 20),
                                                                p95_ms=Spread(8, 30), rows=8, rows_passing=3))
    assert "3/8 rows pass" in failed.difference()
    assert registry(failed).resolve("ledbat", "2017") is failed  # named: runs, flagged by the caller


def test_kernel_tcp_and_pantheons_wrappers_are_faithful_by_construction():
    cubic = next(e for e in ENTRIES if e.name == "cubic")
    assert cubic.fidelity is not None and cubic.fidelity.faithful and cubic.fidelity.by_construction
    kernel = scheme("vegas", kind="kernel-tcp", fidelity=cubic.fidelity, available=False)
    port = scheme("vegas-2017", port=PortOf("vegas", ("2017", "2018"), "tcp_vegas.c"), fidelity=FAITHFUL)
    wrapper = scheme("pantheon-vegas", aliases=("vegas",), kind="pantheon-wrapper")
    assert registry(kernel, port).resolve("vegas", "2017", substitutes=False) is port  # kernel lacks it
    assert registry(kernel, port, wrapper).resolve("vegas", "2017", substitutes=False) is wrapper
    assert wrapper.faithful


def test_every_port_in_the_registry_file_names_a_label_and_an_era():
    ports = [e for e in ENTRIES if e.port_of is not None]
    assert {e.port_of.label for e in ports if e.port_of} >= {
        "saturator", "greg_saturator", "koho_cc", "copa", "ledbat", "vegas", "quic", "pcc"}
    for e in ports:
        assert e.implementation is not None and e.port_of is not None and e.port_of.upstream
        assert e.name in {p.name for p in ports_of(e.port_of.label, e.port_of.eras[0])}
    # Pantheon's copa changed with genericCC at the start of 2018: one port per era
    assert [e.name for e in ports_of("copa", "2017")] == ["copa-2017"]
    assert [e.name for e in ports_of("copa", "2018")] == ["copa-2018"]
    # taova ran only from 2018 on (genericCC d0153f8's RemyCC with RemyCC-2014-100x.dna)
    assert [e.name for e in ports_of("taova", "2018")] == ["taova-2018"]
    assert ports_of("taova", "2017") == ()
    # quic: proto-quic 54's toy client capped the flow at ~9 KB per round trip; 60's does not
    assert [e.name for e in ports_of("quic", "2017")] == ["quic-2017"]
    assert [e.name for e in ports_of("quic", "2018")] == ["quic-2018"]
    # pcc_experimental (PCC-Uspace cd43e34) ran only from 2018 on
    assert [e.name for e in ports_of("pcc_experimental", "2018")] == ["pcc_experimental-2018"]
    assert ports_of("pcc_experimental", "2017") == ()
    # today's stand-ins stay, under their own names, with their measured difference
    for name in ("udp-copa", "udp-vegas", "udp-ledbat", "udp-saturator", "quic-cubic"):
        entry = next(e for e in ENTRIES if e.name == name)
        assert entry.fidelity is not None and not entry.fidelity.faithful


def test_a_label_no_port_can_reproduce_is_dropped_with_the_registry_files_reason_and_evidence():
    reg = registry(scheme("cubic", aliases=("default_tcp",), kind="kernel-tcp", fidelity=FAITHFUL))
    with pytest.raises(InputError, match=r"no faithful port or reference of Pantheon's webrtc "
                                         r"\(Dec 2016 - 2017 era\) is possible: .*chromium-browser.*"
                                         r"evidence: .*StanfordLPNG/webrtc 0ab51f9"):
        reg.resolve("webrtc", "2017", substitutes=False)
    with pytest.raises(InputError, match=r"no faithful port of Pantheon's fillp \(2018 - 2020 era\)"
                                         r".*--pantheon-dir.*fillthepipe/fill-the-pipe d6da145"):
        reg.resolve("fillp", "2018")  # named or not
    with pytest.raises(InputError, match=r"fillp_sheep \(2018 - 2020 era\).*fillthepipe/fillp-sheep"):
        reg.resolve("fillp_sheep", "2018")
    with pytest.raises(InputError, match=r"Pantheon's webrtc \(Dec 2016 - 2017 era\)"):
        reg.resolve("webrtc")  # no era (a data dir's label): still the registry's reason
    # the binaries Pantheon ran as fillp run through its own wrapper, which is faithful
    wrapper = scheme("pantheon-fillp", aliases=("fillp",), kind="pantheon-wrapper")
    assert registry(wrapper).resolve("fillp", "2018", substitutes=False) is wrapper
    # a stand-in runs only when named, with its measured difference, never silently
    stand_in = scheme("udp-webrtc", aliases=("webrtc",), fidelity=OFF)
    with pytest.raises(InputError, match=r"webrtc .* is possible: .*udp-webrtc stands in "
                                         r"\(.*\+100 %.*name webrtc in --schemes"):
        registry(stand_in).resolve("webrtc", "2018", substitutes=False)
    assert registry(stand_in).resolve("webrtc", "2018") is stand_in


def test_a_target_reports_such_a_label_as_dropped_with_that_reason():
    from calibrate.runs.config import RunConfig
    from calibrate.runs.problem import problem_of
    from calibrate.targets.load import load_target

    reg = registry(scheme("cubic", aliases=("default_tcp",), kind="kernel-tcp", fidelity=FAITHFUL))
    problem = problem_of(load_target("nepal"), RunConfig(target="nepal"), reg)
    assert problem.era == "2017" and problem.schemes == {"default_tcp": "cubic"}
    assert problem.dropped["webrtc"].startswith("no faithful port or reference of Pantheon's webrtc")
    assert "StanfordSNR/pantheon c3ff6bc src/webrtc.py" in problem.dropped["webrtc"]
    assert problem.dropped["verus"].startswith("unknown scheme")  # portable, just not ported yet


def test_the_registry_file_says_which_labels_no_port_can_reproduce_with_evidence():
    impossible = {(why.label, why.era): why for e in ENTRIES if e.impossible
                  for why in e.impossible.values()}
    assert set(impossible) == {("webrtc", "2017"), ("webrtc", "2018"), ("fillp", "2017"),
                               ("fillp", "2018"), ("fillp_sheep", "2018")}
    for why in impossible.values():
        assert why.reason and why.what in ("port", "port and reference")
        for evidence in why.evidence:
            assert evidence.repo.count("/") == 1 and evidence.path and evidence.finding
            assert len(evidence.commit) == 40 and int(evidence.commit, 16) >= 0
    assert impossible[("webrtc", "2017")].what == "port and reference"
    assert impossible[("fillp", "2018")].what == "port"  # its binaries run: Pantheon's wrapper
    assert impossibility("indigo", "2018") is None  # its weights are in the pinned repository
    indigo = next(e for e in ENTRIES if e.name == "indigo")
    assert indigo.note and "dagger/model/model.index" in indigo.note
    assert impossibility("webrtc", "2017") is impossible[("webrtc", "2017")]
    assert impossibility("copa", "2017") is None
