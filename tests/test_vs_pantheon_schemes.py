"""experiments/vs_pantheon_schemes.py's pure parts: the matrix, the ports it finds in the registry,
the verdict rule, the tables, and the fidelity it writes into a copy of the registry file."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = ROOT / "calibrate" / "data" / "schemes.json"


@pytest.fixture(scope="module")
def bench():
    path = ROOT / "experiments" / "vs_pantheon_schemes.py"
    spec = importlib.util.spec_from_file_location("vs_pantheon_schemes", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_matrix_spans_the_issues_minimum(bench):
    rows = bench.MATRIX
    assert min(r.rate for r in rows) == 2 and max(r.rate for r in rows) == 100
    assert min(r.delay for r in rows) == 5 and max(r.delay for r in rows) == 150
    assert min(r.queue for r in rows if r.queue is not None) == 20 and any(r.queue is None for r in rows)
    assert min(r.loss for r in rows) == 0 and max(r.loss for r in rows) == 0.01
    assert {r.link for r in rows} == {"constant", "poisson"}
    assert rows[0].name == "10/28/inf/0%"
    assert rows[0].emulator(1).queue.kind == "infinite"
    lossy = next(r for r in rows if r.name == "12/40/100/1% poisson")
    emulator = lossy.emulator(7)
    assert (emulator.queue.packets, emulator.uplink_loss, emulator.link) == (100, 0.01, "poisson")
    assert emulator.trace_seed == 7


def test_each_replicate_draws_its_own_poisson_traces_losses_and_phase(bench):
    """A replicate's emulator is the same for both sides and differs from every other
    replicate's: its Poisson opportunities, its loss seed (and so its start-up phase)."""
    from calibrate import trace

    row = next(r for r in bench.MATRIX if r.name == "6/150/inf/0% poisson")
    base = row.emulator(42)
    one, two = (bench.replicate_emulator(base, n) for n in (1, 2))
    assert one == bench.replicate_emulator(base, 1)
    assert (one.trace_seed, two.trace_seed) == (42_001, 42_002)
    assert one.for_run(1).loss_seed != two.for_run(2).loss_seed
    first, second = (trace.poisson(row.rate, e.trace_seed)[:50] for e in (one, two))
    assert not (first == second).all()
    assert (one.rate_mbps, one.delay_ms, one.link, one.queue) == (base.rate_mbps, base.delay_ms, base.link, base.queue)


def test_srand_gives_both_sides_of_a_replicate_one_seed_and_every_replicate_its_own(bench, monkeypatch):
    import subprocess

    base = next(r for r in bench.MATRIX if r.name.startswith("10/28")).emulator(42)
    seeds = [bench.srand_of(bench.replicate_emulator(base, n)) for n in (1, 1, 2)]
    assert seeds[0] == seeds[1] != seeds[2] and all(0 <= s < 2**32 for s in seeds)
    assert bench.srand_of(bench.replicate_emulator(bench.MATRIX[0].emulator(5_000_000), 1)) == 5_000_000_001 % 2**32

    def seen() -> str:  # what a program started now finds
        return subprocess.run(["sh", "-c", 'echo "${PCC_SRAND-unset}"'], capture_output=True, text=True).stdout.strip()

    monkeypatch.delenv("PCC_SRAND", raising=False)
    with bench.srand_for_run(seeds[0]):
        assert seen() == str(seeds[0])
    assert seen() == "unset"
    monkeypatch.setenv("PCC_SRAND", "9")
    with bench.srand_for_run(None):  # without --srand a seed the user set stays
        assert seen() == "9"
    with bench.srand_for_run(3):
        assert seen() == "3"
    assert seen() == "9"


def test_rows_are_picked_by_name_prefix_or_quick(bench):
    assert [r.name for r in bench.select_rows(None, quick=True)] == list(bench.QUICK)
    assert len(bench.select_rows(None)) == len(bench.MATRIX)
    assert [r.name for r in bench.select_rows("2/5,100/")] == ["2/5/20/0%", "100/5/300/0%"]
    with pytest.raises(SystemExit):
        bench.select_rows("7/7")


def test_the_ports_are_the_registrys_port_of_entries_for_an_era(bench):
    registry = json.loads(REGISTRY.read_text())
    ports = bench.ports_of(registry, "2017")
    assert {label: p.name for label, p in ports.items()} == {
        "saturator": "saturator-2017", "greg_saturator": "greg_saturator-2017", "koho_cc": "koho_cc-2017",
        "copa": "copa-2017", "ledbat": "ledbat-2017", "vegas": "vegas-2017", "quic": "quic-2017",
        "sprout": "sprout-2017", "pcc": "pcc-2017", "verus": "verus-2017", "scream": "scream-2017"}
    assert set(bench.ports_of(registry, "2018")) == {"copa", "ledbat", "vegas", "taova", "indigo", "sprout",
                                                     "scream", "vivace", "quic", "pcc_experimental"}
    assert bench.ports_of(registry, "2018")["sprout"].name == "sprout-2017"  # the same program
    assert bench.ports_of(registry, "2018")["scream"].name == "scream-2018"
    assert bench.ports_of(registry, "2018")["vivace"].name == "vivace-2018"
    assert bench.ports_of(registry, "2018")["indigo"].name == "indigo-2018"
    assert bench.ports_of(registry, "2018")["copa"].name == "copa-2018"
    assert bench.ports_of(registry, "2018")["taova"].name == "taova-2018"
    assert bench.ports_of(registry, "2018")["quic"].name == "quic-2018"
    assert bench.ports_of(registry, "2018")["pcc_experimental"].name == "pcc_experimental-2018"
    assert "genericCC" in ports["copa"].upstream


def test_an_upstream_that_binds_its_own_port_is_connected_to_on_that_port(bench, tmp_path):
    # sprout's server binds the first free port of 60001-60999 whatever it is given.
    program = tmp_path / "sprout"
    program.write_text("#!/bin/sh\n[ \"$1\" = run_first ] && echo receiver\n")
    program.chmod(0o755)
    scheme = bench.reference_scheme("sprout", tmp_path, "alfalfa")
    assert scheme.available and scheme.run_first == "receiver"
    assert scheme.argv("receiver", 50001) == [str(program), "receiver", "50001"]
    assert scheme.argv("sender", 50001, "10.0.0.1") == [str(program), "sender", "10.0.0.1", "60001"]
    assert "60001" in scheme.command("sender", 50001)
    (tmp_path / "koho_cc").write_bytes(program.read_bytes())
    (tmp_path / "koho_cc").chmod(0o755)
    assert bench.reference_scheme("koho_cc", tmp_path).argv("sender", 50001, "h")[-1] == "50001"
    # the 2018 sprout (keithw/sprout 366e35c) listens on the port it is given
    assert bench.reference_scheme("sprout", tmp_path, "sprout", "2018").argv("sender", 50001, "h")[-1] == "50001"


@pytest.mark.parametrize("d_tput, d_p95, sd_tput, sd_p95, expected", [
    (4.9, -4.9, 0.0, 0.0, (True, "bounds")),
    (-8.0, 1.0, 9.0, 0.0, (True, "spread (tput)")),
    (8.0, 12.0, 9.0, 15.0, (True, "spread (tput, p95)")),
    (8.0, 1.0, 2.0, 0.0, (False, "fails tput")),
    (1.0, 6.0, 0.0, float("nan"), (False, "fails p95")),
    (float("nan"), 0.0, 0.0, 0.0, (False, "fails tput")),
])
def test_the_verdict_is_the_bounds_or_the_upstreams_own_spread(bench, d_tput, d_p95, sd_tput, sd_p95, expected):
    assert bench.verdict(d_tput, d_p95, sd_tput, sd_p95) == expected


def runs_frame(rows):
    """Runs of the benchmark's CSV shape from (bench, row, label, side, replicate, tput, p95, loss)."""
    return pd.DataFrame([{"bench": b, "row": r, "label": label, "side": side, "scheme": f"{side}-{label}",
                          "source": f"reference build of {label}: /ref/{label}" if side == "upstream" else None,
                          "replicate": rep, "runtime": 20.0, "date": "2026-11-27", "valid": True,
                          "tput": tput, "mean": p95 - 5, "p95": p95, "loss": loss}
                         for b, r, label, side, rep, tput, p95, loss in rows])


MATRIX_RUNS = [
    # copa: passes both rows by the bounds
    ("matrix", "A1", "copa", "upstream", 1, 10.0, 40.0, 0.0), ("matrix", "A1", "copa", "port", 1, 10.2, 42.0, 0.0),
    ("matrix", "A1", "copa", "upstream", 2, 10.0, 40.0, 0.0), ("matrix", "A1", "copa", "port", 2, 10.2, 42.0, 0.0),
    ("matrix", "B2", "copa", "upstream", 1, 5.0, 100.0, 1.0), ("matrix", "B2", "copa", "port", 1, 4.9, 99.0, 1.5),
    ("matrix", "B2", "copa", "upstream", 2, 5.0, 100.0, 1.0), ("matrix", "B2", "copa", "port", 2, 4.9, 99.0, 1.5),
    # ledbat: row B2 fails p95 (the upstream does not spread)
    ("matrix", "A1", "ledbat", "upstream", 1, 9.0, 128.0, 0.0), ("matrix", "A1", "ledbat", "port", 1, 9.0, 130.0, 0.0),
    ("matrix", "B2", "ledbat", "upstream", 1, 4.0, 60.0, 0.0), ("matrix", "B2", "ledbat", "port", 1, 4.0, 80.0, 0.0),
]
KNOWN_RUNS = [
    ("known", "A", "copa", "port", 1, 5.0, 34.0, 0.0), ("known", "A", "copa", "upstream", 1, 4.9, 33.0, 0.0),
    ("known", "A", "vegas", "port", 1, 9.3, 180.0, 0.0),
    ("known", "A", "quic", "port", 1, 1.25, 33.0, 0.0),
]
PANTHEON = pd.DataFrame([
    {"emulator": "A", "scheme": "copa", "runs": 1, "tput_mbps": 4.95, "p95_delay_ms": 32.97, "loss_pct": 0.0},
    {"emulator": "A", "scheme": "vegas", "runs": 1, "tput_mbps": 9.27, "p95_delay_ms": 146.34, "loss_pct": 0.0},
    {"emulator": "A", "scheme": "quic", "runs": 1, "tput_mbps": 1.20, "p95_delay_ms": 32.85, "loss_pct": 0.0},
    {"emulator": "D", "scheme": "vegas", "runs": 1, "tput_mbps": 9.30, "p95_delay_ms": 139.88, "loss_pct": 0.12},
])


def test_rows_and_labels_summarise_the_runs(bench):
    rows = bench.summarize(runs_frame(MATRIX_RUNS))
    copa = rows[rows["label"] == "copa"].set_index("row")
    assert copa.loc["A1", "Δtput %"] == pytest.approx(2.0) and copa.loc["A1", "Δp95"] == pytest.approx(2.0)
    assert copa.loc["B2", "Δloss"] == pytest.approx(0.5) and copa.loc["B2", "up sd p95"] == 0
    assert list(copa["pass"]) == ["PASS", "PASS"]
    ledbat = rows[rows["label"] == "ledbat"].set_index("row")
    assert (ledbat.loc["B2", "pass"], ledbat.loc["B2", "by"]) == ("FAIL", "fails p95")
    labels = bench.label_summary(rows).set_index("label")
    assert labels.loc["copa", "faithful"] and not labels.loc["ledbat", "faithful"]
    assert labels.loc["ledbat", "rows passing"] == 1 and labels.loc["ledbat", "worst |Δp95 ms|"] == 20
    assert labels.loc["copa", "median |Δtput %|"] == pytest.approx(2.0)


def test_three_flow_rows_run_pantheons_multi_flow_workload_and_show_each_flows_share(bench):
    """Pantheon's `-f 3 --interval 10`: flows 10 s apart over a 30 s run; the verdict is the
    total's, and the table shows how far the worst flow's throughput moved."""
    rows = [r for r in bench.MATRIX if r.flows == 3]
    assert rows and all(r.name.startswith("3x ") for r in rows)
    assert [r.name for r in bench.select_rows("3x ")] == [r.name for r in rows]
    workload = rows[0].workload(20.0)
    assert (workload.flows, workload.interval_s, workload.runtime_s) == (3, 10.0, 30.0)
    one = bench.MATRIX[0].workload(20.0)
    assert (one.flows, one.interval_s, one.runtime_s) == (1, 0.0, 20.0)
    runs = runs_frame([("matrix", "3x A", "copa", side, rep, 9.0, 40.0, 0.0)
                       for side in ("upstream", "port") for rep in (1, 2)])
    shares = {"upstream": (4.0, 3.0, 2.0), "port": (3.0, 3.0, 3.0)}
    for flow in (1, 2, 3):
        runs[f"tput {flow}"] = [shares[side][flow - 1] for side in runs["side"]]
    (row,) = bench.summarize(runs).to_dict("records")
    assert row["Δtput %"] == 0 and row["pass"] == "PASS"
    assert row["worst |Δflow tput| %"] == pytest.approx(50.0)  # flow 3: 2 -> 3 Mbit/s
    assert math.isnan(row["up extra conns"])  # runs recorded before the connections count
    # an upstream client that connected again in one run of two: half an extra connection a run
    runs["flows"], runs["connections"] = 3, [4 if (s, r) == ("upstream", 1) else 3
                                             for s, r in zip(runs["side"], runs["replicate"], strict=True)]
    (row,) = bench.summarize(runs).to_dict("records")
    assert (row["up extra conns"], row["port extra conns"]) == (0.5, 0.0)
    # a third flow that could not connect on the upstream's side in both runs and ended alone
    assert math.isnan(row["up ended alone"])  # runs recorded before the count
    runs["ended alone"] = [1 if s == "upstream" else 0 for s in runs["side"]]
    (row,) = bench.summarize(runs).to_dict("records")
    assert (row["up ended alone"], row["port ended alone"]) == (1.0, 0.0)
    # the recorded runtime is --runtime, the 1-flow runs', not the 3-flow rows' 30 s
    runs["flows"], runs["runtime"] = 3, 30.0
    single = runs_frame(MATRIX_RUNS).assign(flows=1)
    assert bench.single_flow_runtime(pd.concat([runs, single])) == 20.0
    assert bench.single_flow_runtime(runs) == 30.0  # only 3-flow rows ran


def test_the_known_emulator_is_set_beside_pantheons_table(bench):
    known = bench.known_summary(runs_frame(KNOWN_RUNS), PANTHEON).set_index("label")
    assert known.loc["copa", "ours Δtput %"] == pytest.approx(100 * (5.0 - 4.95) / 4.95)
    assert known.loc["copa", "up tput"] == 4.9 and known.loc["copa", "pass"] == "PASS"
    assert known.loc["vegas", "pass"] == "FAIL"  # p95 23 % over Pantheon's (emulator A, not D)
    assert math.isnan(known.loc["vegas", "up tput"])


def fidelities(bench):
    runs = runs_frame(MATRIX_RUNS + KNOWN_RUNS)
    rows = bench.summarize(runs)
    ports = bench.ports_of(json.loads(REGISTRY.read_text()), "2017")
    return bench.fidelity(ports, bench.label_summary(rows), bench.known_summary(runs, PANTHEON), runs)


def test_fidelity_per_port(bench):
    f = fidelities(bench)
    assert set(f) == {"copa-2017", "ledbat-2017", "vegas-2017", "quic-2017"}
    assert f["copa-2017"] == {
        "against": "reference build of copa", "measured": "2026-11-27", "rows": 2, "replicates": 2,
        "runtime_s": 20.0, "tput_pct": {"median": 2.0, "worst": 2.0}, "p95_ms": {"median": 1.5, "worst": 2.0},
        "loss_pct": {"median": 0.2, "worst": 0.5}, "rows_passing": 2, "faithful": True,
        "known_emulator": {"tput_pct": 1.0, "p95_pct": 3.1}}
    assert f["ledbat-2017"]["faithful"] is False and "known_emulator" not in f["ledbat-2017"]
    # no upstream build: only the known emulator, faithful by the 10 % rule
    assert f["vegas-2017"] == {"against": bench.KNOWN_AGAINST, "measured": "2026-11-27", "replicates": 1,
                               "runtime_s": 20.0, "known_emulator": {"tput_pct": 0.3, "p95_pct": 23.0},
                               "faithful": False}
    assert f["quic-2017"]["faithful"] is True


def test_pooled_invocations_count_every_run(bench):
    # two invocations' runs of one law, pooled by --report: the record says the fewest runs a
    # side has in a row, not the highest replicate number
    runs = runs_frame(MATRIX_RUNS)
    pooled = pd.concat([runs, runs], ignore_index=True)
    rows = bench.summarize(pooled)
    copa = rows[rows["label"] == "copa"]
    assert set(copa["n up"]) == set(copa["n port"]) == {4}
    ports = bench.ports_of(json.loads(REGISTRY.read_text()), "2017")
    f = bench.fidelity(ports, bench.label_summary(rows), bench.known_summary(pooled, PANTHEON), pooled)
    assert f["copa-2017"]["replicates"] == 4 and "replicates_by_row" not in f["copa-2017"]
    # more runs of one row only: the record gives every row's count
    first = pooled["row"] == pooled["row"].iloc[0]
    more = pd.concat([pooled, pooled[first & (pooled["label"] == "copa")]], ignore_index=True)
    rows = bench.summarize(more)
    f = bench.fidelity(ports, bench.label_summary(rows), bench.known_summary(more, PANTHEON), more)
    assert f["copa-2017"]["replicates"] == 4
    assert f["copa-2017"]["replicates_by_row"] == {"A1": 8, "B2": 4}


def test_fidelity_goes_into_a_copy_of_the_registry_touching_nothing_else(bench, tmp_path):
    # the registry as it was before any fidelity was written (each is one line of its entry)
    original = "\n".join(line for line in REGISTRY.read_text().splitlines() if '"fidelity"' not in line)
    assert json.loads(original)["schemes"]
    f = fidelities(bench)
    text = bench.with_fidelity(original, f)
    entries = {e["name"]: e for e in json.loads(text)["schemes"]}
    assert entries["copa-2017"]["fidelity"] == f["copa-2017"]
    assert entries["copa-2017"]["implementation"]["controller"] == "copa-2017"
    added = [line for line in text.splitlines() if line not in original.splitlines()]
    assert len(added) == len(f) and all(line.strip().startswith('"fidelity": {') for line in added)
    assert [line for line in text.splitlines() if '"fidelity"' not in line] == original.splitlines()
    # written again: replaced in place, not added twice
    changed = {**f, "copa-2017": {**f["copa-2017"], "faithful": False}}
    again = bench.with_fidelity(text, changed)
    assert again.count('"fidelity"') == text.count('"fidelity"') == len(f) + original.count('"fidelity"')
    assert json.loads(again)["schemes"] and "faithful\": false" in next(
        line for line in again.splitlines() if "reference build of copa" in line)
    # the file writer keeps an earlier matrix fidelity of a port scored only on the known emulator,
    # with that run's known-emulator numbers beside it
    copy = tmp_path / "schemes.json"
    copy.write_text(text)
    bench.write_fidelity({"copa-2017": {"against": bench.KNOWN_AGAINST, "faithful": True}}, copy)
    assert copy.read_text() == text
    measured_again = {"tput_pct": 3.1, "p95_pct": -4.2}
    bench.write_fidelity({"copa-2017": {"against": bench.KNOWN_AGAINST, "faithful": True,
                                        "known_emulator": measured_again}}, copy)
    copa = next(e for e in json.loads(copy.read_text())["schemes"] if e["name"] == "copa-2017")
    assert copa["fidelity"] == {**f["copa-2017"], "known_emulator": measured_again}
    copy.write_text(text)
    bench.write_fidelity({"vegas-2017": {"against": bench.KNOWN_AGAINST, "faithful": True}}, copy)
    assert json.loads(copy.read_text())["schemes"][-1] == json.loads(text)["schemes"][-1]
    vegas = next(e for e in json.loads(copy.read_text())["schemes"] if e["name"] == "vegas-2017")
    assert vegas["fidelity"] == {"against": bench.KNOWN_AGAINST, "faithful": True}
    # ... and the earlier known-emulator numbers of a port scored only on the matrix (--skip-known)
    known = {"tput_pct": 26.0, "p95_pct": -0.7}
    bench.write_fidelity({"copa-2017": {**f["copa-2017"], "known_emulator": known}}, copy)
    matrix_only = {k: v for k, v in f["copa-2017"].items() if k != "known_emulator"}
    bench.write_fidelity({"copa-2017": {**matrix_only, "rows_passing": 5}}, copy)
    copa = next(e for e in json.loads(copy.read_text())["schemes"] if e["name"] == "copa-2017")
    assert copa["fidelity"] == {**matrix_only, "rows_passing": 5, "known_emulator": known}
