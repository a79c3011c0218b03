"""The calibration loop's phases without emulation: `Calibration.run` with an evaluator that has
Ray's interface but computes each run's numbers from a smooth function of the emulator's
parameters.  The global search, the final local refinement, the journal's phases, resume, the
ranges in result.json and in the `calibrate run` display, and journals written before phases."""

from __future__ import annotations

import io
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("botorch")

from calibrate import refinement
from calibrate.evaluation import RunMetrics, RunTask
from calibrate.export import export
from calibrate.metrics import Stats
from calibrate.ranges import MEANING, Ranges
from calibrate.runs.calibration import Calibration
from calibrate.runs.config import RunConfig
from calibrate.runs.controller import REFINE_SHARE
from calibrate.runs.journal import JOURNAL, RESULT, RunDir
from calibrate.runs.progress import ProgressInfo
from calibrate.targets.load import load_target

BUDGET = 10


class AnalyticEvaluator:
    """`calibrate.cluster.evaluator.Evaluator`'s interface, one slot, runs done at once: throughput
    scales with rate / hidden rate, p95 delay grows with the distance from the hidden delay and
    queue; each replicate has 1 % noise seeded by its emulator and replicate."""

    slots = 1

    def __init__(self, calibration: Calibration, hidden: dict[str, float]) -> None:
        self.real = calibration.problem.real
        self.hidden = hidden
        self.done: dict[int, RunMetrics] = {}

    def submit(self, task: RunTask) -> int:
        e, h = task.emulator, self.hidden
        real = self.real[task.label]
        seed = [int(e.rate_mbps * 1e6), e.delay_ms, e.queue.packets, task.replicate]
        noise = 1.0 + 0.01 * np.random.default_rng(seed).standard_normal(2)
        tput = real.throughput * e.rate_mbps / h["rate"] * noise[0]
        delay = real.delay * (1.0 + 0.02 * abs(e.delay_ms - h["delay"])
                              + 0.3 * abs(math.log(e.queue.packets / h["queue"]))) * noise[1]
        ref = len(self.done)
        self.done[ref] = RunMetrics(task.candidate, task.label, task.replicate,
                                    {"all": Stats(tput, delay, real.loss)}, None, 1, (task.replicate,), 0.0)
        return ref

    def wait(self, refs: list[int], timeout: float | None) -> list[tuple[int, RunMetrics]]:
        return [(ref, self.done[ref]) for ref in refs]

    def cancel(self, refs: list[int]) -> None:
        pass


def hidden_of(calibration: Calibration) -> dict[str, float]:
    """A hidden emulator near (not at) the warm start, inside the bounds."""
    space, start = calibration.problem.space, calibration.problem.warm_start
    moved = {"rate": start["rate"] * 1.15, "delay": start["delay"] + 3,
             "queue": start["queue"] * 1.5, "loss": start["loss"]}
    return space.to_values(space.from_values(moved, clip=True))


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory) -> tuple[Path, dict[str, Any], dict[str, float]]:
    run_dir = tmp_path_factory.mktemp("loop") / "run"
    config = RunConfig(target="nepal", budget=BUDGET, runtime_s=10, replicates=2,
                       links=("constant",), seed=0)
    calibration = Calibration.start(run_dir, config, load_target("nepal"))
    hidden = hidden_of(calibration)
    return run_dir, calibration.run(AnalyticEvaluator(calibration, hidden)), hidden


def test_the_last_part_of_the_budget_refines_around_the_incumbent(calibrated):
    run_dir, result, _ = calibrated
    records = RunDir.open(run_dir).evaluations()
    phases = [r.phase for r in records]
    refined = phases.count("refine")
    assert len(records) == BUDGET and refined >= round(REFINE_SHARE * BUDGET)
    assert phases == ["search"] * (BUDGET - refined) + ["refine"] * refined
    link = result["links"]["constant"]
    assert link["refined"] == refined and link["stopped"] == "budget"
    # each refinement candidate is one step from the incumbent of the history before it
    space = Calibration.open(run_dir, read_only=True).problem.space
    for i, record in enumerate(records):
        if record.phase == "refine":
            before = rebuilt(run_dir, i)
            assert any(np.allclose(record.x, u)
                       for u in refinement.neighbours(space, before.searches["constant"].optimizer.best().x))


def rebuilt(run_dir: Path, lines: int, out: Path | None = None) -> Calibration:
    """The calibration as a resume after the first `lines` journal lines would rebuild it."""
    copy = out or run_dir.parent / f"prefix{lines}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(run_dir, copy)
    (copy / RESULT).unlink(missing_ok=True)
    text = (run_dir / JOURNAL).read_text().splitlines(keepends=True)
    (copy / JOURNAL).write_text("".join(text[:lines]))
    return Calibration.open(copy)


def test_resume_proposes_the_same_refinement(calibrated):
    run_dir, _, hidden = calibrated
    records = RunDir.open(run_dir).evaluations()
    calibration = rebuilt(run_dir, BUDGET - 1)
    calibration.run(AnalyticEvaluator(calibration, hidden))
    again = RunDir.open(calibration.run_dir).evaluations()
    assert again[-1].phase == records[-1].phase == "refine"
    assert again[-1].params == records[-1].params


def test_result_reports_the_ranges(calibrated, capsys):
    run_dir, result, hidden = calibrated
    link = result["links"]["constant"]
    ranges = Ranges.from_json(link)
    assert link["ranges_note"] == MEANING
    assert [r.name for r in ranges.ranges] == ["rate", "delay", "queue", "loss"]
    for r in ranges.ranges:
        assert r.low <= link["params"][r.name] <= r.high
    assert json.loads((run_dir / RESULT).read_text())["links"]["constant"]["ranges"] == link["ranges"]

    from calibrate.cli.common import print_result
    from calibrate.cli.run import Display
    from calibrate.runs.result import CalibrationResult

    print_result(CalibrationResult.from_json(result), run_dir, None)
    assert f"constant: {ranges.sentence()}" in capsys.readouterr().out.replace("\n", " ")
    # the live table shows them per link kind, with the phase
    info = ProgressInfo({"constant": 9}, BUDGET, {"constant": link["f"]}, 2, 1, 60.0, 6.0,
                        {"constant": None}, (), {"constant": True}, {"constant": ranges})
    from rich.console import Console

    console = Console(file=io.StringIO(), width=300)
    console.print(Display(live=False)._table(info))
    text = console.file.getvalue()
    assert "refining" in text and ranges.text() in text


def test_a_journal_from_before_phases_still_opens_and_exports(calibrated, tmp_path):
    run_dir, result, _ = calibrated
    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    shutil.rmtree(old / "export", ignore_errors=True)
    lines = [json.loads(line) for line in (old / JOURNAL).read_text().splitlines()]
    (old / JOURNAL).write_text("".join(
        json.dumps({k: v for k, v in r.items() if k not in ("phase", "confident", "version")}) + "\n"
        for r in lines))
    stale = {**result, "links": {link: {k: v for k, v in e.items() if not k.startswith("ranges")}
                                 for link, e in result["links"].items()}}
    (old / RESULT).write_text(json.dumps(stale))
    again = Calibration.open(old).result()["links"]["constant"]
    assert again["refined"] == 0 and again["params"] == result["links"]["constant"]["params"]
    report = json.loads((export(old) / "emulator.json").read_text())
    entry = report["links"]["constant"]
    assert entry["ranges"] is None and "delete RUN_DIR/result.json" in entry["ranges_note"]
    (old / RESULT).unlink()  # as the note says: computed again from the journal, with ranges
    report = json.loads((export(old) / "emulator.json").read_text())
    assert set(report["emulator"]["ranges"]) == {"rate_mbps", "delay_ms", "queue_packets", "uplink_loss"}
