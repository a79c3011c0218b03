"""The studies end to end, for real: `calibrate ablate` and `calibrate loo` on a synthetic target
measured over a hidden lossy, buffered emulator, on an embedded Ray with real engines and
schemes; each killed with SIGKILL mid-study and continued with `calibrate resume`.

The hidden emulator: 10 Mbit/s, 40 ms one-way, DropTail 150 packets, 1 % uplink
loss, constant deliveries.  Four schemes whose behaviour depends on all four parameters: cubic
(loss-limited, fills the queue between losses), BBR (a standing queue of a BDP), Vegas (the
propagation delay) and the saturator (rate, queue, loss).  Budgets are tiny (runs of 6 s, one
replicate), so the studies share one run each (module fixtures) and the assertions are the
studies' goals, with tolerances for one-replicate noise.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from calibrate.runs.journal import JOURNAL, RESULT, RunDir
from calibrate.runs.loo import LeaveOneOut, held_out
from calibrate.runs.study import runs_of, score_part

pytestmark = pytest.mark.needs_root

HIDDEN = {"rate": 10.0, "delay": 40, "queue": 150, "loss": 0.01}
HIDDEN_MM = ("mm-delay 40 mm-loss uplink 0.01 mm-link 10mbps.trace 10mbps.trace "
             "--uplink-queue=droptail --uplink-queue-args=packets=150")
SCHEMES = "cubic,bbr,udp-vegas,udp-saturator"
LABELS = ("bbr", "cubic", "udp-saturator", "udp-vegas")
RUNTIME = "6"
STEP_BUDGET = 3
LOO_BUDGET = 5
CALIBRATE = [sys.executable, "-m", "calibrate"]


def _calibrate(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([*CALIBRATE, *args], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise AssertionError(f"calibrate {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def _leftovers(session: int) -> list[str]:
    """Processes still alive in a killed study's session: engines, endpoints, Ray's daemons
    (other sessions' are left alone: a benchmark may be running beside the tests)."""
    out = subprocess.run(["ps", "-eo", "sid=,pid=,args="], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.split(None, 1)[0] == str(session)]


def _wait_clean(session: int, timeout: float = 30) -> None:
    """Engines of killed workers stop at their own deadline; give them that long."""
    deadline = time.monotonic() + timeout
    while _leftovers(session) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _leftovers(session), _leftovers(session)


def _killed_then_resumed(args: list[str], run_dir: Path, evaluations: int):
    """Start a study, SIGKILL it (the driver and all it started) once `evaluations` are
    journaled and the next runs are under way, then `calibrate resume` it."""
    process = subprocess.Popen([*CALIBRATE, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    deadline = time.monotonic() + 300
    try:
        while not ((run_dir / JOURNAL).exists() and len(RunDir.open(run_dir, None).evaluations()) >= evaluations):
            assert process.poll() is None, process.stdout.read().decode()  # type: ignore[union-attr]
            assert time.monotonic() < deadline, f"fewer than {evaluations} evaluations in 300 s"
            time.sleep(0.2)
        time.sleep(1.0)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    before = RunDir.open(run_dir, None).evaluations()
    assert not (run_dir / RESULT).exists()
    _wait_clean(process.pid)
    done = _calibrate("resume", str(run_dir), "--quiet")
    print(done.stdout)
    return before, done


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    data_dir = tmp_path_factory.mktemp("hidden") / "data"
    _calibrate("emulate", "--emulator", HIDDEN_MM, "--schemes", SCHEMES, "--runtime", RUNTIME,
               "--replicates", "2", "--parallel", "8", "--out", str(data_dir))
    return data_dir


def _ablate_args(target: Path, run_dir: Path) -> list[str]:
    return ["ablate", str(target), "--order", "rate,delay,queue,loss", "--links", "constant",
            "--budget", str(STEP_BUDGET), "--runtime", RUNTIME, "--replicates", "1",
            "--out", str(run_dir), "--quiet"]


@pytest.fixture(scope="module")
def ablation(target, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("ablation") / "run"
    before, done = _killed_then_resumed(_ablate_args(target, run_dir), run_dir, STEP_BUDGET + 1)  # inside step 1
    return run_dir, before, done, json.loads((run_dir / RESULT).read_text())


@pytest.fixture
def ablation_of_this_try(ablation, first_try, target, tmp_path):
    """The module's ablation on a test's first try; on a rerun a fresh one, run straight through
    (the module's is the one that failed it: tests/conftest.py)."""
    if first_try:
        return ablation
    run_dir = tmp_path / "run"
    done = _calibrate(*_ablate_args(target, run_dir))
    return run_dir, None, done, json.loads((run_dir / RESULT).read_text())


@pytest.fixture(scope="module")
def loo(target, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("loo") / "run"
    args = ["loo", str(target), "--links", "constant", "--budget", str(LOO_BUDGET), "--runtime", RUNTIME,
            "--replicates", "1", "--out", str(run_dir), "--quiet"]
    before, done = _killed_then_resumed(args, run_dir, 2)
    return run_dir, before, done, json.loads((run_dir / RESULT).read_text())


def test_ablation_f_falls_as_delay_queue_and_loss_are_added(ablation_of_this_try):
    run_dir, _, done, result = ablation_of_this_try
    steps = result["steps"]
    assert [s["adds"] for s in steps] == ["rate", "delay", "queue", "loss"]
    f = [s["f"] for s in steps]
    print("ablation f per step:", [round(v, 1) for v in f], "final:", steps[-1]["emulator"])
    assert "rate only" in done.stdout and "unlimited queue" in done.stdout
    # With an unlimited queue the queueing delay dwarfs the propagation delay, so adding the
    # delay helps little; the step is warm-started from the rate-only best, so its f is no
    # higher but by the noise of one replicate.  On this lossy path no queue without loss fits
    # cubic's short queue and the saturator's full one together: the queue's step lowers f, but
    # not by much (it ended at 110 % in the four CI runs whose values were seen, from 132-219 %
    # with the delay); the loss brings it to a few per cent.
    assert f[1] <= f[0] * 1.05
    assert f[2] < f[1] and f[3] < 0.2 * f[2]
    p = steps[-1]["params"]
    assert abs(p["rate"] / HIDDEN["rate"] - 1) <= 0.1, p
    assert abs(p["delay"] - HIDDEN["delay"]) <= 4, p
    assert abs(p["queue"] / HIDDEN["queue"] - 1) <= 0.25, p
    assert 0.4 <= p["loss"] / HIDDEN["loss"] <= 2.5, p
    export = run_dir / "export"
    assert (export / "ablation.csv").exists() and (export / "ablation.png").exists()
    assert all((export / "steps" / f"{s['step']}-{s['adds']}" / "mahimahi.txt").exists() for s in steps)


def test_ablation_resumed_after_sigkill_lost_nothing_and_ran_nothing_twice(ablation):
    run_dir, before, _, result = ablation
    after = RunDir.open(run_dir, None).evaluations()
    assert after[:len(before)] == before
    searches = [r.study["search"] for r in after]
    assert [searches.count(s["search"]) for s in result["steps"]] == [STEP_BUDGET] * 4
    for name in set(searches):
        points = [r.emulator for r in after if r.study["search"] == name]
        assert len(set(points)) == len(points)
    # a step's warm start is the previous best, told, not run again
    for prev, step in zip(result["steps"], result["steps"][1:], strict=False):
        assert prev["emulator"] not in {r.emulator for r in after if r.study["search"] == step["search"]}


def test_loo_folds_share_evaluations(loo):
    run_dir, before, done, result = loo
    after = RunDir.open(run_dir, None).evaluations()
    assert after[:len(before)] == before and len(after) == LOO_BUDGET
    # no scheme run twice for the same point: one record per emulator, each scheme once in it
    assert len({r.emulator for r in after}) == len(after)
    for r in after:
        assert sorted(m["label"] for m in r.runs) == sorted(LABELS)
    share = result["sharing"]
    assert share["scheme_runs"] == LOO_BUDGET * 4
    assert share["independent_scheme_runs"] == LOO_BUDGET * 4 * 3 + 4
    assert f"{share['saved']} saved" in done.stdout and "held-out f" in done.stdout
    assert (run_dir / "export" / "loo.png").exists() and (run_dir / "export" / "loo.csv").exists()


def test_loo_held_out_error_comes_from_runs_whose_data_were_not_fitted(loo):
    run_dir, _, _, result = loo
    study = LeaveOneOut.open(run_dir, read_only=True)
    for i, fold in enumerate(result["folds"]):
        search = study.by_link["constant"][i]
        assert not set(fold["labels"]) & set(search.problem.schemes)  # f never reads it
        assert search.counted == LOO_BUDGET  # told every evaluation
        record = next(r for r in study.records if r.candidate == fold["candidate"])
        held = score_part(held_out(study.problem, study.folds[i]), study.config, runs_of(record))
        assert fold["held_out"]["f"] == pytest.approx(held.f)
        assert [row["scheme"] for row in fold["held_out"]["schemes"]] == fold["labels"]
    assert result["held_out"]["n"] + len(result["failed"]) == 4
