"""The run directory (calibrate.runs.journal): run.json holds the problem and gives it back
without the host; journal records round-trip; a run written by the code before calibrate.runs
(format 1, tests/data/run-v1, made by tests/data/make_run_v1.py at 946d45d) opens, exports as
that code exported it, and resumes to the very evaluations that code went on to make."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("botorch")

from calibrate.errors import InputError
from calibrate.export import export, read_report
from calibrate.metrics import Stats
from calibrate.runs import problem as runs_problem
from calibrate.runs.calibration import Calibration
from calibrate.runs.config import RunConfig
from calibrate.runs.journal import FORMAT_VERSION, JOURNAL, RESULT, Evaluation, RunDir
from calibrate.schemes import Registry
from calibrate.targets.load import load_target
from pantheon_fixtures import ERAS, write_data_dir
from test_calibration_loop import AnalyticEvaluator

DATA = Path(__file__).parent / "data"
V1 = DATA / "run-v1"
EXPECTED = json.loads((DATA / "run-v1.expected.json").read_text())


class LinkEvaluator(AnalyticEvaluator):
    """The loop test's stand-in, with Poisson deliveries 8 % slower and 5 % later, so the two
    link kinds' searches differ (as in make_run_v1.py)."""

    def submit(self, task):
        ref = super().submit(task)
        if task.emulator.link == "poisson":
            m = self.done[ref]
            self.done[ref] = replace(m, flows={k: Stats(v.throughput * 0.92, v.delay * 1.05, v.loss)
                                               for k, v in m.flows.items()})
        return ref


@pytest.fixture
def no_host(monkeypatch):
    """Asking the host for its schemes (the registry: `calibrate-scheme list --json`) fails."""
    def refuse(*args, **kwargs):
        raise AssertionError("the host's schemes were asked for")
    monkeypatch.setattr(runs_problem, "load_registry", refuse)


def _without(report: dict, *paths: tuple[str, ...]) -> dict:
    report = json.loads(json.dumps(report))
    for path in paths:
        node = report
        for key in path[:-1]:
            node = node[key]
        node.pop(path[-1], None)
    return report


def test_a_format_1_run_opens_and_exports_as_before_without_the_host(tmp_path, no_host):
    run_dir = tmp_path / "run"
    shutil.copytree(V1, run_dir)
    run = RunDir.open(run_dir)
    meta = json.loads((V1 / "run.json").read_text())
    assert run.version == 1 and "real" not in meta
    problem = run.problem
    assert problem.space.bounds == {k: tuple(v) for k, v in meta["space"]["bounds"].items()}
    assert problem.warm_start == meta["warm_start"] and problem.schemes == meta["schemes"]
    assert problem.dropped == meta["dropped"] and problem.workload.to_json() == meta["workload"]
    # the target numbers, taken again from target.json, are the ones that run scored against
    records = run.evaluations()
    assert len(records) == 9 and all(r.version == 1 for r in records)
    for row in records[0].schemes:
        real = problem.real[row["scheme"]]
        assert (real.throughput, real.delay, real.loss) == tuple(row["real"][k] for k in ("tput", "delay", "loss"))
    # exported exactly as the code that wrote it exported it (the result computed from the journal)
    report = json.loads((export(run_dir) / "emulator.json").read_text())
    volatile = [("provenance", "run", "run_dir"), ("provenance", "exported_at"),
                # changed on purpose since it was written: emulator.json explains its fields, and
                # descriptions show rates and losses to 4 significant digits (no float noise)
                ("fields",), ("emulator", "description"),
                *[("links", link, "emulator", "description") for link in report["links"]],
                # changed on purpose since: the ranges' rule is the sd of the difference
                # from the incumbent (the ranges it gives here are the same); and the GP's mean at
                # the incumbent, refitted from the journal, is compared to float precision below
                *[("links", link, key) for link in report["links"] for key in ("ranges_note", "model_mean")],
                # and a parameter counts only where the evaluations show f to depend on it (the
                # relevance rule, calibrate.optimizers.rules): ranges may only have widened
                ("emulator", "ranges"), ("emulator", "ranges_text"),
                *[("links", link, key) for link in report["links"] for key in ("ranges", "ranges_text")],
                # added since it was written: what ran for each label and its fidelity
                ("scheme_fidelity",)]
    # emulator.json 2 spells the schemes' numbers as run.json does: the old export, read as today's
    expected = read_report({"fields": None, **EXPECTED["export"]})
    assert _without(report, *volatile) == _without(expected, *volatile)
    assert set(report["scheme_fidelity"]) == set(meta["schemes"])
    assert report["scheme_fidelity"]["copa"]["ran_as"] == "udp-copa"
    assert not report["scheme_fidelity"]["copa"]["faithful"]  # a format-1 run scored a stand-in
    for name, link in report["links"].items():
        for key, (low, high) in EXPECTED["export"]["links"][name]["ranges"].items():
            assert link["ranges"][key][0] <= low and high <= link["ranges"][key][1], (name, key)
    assert report["emulator"]["description"].startswith("10.08 Mbit/s constant, 25 ms")
    for name, link in report["links"].items():
        assert link["model_mean"] == pytest.approx(EXPECTED["export"]["links"][name]["model_mean"], rel=1e-9)
        assert "difference from the incumbent" in link["ranges_note"]
    assert (V1 / JOURNAL).read_bytes() == (run_dir / JOURNAL).read_bytes()


def test_a_format_1_run_resumes_to_the_same_evaluations(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(V1, run_dir)
    old = (run_dir / JOURNAL).read_bytes()
    with open(run_dir / JOURNAL, "a") as f:  # killed while writing its next line
        f.write('{"index":9,"link":"pois')
    calibration = Calibration.open(run_dir)
    result = calibration.run(LinkEvaluator(calibration, EXPECTED["hidden"]))
    text = (run_dir / JOURNAL).read_bytes()
    assert text.startswith(old) and b'"link":"pois\n' not in text  # the torn line is cut off
    records = RunDir.open(run_dir).evaluations()
    assert [r.version for r in records] == [1] * 9 + [FORMAT_VERSION] * 5
    # what the old code's uninterrupted run evaluated after its 9th line, evaluated again
    for record, expected in zip(records, EXPECTED["journal"], strict=True):
        # the same proposals, to 1e-4: the GP's fits round differently on other CPUs, and the
        # difference grows a little with each proposal fitted to the last.  f exactly where the
        # rate is: the stand-in seeds its 1 % noise with the rate in micro-units, so a rate that
        # differs in its 7th digit draws other noise
        assert (record.link, record.candidate, record.phase) == \
            (expected["link"], expected["candidate"], expected["phase"])
        assert record.params == pytest.approx(expected["params"], rel=1e-4)
        same_noise = int(record.params["rate"] * 1e6) == int(expected["params"]["rate"] * 1e6)
        assert record.f == pytest.approx(expected["f"], rel=1e-6 if same_noise else 0.15)
    assert len(records) == len(EXPECTED["journal"])
    assert result["winner"] == EXPECTED["result"]["winner"]
    for link, expected in EXPECTED["result"]["links"].items():
        got = result["links"][link]
        assert (got["candidate"], got["refined"], got["evaluations"]) == \
            (expected["candidate"], expected["refined"], expected["evaluations"])
        assert got["params"] == pytest.approx(expected["params"], rel=1e-4)
        assert got["f"] == pytest.approx(expected["f"], rel=0.15)
    assert json.loads((run_dir / RESULT).read_text())["evaluations"] == 14
    assert json.loads((run_dir / "run.json").read_text()) == json.loads((V1 / "run.json").read_text())
    report = json.loads((export(run_dir) / "emulator.json").read_text())
    assert report["winner"] == EXPECTED["result"]["winner"] and report["evaluations"] == 14


def test_run_json_holds_the_problem(tmp_path, monkeypatch):
    write_data_dir(tmp_path / "data", ERAS["2018"], labels=("default_tcp", "vegas"), runs=2, flows=2)
    target = load_target(str(tmp_path / "data"))
    config = RunConfig(target="data", runtime_s=2.0, replicates=2, links=("constant",),
                       fixed={"loss": 0.0})
    started = Calibration.start(tmp_path / "run", config, target)
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["version"] == FORMAT_VERSION == 3
    assert {(r["scheme"], r["flow"]) for r in meta["real"]} == set(started.problem.real)
    monkeypatch.setattr(runs_problem, "load_registry", lambda *a, **k: pytest.fail("host asked"))
    run = RunDir.open(tmp_path / "run")
    assert run.problem == started.problem and run.config == config
    assert run.evaluations() == [] and run.read_result() is None


def test_a_scheme_this_host_lacks_stops_a_resume_not_an_export(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    shutil.copytree(V1, run_dir)
    monkeypatch.setattr(runs_problem, "load_registry", lambda *a, **k: Registry(()))
    calibration = Calibration.open(run_dir)
    with pytest.raises(InputError, match="'udp-saturator', which this run scores for saturator, "
                                         "greg_saturator, cannot run on this host"):
        calibration.schemes()
    assert (export(run_dir) / "emulator.json").exists()


def test_journal_records_round_trip_and_old_lines_read():
    line = json.loads((V1 / JOURNAL).read_text().splitlines()[0])
    old = Evaluation.from_json(line)
    assert old.version == 1 and old.phase == "search" and old.f == line["f"]
    new = replace(old, version=FORMAT_VERSION, phase="refine", confident=True)
    again = Evaluation.from_json(new.to_json())
    assert again == new and again.to_json() == new.to_json()
    assert new.to_json()["version"] == FORMAT_VERSION
    # a line from before the loop's phases: a search line, not confident
    bare = {k: v for k, v in line.items() if k not in ("phase", "confident")}
    assert Evaluation.from_json(bare).phase == "search" and not Evaluation.from_json(bare).confident
    with pytest.raises(InputError, match="line 3 lacks some of link, candidate, x"):
        Evaluation.from_json({"link": "constant"}, "line 3")
    with pytest.raises(InputError, match="format version 4.*upgrade calibrate"):
        Evaluation.from_json({**line, "version": 4})
    with pytest.raises(InputError, match="link kind 'square'"):
        Evaluation.from_json({**line, "link": "square"})


def test_a_newer_run_format_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(V1, run_dir)
    meta = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**meta, "version": FORMAT_VERSION + 1}))
    with pytest.raises(InputError, match="run format 4; this calibrate reads formats 1 to 3"):
        RunDir.open(run_dir)
    with pytest.raises(InputError, match="no such run directory"):
        RunDir.open(tmp_path / "nothing")
    with pytest.raises(InputError, match="already holds a calibration.*calibrate resume"):
        RunDir.check_new(run_dir)


def test_reading_a_run_directory_never_imports_ray(tmp_path):
    """Opening a run, reading its journal and result, and exporting it load neither Ray nor the
    Ray client (`calibrate.cluster.evaluator`): the wire values are `calibrate.evaluation`'s."""
    run_dir = tmp_path / "run"
    shutil.copytree(V1, run_dir)
    script = """if True:
        import json, sys
        from calibrate import study_export  # noqa: F401
        from calibrate.export import export
        from calibrate.runs.journal import RunDir
        from calibrate.runs.kinds import kind_of
        run_dir = sys.argv[1]
        run = RunDir.open(run_dir)
        assert run.problem.schemes and run.evaluations()
        assert kind_of(run_dir).open(run_dir, read_only=True).result()["links"]
        export(run_dir)
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "ray"
                                or m == "calibrate.cluster.evaluator")))
    """
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-c", script, str(run_dir)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
