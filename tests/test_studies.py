"""The studies' loops without emulation (`calibrate.runs.loo`, `calibrate.runs.ablation`): a
fluid-model target and an evaluator with Ray's interface (`study_fixtures`).  Leave-one-out:
the folds share evaluations (nothing run twice, every fold told everything, each with its own
f), a fold's choice never reads its held-out scheme, a failed held-out scheme is not averaged,
resume continues as the original would.  Ablation: nested steps warm-started from the step
before (told, not run again), greedy trials, the Poisson step, the rise mark.  Both: export,
the CLI's export of a study, and the run kinds kept apart."""

from __future__ import annotations

import csv
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("botorch")

from calibrate.cli import main  # noqa: E402
from calibrate.errors import InputError  # noqa: E402
from calibrate.metrics import Stats  # noqa: E402
from calibrate.runs import ablation as ablation_module  # noqa: E402
from calibrate.runs.ablation import DEFAULTS, Ablation, change, parse_order  # noqa: E402
from calibrate.runs.calibration import Calibration  # noqa: E402
from calibrate.runs.config import UNLIMITED_QUEUE, RunConfig  # noqa: E402
from calibrate.runs.journal import JOURNAL, RESULT, RunDir  # noqa: E402
from calibrate.runs.loo import LeaveOneOut, held_out  # noqa: E402
from calibrate.runs.study import runs_of, score_part  # noqa: E402
from calibrate.study_export import export_study  # noqa: E402
from calibrate.targets.load import load_target  # noqa: E402
from study_fixtures import FluidEvaluator, write_target  # noqa: E402

LOO_BUDGET = 8
STEP_BUDGET = 4


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    path = write_target(tmp_path_factory.mktemp("target") / "target.csv")
    return path, load_target(str(path))


def _config(target, **changes) -> RunConfig:
    settings = {"budget": LOO_BUDGET, "runtime_s": 10.0, "replicates": 2, "links": ("constant",)}
    return RunConfig(target=str(target[0]), **{**settings, **changes})


@pytest.fixture(scope="module")
def loo(tmp_path_factory, target):
    """A leave-one-out study with 4 candidates' tasks in flight at a time (so folds propose
    points that are running for others)."""
    run_dir = tmp_path_factory.mktemp("loo") / "run"
    study = LeaveOneOut.start(run_dir, _config(target), target[1])
    evaluator = FluidEvaluator(slots=16)
    return run_dir, study.run(evaluator), evaluator


def test_folds_share_evaluations_and_run_nothing_twice(loo):
    run_dir, result, evaluator = loo
    records = RunDir.open(run_dir, None).evaluations()
    assert len(records) == LOO_BUDGET == result["evaluations"]
    # one candidate per point, each scheme run once per replicate for it
    assert len({r.emulator for r in records}) == len(records)
    tasks = [(t.candidate, t.label, t.replicate) for t in evaluator.submitted]
    assert len(set(tasks)) == len(tasks) == LOO_BUDGET * 4 * 2
    for r in records:
        assert sorted((m["label"], m["replicate"]) for m in r.runs) == sorted(
            (label, k) for label in ("bbr", "cubic", "saturator", "vegas") for k in (1, 2))
    # proposals took turns; every fold was told every evaluation
    assert {r.study["search"] for r in records} == {"cubic", "bbr", "vegas", "saturator"}
    study = LeaveOneOut.open(run_dir, read_only=True)
    for search in study.by_link["constant"]:
        assert search.counted == LOO_BUDGET and [r.index for r in search.records] == list(range(LOO_BUDGET))
    # the closing numbers: G folds × E evaluations × (G − 1) schemes × R, plus G × R held-out runs
    share = result["sharing"]
    assert share["scheme_runs"] == LOO_BUDGET * 4 * 2
    assert share["independent_scheme_runs"] == LOO_BUDGET * 4 * 3 * 2 + 4 * 2
    assert share["saved"] == share["independent_scheme_runs"] - share["scheme_runs"]


def test_a_fold_fits_without_its_held_out_scheme(loo, target, tmp_path):
    run_dir, result, _ = loo
    study = LeaveOneOut.open(run_dir, read_only=True)
    for i, fold in enumerate(result["folds"]):
        search = study.by_link["constant"][i]
        assert set(search.problem.schemes) == {"cubic", "bbr", "vegas", "saturator"} - set(fold["labels"])
        # the held-out error is the held-out scheme's runs at the fold's own emulator
        record = next(r for r in study.records if r.candidate == fold["candidate"])
        held = score_part(held_out(study.problem, study.folds[i]), study.config, runs_of(record))
        assert fold["held_out"]["f"] == pytest.approx(held.f)
        assert [row["scheme"] for row in fold["held_out"]["schemes"]] == list(fold["labels"])
    # Move every scheme's target numbers far away, one at a time: the fold that holds it out
    # chooses the same emulator with the same in-sample f; only its held-out error changes.
    for i, fold in enumerate(study.folds):
        label = fold.labels[0]
        moved = {k: (Stats(v.throughput * 3, v.delay * 3, v.loss) if k == label else v)
                 for k, v in study.problem.real.items()}
        other = replace(study.directory, problem=replace(study.problem, real=moved))
        again = LeaveOneOut.of(other, study.records).fold_result(i).to_json()
        assert again["candidate"] == result["folds"][i]["candidate"]
        assert again["in_sample"]["f"] == pytest.approx(result["folds"][i]["in_sample"]["f"])
        assert again["held_out"]["f"] != pytest.approx(result["folds"][i]["held_out"]["f"])


def test_the_summary_and_the_exports(loo):
    run_dir, result, _ = loo
    held = [f["held_out"]["f"] for f in result["folds"]]
    assert result["held_out"]["n"] == 4 and result["failed"] == []
    assert result["held_out"]["mean"] == pytest.approx(sum(held) / 4)
    out = export_study(run_dir)
    assert json.loads((out / "loo.json").read_text())["folds"][0]["fold"] == result["folds"][0]["fold"]
    with open(out / "loo.csv") as f:
        assert [row["held_out"] for row in csv.DictReader(f)] == [f["fold"] for f in result["folds"]]
    assert (out / "loo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for fold in result["folds"]:
        report = json.loads((out / "folds" / fold["fold"] / "emulator.json").read_text())
        assert report["links"]["constant"]["f"] == pytest.approx(fold["in_sample"]["f"])
        assert {r["scheme"] for r in report["links"]["constant"]["schemes"]} == (
            {"cubic", "bbr", "vegas", "saturator"} - set(fold["labels"]))
        assert (out / "folds" / fold["fold"] / "mahimahi.txt").exists()


class FailingEvaluator(FluidEvaluator):
    """Every run of one scheme fails."""

    def __init__(self, failing: str, slots: int = 1) -> None:
        super().__init__(slots)
        self.failing = failing

    def submit(self, task):
        ref = super().submit(task)
        if task.label == self.failing:
            self.done[ref] = replace(self.done[ref], flows=None, reason="run 1: sender quit")
        return ref


def test_a_fold_whose_held_out_scheme_failed_says_so_and_is_not_averaged(target, tmp_path, capsys):
    study = LeaveOneOut.start(tmp_path / "run", _config(target, budget=4), target[1])
    result = study.run(FailingEvaluator("bbr", slots=8))
    failed = next(f for f in result["folds"] if f["fold"] == "bbr")
    assert "sender quit" in failed["failed"]
    assert result["failed"] == ["bbr"] and result["held_out"]["n"] == 3
    others = [f["held_out"]["f"] for f in result["folds"] if f["fold"] != "bbr"]
    assert result["held_out"]["mean"] == pytest.approx(sum(others) / 3)
    assert main(["export", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "failed" in out and "not averaged" in out and "saved" in out


def _prefix(run_dir: Path, lines: int, out: Path) -> Path:
    shutil.copytree(run_dir, out)
    (out / RESULT).unlink(missing_ok=True)
    text = (run_dir / JOURNAL).read_text().splitlines(keepends=True)
    (out / JOURNAL).write_text("".join(text[:lines]))
    return out


def test_a_resumed_study_continues_as_the_original(target, tmp_path):
    """One candidate at a time, so nothing was in flight at any line: a study rebuilt from a
    journal prefix proposes what the original did next, and finishes the same."""
    original = tmp_path / "loo"
    LeaveOneOut.start(original, _config(target, budget=6), target[1]).run(FluidEvaluator())
    records = RunDir.open(original, None).evaluations()
    resumed = _prefix(original, 4, tmp_path / "resumed")
    LeaveOneOut.open(resumed).run(FluidEvaluator())
    again = RunDir.open(resumed, None).evaluations()
    assert [(r.emulator, r.study["search"]) for r in again] == [(r.emulator, r.study["search"]) for r in records]
    # the same for an ablation, cut inside step 1
    original = tmp_path / "ablation"
    Ablation.start(original, _config(target, budget=3), target[1], "greedy").run(FluidEvaluator())
    records = RunDir.open(original, None).evaluations()
    resumed = _prefix(original, 5, tmp_path / "ablation-resumed")
    Ablation.open(resumed).run(FluidEvaluator())
    again = RunDir.open(resumed, None).evaluations()
    assert [(r.emulator, r.study["search"]) for r in again] == [(r.emulator, r.study["search"]) for r in records]


class Interrupting(FluidEvaluator):
    """Ctrl-C after a number of waits (tasks still in flight are abandoned)."""

    def __init__(self, waits: int, slots: int) -> None:
        super().__init__(slots)
        self.waits = waits

    def wait(self, refs, timeout):
        self.waits -= 1
        if self.waits < 0:
            raise KeyboardInterrupt
        return super().wait(refs[: len(refs) // 2 or 1], timeout)


def test_an_interrupted_study_loses_nothing_and_repeats_nothing(target, tmp_path):
    run_dir = tmp_path / "run"
    study = LeaveOneOut.start(run_dir, _config(target, budget=8), target[1])
    with pytest.raises(KeyboardInterrupt):
        study.run(Interrupting(6, slots=16))
    before = RunDir.open(run_dir, None).evaluations()
    running = RunDir.open(run_dir, None).unfinished()
    assert 1 <= len(before) < 8 and running and not (run_dir / RESULT).exists()
    result = LeaveOneOut.open(run_dir).run(FluidEvaluator(slots=16))
    after = RunDir.open(run_dir, None).evaluations()
    assert after[:len(before)] == before and len(after) == result["evaluations"] == 8
    assert len({r.emulator for r in after}) == 8
    # the candidates that were running ran again first, as their folds proposed them
    again = {r.candidate: r for r in after[len(before):]}
    for p in running:
        assert again[p.candidate].x == p.x and again[p.candidate].study["search"] == p.study["search"]


@pytest.fixture(scope="module")
def greedy(tmp_path_factory, target):
    run_dir = tmp_path_factory.mktemp("ablation") / "run"
    config = _config(target, budget=STEP_BUDGET, links=("constant", "poisson"))
    study = Ablation.start(run_dir, config, target[1], "greedy")
    return run_dir, study.run(FluidEvaluator(slots=8))


def test_ablation_steps_are_nested_and_warm_started(greedy):
    run_dir, result = greedy
    steps = result["steps"]
    assert [s["link"] for s in steps] == ["constant"] * 4 + ["poisson"]
    assert steps[0]["adds"] == "rate" and steps[0]["free"] == ["rate"]
    assert steps[0]["params"]["delay"] == 0 and steps[0]["params"]["loss"] == 0
    assert steps[0]["params"]["queue"] == UNLIMITED_QUEUE
    assert result["defaults_text"].startswith("no added delay (0 ms), unlimited queue, no loss, constant")
    # greedy: step k tries every parameter not yet added and keeps the lowest f
    assert [len(s["trials"]) for s in steps] == [1, 3, 2, 1, 1]
    for s in steps[1:4]:
        chosen = [t for t in s["trials"] if t["chosen"]]
        assert len(chosen) == 1 and chosen[0]["adds"] == s["adds"]
        assert chosen[0]["f"] == min(t["f"] for t in s["trials"])
    assert sorted(s["adds"] for s in steps[1:4]) == ["delay", "loss", "queue"]
    free = [set(s["free"]) for s in steps]
    assert all(a < b for a, b in zip(free[:3], free[1:4], strict=True)) and free[4] == free[3]
    # each nested step was told the previous step's best evaluation first, without running it
    study = Ablation.open(run_dir, read_only=True)
    records = study.records
    for prev, step in zip(study.steps[:3], study.steps[1:4], strict=True):
        best = next(s for s in result["steps"] if s["step"] == prev.index)
        for trial in step.trials:
            assert trial.carried == 1 and trial.records[0].candidate == best["candidate"]
            own = [r for r in records if r.study["search"] == trial.name]
            assert len(own) == STEP_BUDGET and best["emulator"] not in {r.emulator for r in own}
    # f cannot rise from step to step beyond the noise (the fluid model's noise is measured)
    for s in steps[1:4]:
        assert s["rise"] is False and s["change"] <= s["change_noise"]
    assert steps[4]["rise"] is None and steps[4]["change"] is not None
    assert steps[3]["f"] < steps[0]["f"] / 10


def test_ablation_exports_each_step(greedy, capsys):
    run_dir, result = greedy
    assert main(["export", str(run_dir)]) == 0  # `calibrate export` of a study: export_study
    printed = capsys.readouterr().out
    assert "unlimited queue" in printed and "Figure 5" in printed
    out = run_dir / "export"
    for s in result["steps"]:
        report = json.loads((out / "steps" / f"{s['step']}-{s['adds']}" / "emulator.json").read_text())
        assert report["emulator"]["f"] == pytest.approx(s["f"])
    step0 = (out / "steps" / "0-rate" / "mahimahi.txt").read_text()
    assert "--uplink-queue" not in step0 and "mm-delay" not in step0 and "mm-loss" not in step0
    with open(out / "ablation.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["label"] for r in rows][:1] == ["rate only"] and rows[-1]["link"] == "poisson"
    assert (out / "ablation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_rise_beyond_the_noise_is_marked():
    for (f0, n0), (f1, n1), marked in (((50, 2.0), (53, 2.0), True), ((50, 2.0), (52, 2.0), False),
                                       ((50, None), (50.5, None), True), ((50, 1.0), (40, 1.0), False)):
        got = change({"f": f0, "noise": n0}, {"f": f1, "noise": n1}, nested=True)
        assert got["rise"] is marked and got["change"] == pytest.approx(f1 - f0)
    assert change({"f": 20, "noise": 1}, {"f": 25, "noise": 1}, nested=False)["rise"] is None


def test_orders_and_settings_are_checked(target, tmp_path):
    assert parse_order("greedy") == "greedy"
    assert parse_order("rate, queue ,loss") == ("rate", "queue", "loss")
    for bad in ("delay,rate", "rate,rate", "rate,speed", ""):
        with pytest.raises(InputError, match="--order"):
            parse_order(bad)
    with pytest.raises(InputError, match="drop --fix"):
        Ablation.start(tmp_path / "a", _config(target, fixed={"loss": 0.0}), target[1])
    one = load_target(str(write_target(tmp_path / "one.csv", labels=("cubic",))))
    with pytest.raises(InputError, match="at least two schemes"):
        LeaveOneOut.start(tmp_path / "l", _config(target), one)
    assert DEFAULTS == {"delay": 0, "queue": UNLIMITED_QUEUE, "loss": 0.0}
    assert ablation_module.ablation_space(
        Calibration.start(tmp_path / "c", _config(target), target[1]).problem.space
    ).bounds["queue"][1] == UNLIMITED_QUEUE


def test_run_kinds_are_kept_apart(loo, greedy):
    for run_dir, kind in ((loo[0], "leave-one-out"), (greedy[0], "ablation")):
        assert RunDir.open(run_dir, None).kind == kind
        with pytest.raises(InputError, match=f"holds a {kind} run, not a calibration.*calibrate resume"):
            Calibration.open(run_dir)
    with pytest.raises(InputError, match="not a leave-one-out"):
        LeaveOneOut.open(greedy[0])
    from calibrate.runs.kinds import KINDS

    assert KINDS["leave-one-out"].kind == LeaveOneOut.kind
    assert KINDS["ablation"].kind == Ablation.kind


def test_every_kind_of_run_is_exported_and_printed_by_the_cli():
    """The CLI's table of how each kind is exported and printed names exactly the kinds of run."""
    from calibrate.cli.export import presentations
    from calibrate.runs.kinds import KINDS

    assert set(presentations()) == set(KINDS)
