"""Calibrating a target made by real Mahimahi (shared/data/mahimahi-targets/M1: Linux cubic, reno
and bbr through `mm-delay 30 mm-link` of a constant 12 Mbit/s trace, DropTail 60, no loss; two
30 s runs each): the truth is inside the search space, and a short calibration returns it.

The full benchmark (all three targets, 24–40 evaluations per link kind, with and without the
targets' link logs) is experiments/bench_calibration.py --evaluator mahimahi-targets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calibrate.cluster.evaluator import Evaluator
from calibrate.evaluation import RaySettings
from calibrate.runs.calibration import Calibration
from calibrate.runs.config import RunConfig
from calibrate.runs.problem import links_for
from calibrate.targets.load import load_target

pytestmark = pytest.mark.needs_root

TARGETS = Path(__file__).resolve().parents[2] / "shared" / "data" / "mahimahi-targets"
TRUTH = {"rate": 12.0, "delay": 30, "queue": 60, "loss": 0.0}
FLOOR = 2.2  # f between the target's own two runs (the README's noise floor), %


@pytest.fixture(scope="module")
def m1(tmp_path_factory):
    if not TARGETS.is_dir():
        pytest.skip(f"the real-Mahimahi targets are not at {TARGETS}")
    target = load_target(str(TARGETS / "M1"))
    config = RunConfig(target=str(TARGETS / "M1"), budget=4, runtime_s=target.workload.runtime_s,
                       replicates=1, links=links_for(target), seed=0)
    run_dir = tmp_path_factory.mktemp("m1") / "run"
    calibration = Calibration.start(run_dir, config, target)
    with Evaluator(RaySettings(slots=8)) as evaluator:
        result = calibration.run(evaluator)
    journal = [json.loads(line) for line in (run_dir / "evaluations.jsonl").read_text().splitlines()]
    return calibration, result, journal


def test_the_truth_is_inside_the_search_space_and_the_logs_pick_the_link_kind(m1):
    calibration, result, _ = m1
    assert list(result["links"]) == ["constant"]  # the link logs show constant deliveries
    for name, (low, high) in calibration.problem.space.bounds.items():
        assert low <= TRUTH[name] <= high, (name, low, high)


def test_a_short_calibration_returns_the_emulator_that_made_the_target(m1):
    _, result, journal = m1
    best = result["best"]["params"]
    assert best["rate"] == pytest.approx(TRUTH["rate"], rel=0.05)
    assert abs(best["delay"] - TRUTH["delay"]) <= 2
    assert best["queue"] == pytest.approx(TRUTH["queue"], rel=0.25)
    assert best["loss"] <= 1e-3
    # One 30 s replicate per scheme scatters by about the floor; the benchmark's 48 evaluations
    # end at 1.03 x the floor, four here within three times it.
    assert min(r["f"] for r in journal) <= 3 * FLOOR
    ranges = result["best"]["ranges"]
    if ranges:  # four evaluations may be too few for a model; when there is one, it holds the truth
        for name, (low, high) in ranges.items():
            assert low - 1e-9 <= TRUTH[name] <= high + 1e-9, (name, low, high)
