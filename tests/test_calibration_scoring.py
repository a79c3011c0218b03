"""How a calibration turns a candidate's runs into f: per flow for multi-flow targets, labels that
share a scheme share its runs, failed replicates penalized.  No emulation: the runs' metrics
are given, the target is a real Pantheon data dir (written by the fixtures) read as any other."""

from __future__ import annotations

import pytest

from calibrate.evaluation import RunMetrics
from calibrate.metrics import Stats
from calibrate.runs.calibration import Calibration
from calibrate.runs.config import RunConfig
from calibrate.targets.load import load_target
from pantheon_fixtures import ERAS, write_data_dir


def _real(problem, label, flow):
    key = problem.key(label, flow)
    return problem.real[key]


def _metrics(candidate, label, replicate, flows):
    return RunMetrics(candidate, label, replicate, flows, None, 1, (replicate,), 1.0)


def test_two_flow_target_is_scored_per_flow(tmp_path):
    write_data_dir(tmp_path / "data", ERAS["2018"], labels=("default_tcp", "vegas"), runs=2, flows=2)
    target = load_target(str(tmp_path / "data"))
    config = RunConfig(target="data", runtime_s=2.0, replicates=2, links=("constant",),
                       schemes=("default_tcp", "vegas"))
    calibration = Calibration.start(tmp_path / "run", config, target)
    problem = calibration.problem
    assert problem.workload.flows == 2 and problem.flow_keys() == ["1", "2"]
    assert set(problem.real) == {(label, f) for label in ("default_tcp", "vegas") for f in ("1", "2")}

    # Emulated: flow 1 exactly the target's, flow 2 with 10 % more throughput; both replicates.
    runs = []
    for task in calibration.tasks(0, None):  # type: ignore[arg-type]  # no emulator: the tasks are only read
        flows = {}
        for flow in ("1", "2"):
            r = _real(problem, task.label, flow)
            flows[flow] = Stats(r.throughput * (1.1 if flow == "2" else 1.0), r.delay, r.loss)
        runs.append(_metrics(0, task.label, task.replicate, flows))
    error = calibration.score(runs)
    # per key (|Δtput|/tput + |Δdelay|/delay)/2: 0 for flow 1, 5 % for flow 2; mean of 4 keys
    assert error.f == pytest.approx(2.5)
    assert error.throughput == pytest.approx(5.0) and error.delay == pytest.approx(0.0)


def test_labels_of_one_scheme_share_its_runs_and_failures_are_penalized(tmp_path):
    # Named, Pantheon's saturator and greg_saturator of 2018 (no port: the saturators were gone
    # by then) both run our stand-in udp-saturator: one set of runs
    write_data_dir(tmp_path / "data", ERAS["2018"], labels=("saturator", "greg_saturator", "vegas"),
                   runs=2)
    # dated 2019 (undated, the saturator labels would mean their 2017 programs, each its own port)
    target = load_target(str(tmp_path / "data")).with_provenance(date="2019-03-01T12:00")
    config = RunConfig(target="data", runtime_s=2.0, replicates=2, links=("constant",),
                       schemes=("saturator", "greg_saturator", "vegas"))
    calibration = Calibration.start(tmp_path / "run", config, target)
    problem = calibration.problem
    tasks = calibration.tasks(0, None)  # type: ignore[arg-type]  # no emulator: the tasks are only read
    shared = next(t.label for t in tasks if t.label != "vegas")  # the first of the two labels
    assert shared in ("saturator", "greg_saturator")
    assert sorted((t.label, t.replicate) for t in tasks) == [
        (shared, 1), (shared, 2), ("vegas", 1), ("vegas", 2)]

    runs = [_metrics(0, shared, r, {"all": Stats(5.0, 50.0, 0.01)}) for r in (1, 2)]
    runs += [RunMetrics(0, "vegas", r, None, "run 1: the sender quit early", 2, (r, r + 500), 1.0)
             for r in (1, 2)]
    error = calibration.score(runs)
    rows = {s.key: s for s in error.schemes}
    assert rows["saturator"].emulated == rows["greg_saturator"].emulated  # the same runs
    assert rows["saturator"].replicates == rows["greg_saturator"].replicates == 2
    assert rows["vegas"].penalized and "sender quit early" in error.penalized["vegas"]
    # the penalty (200 % per term) enters f like any scheme's error
    expected = [((abs(5.0 - problem.real[label].throughput) / problem.real[label].throughput
                  + abs(50.0 - problem.real[label].delay) / problem.real[label].delay) / 2)
                for label in ("saturator", "greg_saturator")] + [2.0]
    assert error.f == pytest.approx(100 * sum(expected) / 3)
