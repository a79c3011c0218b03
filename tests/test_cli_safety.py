"""What guards a person's hours of work, tried as they meet it: `calibrate` run as a
real process, with real signals and, where it matters, real emulations.

- one writer per run: a second `run`/`resume` on a run directory is refused with the writer
  named; the lock dies with its holder; `run` and `resume` racing on one directory never both
  write, and `export` reads a run while it is written;
- no work lost to a late error: every output path and every input (trace contents included)
  is checked before anything is written or Ray starts; a failure after the work prints the
  result first, then the error;
- interruptions: SIGINT and SIGTERM end `run`, `emulate` and `selftest` with one line and status
  130/143, no traceback or stack dump, no scratch directory left; a resume runs the candidates
  that were running first;
- exports readable by every user; figures laid out to be read (legend outside the data, labels
  inside the canvas, no axis magnifying noise);
- a target's impossible values refused by `target show` as by `run`, in one line;
- a quiet stderr: no library warning, no Ray notice;
- messages that name the problem and the fix;
- one vocabulary: the new spellings, the old ones as hidden aliases that say so in one line,
  `--version`, and an emulator.json that says what its numbers are.

The real emulations are short (runtime 4 s, budget 4, one link kind, two slots, one scheme).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from calibrate.errors import RunBusy
from calibrate.evaluation import RunMetrics, RunTask
from calibrate.metrics import Stats
from calibrate.runs import lock
from calibrate.runs.calibration import Calibration
from calibrate.runs.config import RunConfig
from calibrate.runs.journal import JOURNAL, PROPOSALS, RESULT, RunDir
from calibrate.targets.load import load_target

CALIBRATE = [sys.executable, "-m", "calibrate"]
RUN = ["--runtime", "4", "--replicates", "1", "--budget", "4", "--links", "constant", "--slots", "2",
       "--optimizer", "random", "--quiet"]
TARGET = """\
# name: tiny
# runtime_s: 5
scheme,runs,tput_mbps_mean,tput_mbps_std,delay_p95_ms_mean,delay_p95_ms_std,loss_pct_mean,loss_pct_std
cubic,3,7.5,0.2,85,3,0.3,0.1
"""
BAD_TRACES = {"empty": "", "decreasing": "5\n3\n", "all-zero": "0\n0\n0\n", "garbage": "hello\nworld\n"}


@pytest.fixture
def target(tmp_path) -> Path:
    path = tmp_path / "tiny.csv"
    path.write_text(TARGET)
    return path


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    """A private $TMPDIR (scratch directories are checked there); Ray's own files where Ray
    keeps them (its socket paths must stay short)."""
    scratch = tmp / "scratch"
    scratch.mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(scratch), "RAY_TMPDIR": "/tmp", "OMP_NUM_THREADS": "1",
            **extra}


def _cli(tmp: Path, *args: Any, timeout: float = 600, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess:
    return subprocess.run([*CALIBRATE, *map(str, args)], capture_output=True, text=True,
                          env=env or _env(tmp), cwd=tmp, timeout=timeout)


def _terminal_signals() -> None:
    """SIGINT as a terminal's foreground command gets it. A shell without job control starts its
    background commands with SIGINT ignored (`./scripts/test &` from a script, or under nohup),
    every child inherits that, and Python then leaves Ctrl-C ignored too."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(tmp: Path, *args: Any) -> subprocess.Popen:
    """A command in the background, in its own process group (a terminal's Ctrl-C reaches the
    whole group), with SIGINT as a terminal leaves it however the tests were started."""
    return subprocess.Popen([*CALIBRATE, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(tmp), cwd=tmp,
                            start_new_session=True, preexec_fn=_terminal_signals)


def _until(condition: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _scratch(tmp: Path) -> list[str]:
    return sorted(p.name for p in (tmp / "scratch").glob("calibrate-*"))


def _refused(done: subprocess.CompletedProcess) -> str:
    """A refusal: status 2, one line, no traceback; its text."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("calibrate: error: "), done.stderr
    return lines[0]


def _ended_by(done_err: str, name: str) -> str:
    """The end of a command stopped by a signal: one line naming it, no traceback, no stack
    dump (Ray's C++ handler prints '*** SIGTERM received ...' and 'PC: @ ...')."""
    assert "Traceback" not in done_err and "received at time" not in done_err
    assert "PC: @" not in done_err, done_err
    interrupted = [line for line in done_err.splitlines() if "interrupted" in line]
    assert interrupted == [done_err.strip().splitlines()[-1]], done_err
    assert interrupted[0].startswith(f"calibrate: interrupted ({name})"), done_err
    return interrupted[0]


def _run_dir(tmp: Path, target: Path) -> Path:
    """A run directory as `calibrate run` leaves it before its first evaluation."""
    config = RunConfig(target=str(target), budget=4, runtime_s=4, replicates=1,
                       links=("constant",), optimizer="random")
    return Calibration.start(tmp / "R", config, load_target(str(target))).run_dir


def _holder(directory: Path) -> subprocess.Popen:
    """Another process holding the run directory's lock until it is killed."""
    code = ("import sys, time\nfrom calibrate.runs.journal import RunDir\n"
            "with RunDir.claim(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(600)\n")
    process = subprocess.Popen([sys.executable, "-c", code, str(directory)], stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


# ----------------------------------------------------------------------------------------------
# One writer per run


def test_a_second_writer_is_refused_with_the_first_named_and_the_lock_dies_with_it(tmp_path, target):
    run_dir = _run_dir(tmp_path, target)
    holder = _holder(run_dir)
    try:
        found = lock.holder(run_dir)
        assert found is not None and found.pid == holder.pid and found.host == socket.gethostname()
        with pytest.raises(RunBusy, match=f"pid {holder.pid} on {socket.gethostname()} since"):
            with lock.hold(run_dir):
                pass
        text = _refused(_cli(tmp_path, "resume", run_dir, "--slots", "2"))
        assert f"pid {holder.pid} on {socket.gethostname()} since " in text
        assert f"`kill {holder.pid}`" in text and f"`calibrate resume {run_dir}`" in text
        # `run --out` on it: told that a writer runs there, not to resume it
        text = _refused(_cli(tmp_path, "run", target, *RUN, "--out", run_dir))
        assert "is writing now" in text and f"pid {holder.pid}" in text
        assert "choose another --out" in text and "calibrate resume" not in text
    finally:
        holder.kill()  # SIGKILL: no cleanup of its own
        holder.wait()
    assert lock.holder(run_dir) is None
    with lock.hold(run_dir):  # the kernel released it: a crashed writer never blocks a resume
        pass
    text = _refused(_cli(tmp_path, "run", target, *RUN, "--out", run_dir))
    assert f"continue it with `calibrate resume {run_dir}`" in text


def test_writers_racing_for_one_directory_never_overlap(tmp_path):
    """Four processes try for three seconds to write one directory: every write happens while
    its writer holds the lock alone (starts and ends pair up), and several of them got it."""
    (tmp_path / "R").mkdir()
    log = tmp_path / "writes.log"
    code = ("import os, sys, time\nfrom calibrate.errors import RunBusy\nfrom calibrate.runs import lock\n"
            "end = time.monotonic() + 3\n"
            "while time.monotonic() < end:\n"
            "    try:\n"
            "        with lock.hold(sys.argv[1]):\n"
            "            with open(sys.argv[2], 'a') as f: f.write(f'start {os.getpid()}\\n')\n"
            "            time.sleep(0.03)\n"
            "            with open(sys.argv[2], 'a') as f: f.write(f'end {os.getpid()}\\n')\n"
            "    except RunBusy:\n"
            "        pass\n"
            "    time.sleep(0.01)\n")
    racers = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "R"), str(log)])
              for _ in range(4)]
    assert [r.wait(timeout=60) for r in racers] == [0] * 4
    lines = log.read_text().splitlines()
    assert len(lines) >= 4 and len(lines) % 2 == 0
    for start, end in zip(lines[::2], lines[1::2], strict=True):
        assert start.split()[0] == "start" and end == f"end {start.split()[1]}", lines
    assert len({line.split()[1] for line in lines}) >= 2


# ----------------------------------------------------------------------------------------------
# No work lost to a late error


def test_slots_0_and_nothing_to_search_are_refused_before_run_json(tmp_path, target):
    run_dir = tmp_path / "R"
    text = _refused(_cli(tmp_path, "run", target, *RUN, "--slots", "0", "--out", run_dir))
    assert "--slots must be at least 1" in text
    assert not run_dir.exists()
    text = _refused(_cli(tmp_path, "run", target, *RUN, "--out", run_dir, "--fix", "rate=8",
                         "--fix", "delay=30", "--fix", "queue=60", "--fix", "loss=0"))
    assert "nothing is left to search" in text and "`calibrate score " in text
    assert "--emulator 'mm-delay 30 mm-link 8mbps.trace 8mbps.trace --uplink-queue=droptail " \
           "--uplink-queue-args=packets=60'" in text
    assert not run_dir.exists()


def test_resume_of_a_run_that_fixed_everything_points_to_score(tmp_path, target):
    """A directory such a run left behind before it was refused up front."""
    run_dir = _run_dir(tmp_path, target)
    meta = json.loads((run_dir / "run.json").read_text())
    meta["config"]["fixed"] = {"rate": 8, "delay": 30, "queue": 60, "loss": 0}
    (run_dir / "run.json").write_text(json.dumps(meta))
    text = _refused(_cli(tmp_path, "resume", run_dir))
    assert f"{run_dir} cannot be continued" in text and "`calibrate score " in text
    assert "dim must be" not in text


def test_output_paths_are_checked_before_any_work(tmp_path, target):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    emulator = "mm-delay 40 mm-link 7.5mbps.trace 7.5mbps.trace"
    for path, why in ((tmp_path / "no-such-dir" / "x.json", "no such directory"),
                      (tmp_path, "is a directory")):
        done = _cli(tmp_path, "score", target, "--emulator", emulator, "--json-out", path)
        assert why in _refused(done) and "scoring" not in done.stderr  # Ray never started
    assert "is a file" in _refused(_cli(tmp_path, "export", tmp_path / "R", "--out", blocker / "x"))
    done = _cli(tmp_path, "target", "plot", target, "--out", tmp_path / "t.xyz")
    assert "cannot write .xyz images" in _refused(done) and ".png" in done.stderr
    assert not (tmp_path / "t.xyz").exists()
    done = _cli(tmp_path, "emulate", "--emulator", emulator, "--schemes", "cubic", "--runtime", "2",
                "--out", blocker)
    assert "is not a directory" in _refused(done)


@pytest.mark.parametrize("kind", sorted(BAD_TRACES))
def test_trace_contents_are_checked_before_anything_is_written(tmp_path, target, kind):
    """A bad trace file refused by `emulate` (a Mahimahi command line) before its data dir is
    made, and by `score` (Pantheon arguments) before Ray starts."""
    bad = tmp_path / f"{kind}.trace"
    bad.write_text(BAD_TRACES[kind])
    good = tmp_path / "12.trace"
    good.write_text("1\n")
    data_dir = tmp_path / "data"
    done = _cli(tmp_path, "emulate", "--emulator", f"mm-link {good} {bad}", "--schemes", "cubic",
                "--runtime", "2", "--out", data_dir)
    assert f"bad downlink trace {bad}" in _refused(done)
    assert not data_dir.exists()
    done = _cli(tmp_path, "score", target, "--emulator",
                f"--uplink-trace {bad} --downlink-trace {good} --prepend-mm-cmds 'mm-delay 10'")
    assert f"bad uplink trace {bad}" in _refused(done) and "scoring" not in done.stderr


# ----------------------------------------------------------------------------------------------
# Exports, scratch directories


def test_exported_files_are_readable_by_every_user(tmp_path):
    from test_export import make_run

    run_dir = make_run(tmp_path)
    done = _cli(tmp_path, "export", run_dir)
    assert done.returncode == 0, done.stderr
    out = run_dir / "export"
    traces = list(out.rglob("*.trace"))
    assert traces
    for path in [out, *out.rglob("*")]:
        mode = path.stat().st_mode
        assert mode & 0o004, f"{path} is not readable by others: {oct(mode)}"
        if path.is_dir():
            assert mode & 0o001, f"{path} cannot be entered by others: {oct(mode)}"


def test_scratch_of_dead_processes_is_swept_and_nothing_else(tmp_path, target):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    names = {"dead": f"calibrate-p{dead}-c3-cubic-abcd1234",
             "alive": f"calibrate-p{os.getpid()}-c4-cubic-abcd1234",  # this test's own process
             "unowned": "calibrate-c24-bbr-abcd1234", "kept": "calibrate-selftest-abcd1234"}
    for name in names.values():
        (scratch / name).mkdir()
        (scratch / name / "file").write_text("x")
    done = _cli(tmp_path, "target", "show", target)
    assert done.returncode == 0, done.stderr
    assert _scratch(tmp_path) == sorted(v for k, v in names.items() if k != "dead")


# ----------------------------------------------------------------------------------------------
# Resume runs the interrupted candidates first (the loop, without emulation)


class Stalling:
    """Ray's interface with `slots` tasks at once, each `wait` finishing the oldest one, numbers
    from a smooth function of the emulator; after `finish` tasks, Ctrl-C."""

    def __init__(self, slots: int, finish: int | None = None) -> None:
        self.slots, self.finish = slots, finish
        self.tasks: dict[int, RunTask] = {}
        self.submitted: list[int] = []  # candidate ids, in order
        self.finished = 0

    def submit(self, task: RunTask) -> int:
        self.tasks[len(self.tasks)] = task
        self.submitted.append(task.candidate)
        return len(self.tasks) - 1

    def wait(self, refs: list[int], timeout: float | None) -> list[tuple[int, RunMetrics]]:
        if self.finish is not None and self.finished >= self.finish:
            raise KeyboardInterrupt
        ref = min(refs)
        task, e = self.tasks[ref], self.tasks[ref].emulator
        self.finished += 1
        flows = {"all": Stats(min(e.rate_mbps or 0.0, 7.5), 60.0 + e.delay_ms + e.queue.packets / 10, 0.003)}
        return [(ref, RunMetrics(task.candidate, task.label, task.replicate, flows, None, 1,
                                 (task.replicate,), 0.0))]

    def cancel(self, refs: list[int]) -> None:
        pass


@pytest.mark.parametrize("optimizer", ["skopt", "gpytorch"])
def test_resume_runs_the_candidates_that_were_running_first_and_goes_on_as_if_never_stopped(
        tmp_path, target, optimizer):
    """With a model, what a search proposes depends on what it was told: a resume that
    proposed afresh would not propose the interrupted candidates, nor go on as the run would
    have.  (Random search proposes by count alone, so it re-proposes them either way.)"""
    pytest.importorskip("botorch" if optimizer == "gpytorch" else "skopt")
    config = RunConfig(target=str(target), budget=9, runtime_s=4, replicates=1,
                       links=("constant",), optimizer=optimizer)
    reference = Calibration.start(tmp_path / "reference", config, load_target(str(target)))
    reference.run(Stalling(3))  # type: ignore[arg-type]
    stopped = Calibration.start(tmp_path / "R", config, load_target(str(target)))
    with pytest.raises(KeyboardInterrupt):
        stopped.run(Stalling(3, finish=4))  # type: ignore[arg-type]
    run_dir = stopped.run_dir
    journaled = {r.candidate for r in RunDir.open(run_dir).evaluations()}
    interrupted = [p for p in _lines(run_dir / PROPOSALS) if p["candidate"] not in journaled]
    assert len(journaled) == 4 and len(interrupted) == 3
    resumed = Calibration.open(run_dir)
    evaluator = Stalling(3)
    resumed.run(evaluator)  # type: ignore[arg-type]
    assert evaluator.submitted[:3] == [p["candidate"] for p in interrupted]
    again = RunDir.open(run_dir).evaluations()
    assert {r.candidate: r.params for r in again[4:7]} == {p["candidate"]: p["params"] for p in interrupted}
    assert [r.params for r in again] == [r.params for r in RunDir.open(reference.run_dir).evaluations()]


# ----------------------------------------------------------------------------------------------
# Real processes, real emulations


@pytest.mark.needs_root
def test_run_and_resume_racing_on_one_directory_never_both_write(tmp_path, target):
    """The race: `calibrate run … --out R &`, then, while its first candidates run,
    `calibrate resume R`: refused, with the writer named, again and again while it runs; `run
    --out R` is told a writer runs there; `export R` reads the run meanwhile; the journal ends
    with exactly the budget, each candidate once."""
    run_dir = tmp_path / "R"
    writer = _start(tmp_path, "run", target, *RUN, "--out", run_dir)
    try:
        _until(lambda: _lines(run_dir / PROPOSALS) or writer.poll() is not None, 120,
               "the first candidates running")
        refusals, exported = 0, False
        while writer.poll() is None:
            done = _cli(tmp_path, "resume", run_dir, "--slots", "2", "--quiet")
            if writer.poll() is not None:
                break  # the writer ended meanwhile: this resume may have found the lock free
            text = _refused(done)
            assert f"pid {writer.pid} on {socket.gethostname()} since" in text
            refusals += 1
            if refusals == 1:
                text = _refused(_cli(tmp_path, "run", target, *RUN, "--out", run_dir))
                assert "is writing now" in text and "calibrate resume" not in text
            if not exported and _lines(run_dir / JOURNAL) and writer.poll() is None:
                done = _cli(tmp_path, "export", run_dir)
                assert done.returncode == 0, done.stderr
                exported = True
            time.sleep(0.5)
        out, err = writer.communicate(timeout=300)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode == 0, err
    assert refusals >= 1 and exported
    journal = _lines(run_dir / JOURNAL)
    assert [r["index"] for r in journal] == [0, 1, 2, 3]
    assert sorted(r["candidate"] for r in journal) == sorted(p["candidate"] for p in _lines(run_dir / PROPOSALS))
    assert json.loads((run_dir / RESULT).read_text())["evaluations"] == 4
    assert lock.holder(run_dir) is None
    assert _scratch(tmp_path) == []


@pytest.mark.needs_root
def test_sigterm_ends_a_run_in_one_line_and_resume_reruns_its_candidates_first(tmp_path, target):
    """`kill PID` mid-run: one line, status 143, no Ray stack dump, no scratch left.  The resume
    runs the two interrupted candidates first; its export then fails (RUN_DIR/export is a file
    in the way): the result is printed first, then the error."""
    run_dir = tmp_path / "R"
    writer = _start(tmp_path, "run", target, *RUN, "--out", run_dir)
    _until(lambda: len(_lines(run_dir / PROPOSALS)) >= 2 or writer.poll() is not None, 180,
           "two candidates running")
    time.sleep(1)
    writer.send_signal(signal.SIGTERM)
    _, err = writer.communicate(timeout=120)
    assert writer.returncode == 143, err
    assert _ended_by(err, "SIGTERM").endswith(f"continue with `calibrate resume {run_dir}`")
    assert _scratch(tmp_path) == []
    journaled = {r["candidate"] for r in _lines(run_dir / JOURNAL)}
    interrupted = {p["candidate"]: p["params"] for p in _lines(run_dir / PROPOSALS)
                   if p["candidate"] not in journaled}
    assert interrupted

    (run_dir / "export").write_text("in the way")
    done = _cli(tmp_path, "resume", run_dir, "--slots", "2", "--quiet")
    assert "calibration of" in done.stdout and "emulator: mm-" in done.stdout  # the result, printed
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    text = done.stderr.strip().splitlines()[-1]  # after the evaluations' progress lines
    assert text.startswith("calibrate: error: the calibration is complete")
    assert f"`calibrate export {run_dir}`" in text
    journal = _lines(run_dir / JOURNAL)
    assert len(journal) == 4 and len({r["candidate"] for r in journal}) == 4
    first = journal[len(journaled):len(journaled) + len(interrupted)]
    assert {r["candidate"]: r["params"] for r in first} == interrupted
    assert _scratch(tmp_path) == []


@pytest.mark.needs_root
def test_ctrl_c_ends_a_run_in_one_line(tmp_path, target):
    run_dir = tmp_path / "R"
    writer = _start(tmp_path, "run", target, *RUN, "--out", run_dir)
    _until(lambda: _lines(run_dir / PROPOSALS) or writer.poll() is not None, 180, "a candidate")
    time.sleep(2)
    os.killpg(writer.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole process group
    _, err = writer.communicate(timeout=120)
    assert writer.returncode == 130, err
    _ended_by(err, "SIGINT")
    assert _scratch(tmp_path) == []
    assert lock.holder(run_dir) is None


@pytest.mark.needs_root
@pytest.mark.parametrize(("name", "group"), [("SIGINT", True), ("SIGTERM", False)])
def test_an_interrupted_emulate_says_so_and_nothing_else(tmp_path, name, group):
    """Not "all runs done 1/1" before "interrupted"; no scratch left, no pantheon_perf.json."""
    data_dir = tmp_path / "data"
    process = _start(tmp_path, "emulate", "--emulator", "mm-delay 10 mm-link 12mbps.trace 12mbps.trace",
                     "--schemes", "cubic", "--runtime", "5", "--out", data_dir)
    _until(lambda: _scratch(tmp_path) or process.poll() is not None, 60, "the run's scratch")
    time.sleep(2)
    signum = getattr(signal, name)
    os.killpg(process.pid, signum) if group else process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signum, err
    _ended_by(err, name)
    assert "all runs done" not in err
    assert _scratch(tmp_path) == [] and not (data_dir / "pantheon_perf.json").exists()


@pytest.mark.needs_root
def test_an_interrupted_selftest_leaves_nothing(tmp_path):
    process = _start(tmp_path, "selftest", "--runtime", "5")
    _until(lambda: _scratch(tmp_path) or process.poll() is not None, 60, "the selftest's scratch")
    time.sleep(3)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 143, err
    _ended_by(err, "SIGTERM")
    assert _scratch(tmp_path) == []


@pytest.mark.needs_root
def test_score_prints_its_result_before_an_output_error(tmp_path, target):
    """--json checked at the start, its directory removed during the runs: the score is printed,
    then one line says the file could not be written."""
    out = tmp_path / "out"
    out.mkdir()
    process = _start(tmp_path, "score", target, "--emulator",
                     "mm-delay 40 mm-link 7.5mbps.trace 7.5mbps.trace --uplink-queue=droptail "
                     "--uplink-queue-args=packets=30", "--runtime", "4", "--replicates", "1",
                     "--slots", "1", "--json-out", out / "score.json")
    _until(lambda: _scratch(tmp_path) or process.poll() is not None, 120, "a run")
    shutil.rmtree(out)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 2, stderr
    assert "f = " in stdout
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("calibrate: error: the score is above, but --json-out ") and "Traceback" not in stderr


@pytest.mark.needs_root
def test_a_failed_selftest_leaves_nothing(tmp_path):
    """A congestion control the kernel lacks: the sender fails, one error line, no scratch."""
    done = _cli(tmp_path, "selftest", "--schemes", "nosuchcc", "--runtime", "2", timeout=120)
    assert done.returncode == 4 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("calibrate: error: the sender endpoint")
    assert _scratch(tmp_path) == []


@pytest.mark.needs_root
def test_stderr_holds_only_calibrates_own_lines(tmp_path, target):
    """A first run on a fresh account (no ~/.ray token yet), with the GP optimizer: no torch
    FutureWarning, no Ray token-authentication notice, nothing but calibrate's own lines and
    the per-evaluation lines of --quiet."""
    env = _env(tmp_path, HOME=str(tmp_path / "home"))
    env.pop("RAY_AUTH_MODE", None)
    (tmp_path / "home").mkdir()
    run = [*RUN[:RUN.index("--budget")], "--budget", "2", "--links", "constant", "--slots", "2",
           "--optimizer", "gpytorch", "--quiet"]
    done = _cli(tmp_path, "run", target, *run, "--out", tmp_path / "R", env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    noise = [line for line in done.stderr.splitlines()
             if not (line.startswith("calibrate: ") or line.startswith("constant #"))]
    assert noise == [], done.stderr
    assert "Warning" not in done.stderr and "oken" not in done.stderr


# ----------------------------------------------------------------------------------------------
# Figures, laid out to be read (drawn as they are written, measured on the canvas)

FLAT = """\
# name: flat-path-with-a-rather-long-name
# date: 2019-05-04T10:11
# path: Stanford University wired campus network, through a congested transpacific link -> {TOKYO}
# runtime_s: 30
scheme,runs,tput_mbps_mean,tput_mbps_std,delay_p95_ms_mean,delay_p95_ms_std,loss_pct_mean,loss_pct_std
cubic,10,9.9512,0.0002,41.2,0.01,0.3,0.1
vegas,10,9.9516,0.0003,40.1,0.02,0.3,0.1
bbr,10,9.9509,0.0001,40.7,0.01,0.3,0.1
""".replace("{TOKYO}", "AWS Tokyo (ap-northeast-1), cellular backup")


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")


def _check_layout(fig: Any) -> None:
    """Every text inside the canvas; legends outside every axes; scheme labels inside their
    axes; no linear axis spanning less than a fifth of its largest value."""
    from matplotlib.text import Annotation

    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    boxes = [ax.get_window_extent(renderer) for ax in fig.axes]
    # what is drawn of each axes (tick labels, titles, labels, notes, legend) and the title
    drawn = [ax.get_tightbbox(renderer) for ax in fig.axes]
    if fig._suptitle is not None:
        drawn.append(fig._suptitle.get_window_extent(renderer))
    for extent in drawn:
        assert canvas.x0 - 1 <= extent.x0 and extent.x1 <= canvas.x1 + 1, extent
        assert canvas.y0 - 1 <= extent.y0 and extent.y1 <= canvas.y1 + 1, extent
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)
    assert legends
    for legend in legends:
        extent = legend.get_window_extent(renderer)
        assert not any(extent.overlaps(box) for box in boxes), "a legend over the data"
    for ax, box in zip(fig.axes, boxes, strict=True):
        for label in (c for c in ax.get_children() if isinstance(c, Annotation) and c.xycoords == "data"):
            extent = label.get_window_extent(renderer)
            assert box.x0 <= extent.x0 and extent.x1 <= box.x1 + 1, label.get_text()
            assert extent.y1 <= box.y1 + 1, label.get_text()
        lo, hi = sorted(ax.get_ylim())
        assert hi - lo >= 0.2 * max(abs(lo), abs(hi))
        if ax.get_xscale() == "linear":
            lo, hi = sorted(ax.get_xlim())
            assert hi - lo >= 0.2 * max(abs(lo), abs(hi))


def test_target_plot_is_laid_out_to_be_read(tmp_path):
    """A long path description, scatter of a ten-thousandth of a Mbit/s: the subtitle wraps
    inside the canvas, the axes show the scatter as noise, not as signal."""
    from calibrate.summary_plot import target_figure

    flat = tmp_path / "flat.csv"
    flat.write_text(FLAT)
    done = _cli(tmp_path, "target", "plot", flat, "--out", tmp_path / "flat.png")
    assert done.returncode == 0, done.stderr
    assert _png_size(tmp_path / "flat.png") == (1350, 975)
    fig = target_figure(load_target(str(flat)))
    fig.canvas.draw()
    _check_layout(fig)
    lo, hi = fig.axes[0].get_ylim()
    assert hi - lo > 2  # 9.95 Mbit/s: the axis spans Mbit/s, not 0.0008 of one


def test_figure3_is_laid_out_to_be_read(tmp_path):
    """The export's Figure 3 with a scheme at the right edge of its panel: the legend stands
    outside both panels, every label inside its panel."""
    from calibrate.export import figure3
    from test_export import make_run

    run_dir = make_run(tmp_path)
    done = _cli(tmp_path, "export", run_dir)
    assert done.returncode == 0, done.stderr
    assert _png_size(run_dir / "export" / "figure3.png")[0] > 1950  # two panels and the legend
    report = json.loads((run_dir / "export" / "emulator.json").read_text())
    fig = figure3(report)
    fig.canvas.draw()
    _check_layout(fig)


# ----------------------------------------------------------------------------------------------
# Impossible target values


@pytest.mark.parametrize(("cells", "why"), [
    ("-7.5,0.2,85,3,0.3,0.1", "throughput -7.5 Mbit/s is impossible"),
    ("7.5,0.2,85,3,130,0.1", "loss 130 % is impossible"),
    ("7.5,0.2,-85,3,0.3,0.1", "delay -85 ms is impossible"),
    ("inf,0.2,85,3,0.3,0.1", "tput_mbps_mean inf is impossible"),
])
def test_target_show_refuses_what_run_refuses_in_one_line(tmp_path, cells, why):
    bad = tmp_path / "bad.csv"
    bad.write_text(TARGET.replace("7.5,0.2,85,3,0.3,0.1", cells))
    shown = _refused(_cli(tmp_path, "target", "show", bad))
    assert why in shown and "correct" in shown and "must be positive" not in shown
    ran = _refused(_cli(tmp_path, "run", bad, *RUN, "--out", tmp_path / "R"))
    assert ran == shown
    assert not (tmp_path / "R").exists()


# ----------------------------------------------------------------------------------------------
# Messages that name the problem and the fix


def test_messages_name_the_problem_and_the_fix(tmp_path, target):
    header_only = tmp_path / "header.csv"
    header_only.write_text(TARGET.splitlines()[2] + "\n")
    text = _refused(_cli(tmp_path, "target", "show", header_only))
    assert "has a header but no rows" in text and "add one line per scheme" in text
    assert "--flow" not in text

    perf = tmp_path / "perf"
    perf.mkdir()
    (perf / "pantheon_perf.json").write_text("{}")
    text = _refused(_cli(tmp_path, "target", "show", perf))
    assert "pantheon_perf.json: holds no scheme" in text and "no pantheon_perf.json" not in text

    text = _refused(_cli(tmp_path, "run", target, *RUN, "--bound", "foo=1:2"))
    assert "unknown parameter 'foo'" in text and "NAME=LO:HI" in text and "NAME=VALUE" not in text

    text = _refused(_cli(tmp_path, "selftest", "--runtime", "0"))
    assert "--runtime must be more than 0" in text and "stop-after" not in text

    text = _refused(_cli(tmp_path, "run", target, *RUN, "--links", "nosuch"))
    assert "unknown link kind 'nosuch'" in text and "[" not in text

    for command in (["run", target, *RUN], ["emulate", "--emulator", "mm-link 12mbps.trace 12mbps.trace",
                                             "--out", tmp_path / "d"]):
        text = _refused(_cli(tmp_path, *command, "--schemes", ""))
        assert "--schemes" in text and "all" in text
    assert not (tmp_path / "d").exists()

    (tmp_path / "nepal").mkdir()  # a folder named like the bundled target, in the working directory
    text = _refused(_cli(tmp_path, "target", "show", "nepal"))
    assert "shadows the bundled target nepal" in text and "bundled:nepal" in text
    assert _cli(tmp_path, "target", "show", "bundled:nepal").returncode == 0


def test_journal_problems_are_located_and_the_fix_keeps_the_rest(tmp_path):
    from test_export import make_run

    run_dir = make_run(tmp_path)
    journal = run_dir / JOURNAL
    lines = journal.read_text().splitlines(keepends=True)

    journal.write_text("".join(lines[:1] + ["garbage" + lines[1]] + lines[2:]))
    text = _refused(_cli(tmp_path, "export", run_dir))
    assert f"{journal}:2:1: not a JSON record" in text and ":2:1:2" not in text
    assert "delete that line" in text and "every other line is kept" in text

    journal.write_text("".join(lines[:-1]) + lines[-1][:-30])  # the writer died mid-line
    done = _cli(tmp_path, "export", run_dir, "--out", tmp_path / "e")
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"calibrate: note: {journal}: line {len(lines)} ({len(lines[-1]) - 30} bytes) is incomplete: "
        "the run stopped while writing it, so that record was never finished; ignored"]


def test_export_into_a_directory_with_other_files_is_refused(tmp_path):
    from test_export import make_run

    run_dir = make_run(tmp_path)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "emulator.json").write_text('{"mine": 1}')
    text = _refused(_cli(tmp_path, "export", run_dir, "--out", out))
    assert f"--out {out} already holds files that are not an export of {run_dir} (emulator.json)" in text
    assert "--overwrite" in text
    assert (out / "emulator.json").read_text() == '{"mine": 1}'
    done = _cli(tmp_path, "export", run_dir, "--out", out, "--overwrite")
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "emulator.json").read_text())["format"] == "calibrate-export"
    again = _cli(tmp_path, "export", run_dir, "--out", out)  # this run's own export: replaced
    assert again.returncode == 0, again.stderr


def test_emulator_command_lines_carry_no_float_noise(tmp_path):
    from test_export import make_run

    noisy = [("constant", {"rate": 7.25, "delay": 20, "queue": 90, "loss": 0.010199999999999996}, 0.05),
             ("poisson", {"rate": 6.125, "delay": 28, "queue": 60, "loss": 1.0742188335613358e-06}, 0.04)]
    run_dir = make_run(tmp_path, noisy)
    done = _cli(tmp_path, "export", run_dir)
    assert done.returncode == 0, done.stderr
    out = run_dir / "export"
    constant = (out / "constant" / "mahimahi.txt").read_text()
    poisson = (out / "poisson" / "mahimahi.txt").read_text() + (out / "poisson" / "engine.txt").read_text()
    assert "mm-loss uplink 0.0102 " in constant
    assert "mm-loss uplink 0.000001074 " in poisson and "--uplink-loss 0.000001074 " in poisson
    for text in (constant, poisson, done.stdout):
        assert "99999" not in text and "e-0" not in text


# ----------------------------------------------------------------------------------------------
# One vocabulary


OLD_SPELLINGS = {"emulate": ["--data-dir", "--run-times"], "selftest": ["--seconds", "--cc"],
                 "target show": ["--write"]}


def test_one_vocabulary_in_help_and_version(tmp_path):
    done = _cli(tmp_path, "--version")
    assert done.returncode == 0 and done.stdout.startswith("calibrate ")
    for command in ("emulate", "selftest", "target show", "run", "score", "export"):
        text = _cli(tmp_path, *command.split(), "--help").stdout
        for old in OLD_SPELLINGS.get(command, []):
            assert not re.search(rf"^\s+{old}\b", text, re.MULTILINE), (command, old)
        if command in ("emulate", "selftest", "run", "export"):
            assert re.search(r"^\s+--out (DIR|RUN_DIR)\b", text, re.MULTILINE), command
        if command in ("emulate", "selftest", "run", "score"):
            assert "--runtime S" in text and "--schemes" in text, command
        if command in ("emulate", "selftest", "target show", "score", "export"):
            assert re.search(r"^\s+--json\b", text, re.MULTILINE), command
            assert "on stdout instead of tables" in " ".join(text.split()), command
    assert "--json-out FILE" in _cli(tmp_path, "score", "--help").stdout
    assert "--replicates" in _cli(tmp_path, "emulate", "--help").stdout
    assert "the run directory of an interrupted" in _cli(tmp_path, "resume", "--help").stdout
    text = _refused(_cli(tmp_path, "run", target_path(tmp_path), *RUN, "--schemes", "all,cubic"))
    assert "`all` means every scheme; give it alone" in text


def target_path(tmp: Path) -> Path:
    path = tmp / "tiny.csv"
    path.write_text(TARGET)
    return path


def test_old_spellings_still_work_with_a_one_line_note(tmp_path, target):
    def note(old: str, new: str) -> str:
        return f"calibrate: note: {old} is now spelled {new}; the old spelling goes in a later release"

    saved = tmp_path / "saved.json"
    done = _cli(tmp_path, "target", "show", target, "--write", saved)
    assert done.returncode == 0 and done.stderr.splitlines() == [note("--write", "--json-out")]
    assert json.loads(saved.read_text())["name"] == "tiny"

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    done = _cli(tmp_path, "emulate", "--emulator", "mm-link 12mbps.trace 12mbps.trace", "--schemes",
                "cubic", "--run-times", "2", "--data-dir", blocker)
    lines = done.stderr.strip().splitlines()
    assert lines[:2] == [note("--run-times", "--replicates"), note("--data-dir", "--out")]
    assert len(lines) == 3 and "--out" in lines[2] and "is not a directory" in lines[2]

    done = _cli(tmp_path, "selftest", "--seconds", "0", "--cc", "bbr")
    lines = done.stderr.strip().splitlines()
    assert lines[:2] == [note("--seconds", "--runtime"), note("--cc", "--schemes")]
    assert lines[2].startswith("calibrate: error: --runtime must be more than 0")

    done = _cli(tmp_path, "score", target, "--emulator", "mm-link 12mbps.trace 12mbps.trace",
                "--json", tmp_path / "no-such-dir" / "x.json")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 2 and "scoring" not in done.stderr
    assert lines[0].startswith("calibrate: note: --json FILE is now spelled --json-out FILE")
    assert "no such directory" in lines[1]


def test_emulator_json_says_what_its_numbers_are(tmp_path):
    from test_export import make_run

    run_dir = make_run(tmp_path)
    done = _cli(tmp_path, "export", run_dir, "--json")
    assert done.returncode == 0, done.stderr
    fields = json.loads(done.stdout)["fields"]
    assert "one-way" in fields["delay_ms"] and "round trip is 2 x delay_ms" in fields["delay_ms"]
    assert "replication error" in fields["f"] and "throughput" in fields["f"] and "delay" in fields["f"]
    assert "null where it could not be estimated" in fields["noise"]
    assert "not part of f" in fields["loss_error_pct"] and "--include-loss" in fields["loss_error_pct"]
