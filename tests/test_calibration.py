"""The calibration end to end, for real: a synthetic target measured over a hidden emulator,
calibrated on an embedded Ray with real engines and schemes; a run killed with SIGKILL
mid-evaluation and resumed; the command line's errors.

The hidden emulator: 8 Mbit/s, 30 ms one-way, DropTail 60 packets, no loss,
constant deliveries.  Three schemes span what identifies it: a saturator and cubic fill the
queue (rate, queue), Vegas keeps it empty (delay).  A second hidden emulator adds 1 % i.i.d.
uplink loss, so that runs scatter as a real path's do and the noise floor is a real one.
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

pytestmark = pytest.mark.needs_root

HIDDEN = {"rate": 8.0, "delay": 30, "queue": 60, "loss": 0.0}
HIDDEN_MM = ("mm-delay 30 mm-link 8mbps.trace 8mbps.trace --uplink-queue=droptail "
             "--uplink-queue-args=packets=60")
LOSSY = {**HIDDEN, "loss": 0.01}
LOSSY_MM = HIDDEN_MM.replace("mm-delay 30 ", "mm-delay 30 mm-loss uplink 0.01 ")
SCHEMES = "cubic,udp-vegas,udp-saturator"
RUNTIME = "6"
BUDGET = 8  # evaluations of the lossless search: the warm start, the design, the GP's first steps
CALIBRATE = [sys.executable, "-m", "calibrate"]


def _calibrate(*args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
    done = subprocess.run([*CALIBRATE, *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"calibrate {' '.join(args)} exited {done.returncode}:\n"
                             f"{done.stdout}\n{done.stderr}")
    return done


def _namespaces() -> set[str]:
    return set(subprocess.run(["lsns", "-n", "-t", "net", "-o", "NS"], capture_output=True,
                              text=True).stdout.split())


def _leftovers() -> list[str]:
    """Our processes still alive: engines, scheme endpoints, Ray's daemons."""
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [line for line in out.splitlines()
            if any(name in line for name in ("calibrate-link", "calibrate-scheme", "raylet",
                                             "gcs_server", "ray::"))]


def _wait_clean(before_ns: set[str], timeout: float = 30) -> None:
    """Engines of killed workers stop at their own deadline; give them that long."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _leftovers() and _namespaces() <= before_ns:
            return
        time.sleep(0.5)
    raise AssertionError(f"left behind: processes {_leftovers()}, namespaces "
                         f"{_namespaces() - before_ns}")


def _measure(tmp_path_factory, emulator: str) -> Path:
    """Three runs of each scheme over a hidden emulator, in Pantheon's data-dir layout."""
    data_dir = tmp_path_factory.mktemp("synthetic") / "data"
    _calibrate("emulate", "--emulator", emulator, "--schemes", SCHEMES, "--runtime", RUNTIME,
               "--replicates", "3", "--parallel", "4", "--out", str(data_dir))
    return data_dir


@pytest.fixture(scope="module")
def synthetic_target(tmp_path_factory) -> Path:
    return _measure(tmp_path_factory, HIDDEN_MM)


@pytest.fixture(scope="module")
def lossy_target(tmp_path_factory) -> Path:
    return _measure(tmp_path_factory, LOSSY_MM)


def _score(target: Path, emulator: str, seed: int, out: Path) -> dict:
    """`calibrate score`: f of one emulator against the target, on runs of its own seed."""
    _calibrate("score", str(target), "--emulator", emulator, "--runtime", RUNTIME,
               "--replicates", "3", "--seed", str(seed), "--json-out", str(out), "--quiet")
    return json.loads(out.read_text())


def test_calibration_recovers_the_hidden_emulator(synthetic_target, tmp_path):
    before_ns = _namespaces()
    run_dir = tmp_path / "run"
    done = _calibrate("run", str(synthetic_target), "--links", "constant", "--budget", str(BUDGET),
                      "--runtime", RUNTIME, "--replicates", "2", "--seed", "1",
                      "--out", str(run_dir), "--quiet")
    result = json.loads((run_dir / RESULT).read_text())
    best = result["links"]["constant"]
    params = best["params"]
    print(done.stdout, done.stderr, sep="\n")
    assert result["winner"] == "constant"
    assert abs(params["rate"] / HIDDEN["rate"] - 1) <= 0.15, params
    assert abs(params["delay"] - HIDDEN["delay"]) <= 3, params
    # Every finished evaluation is in the journal, once, with its seeds and runs.
    records = RunDir.open(run_dir).evaluations()
    assert len(records) == best["evaluations"] == BUDGET
    assert len({r.candidate for r in records}) == BUDGET
    assert all(len(r.runs) == 3 * 2 and r.loss_seeds for r in records)
    # Over a lossless constant link the runs are nearly deterministic and the noise floor (f of
    # the hidden emulator itself) is tiny (0.06–0.5 %): f < 2 × floor would need delay and queue
    # exact to the ms and packet and the rate within 0.3 %.  Asserted here: the result is below
    # 5 % and no worse than the analytic warm start (the journal's first evaluation; 2.3 % at
    # 7.80 Mbit/s, 30 ms, 59 packets): the incumbent rule must not trade a measured point for a
    # smoothed one.  The noise-floor bar is the lossy path's test below, whose runs scatter.
    assert best["f"] < 5.0 and best["f"] <= records[0].f
    # Exported with the run.
    export = run_dir / "export"
    assert (export / "emulator.json").exists() and (export / "figure3.png").exists()
    _wait_clean(before_ns)


def test_calibration_of_a_lossy_path_ends_within_twice_its_noise_floor(lossy_target, tmp_path):
    before_ns = _namespaces()
    run_dir = tmp_path / "run"
    _calibrate("run", str(lossy_target), "--links", "constant", "--budget", "20",
               "--runtime", RUNTIME, "--replicates", "2", "--seed", "1", "--out", str(run_dir),
               "--quiet")
    best = json.loads((run_dir / RESULT).read_text())["links"]["constant"]
    params = best["params"]
    assert abs(params["rate"] / LOSSY["rate"] - 1) <= 0.15, params
    assert abs(params["delay"] - LOSSY["delay"]) <= 3, params
    # The noise floor, measured: f of the hidden emulator itself on fresh runs (a seed the
    # search never used, as many replicates as the target has).  The result is re-measured the
    # same way, on the same seeds, so neither number profits from the search's own draws.
    floor = _score(lossy_target, LOSSY_MM, 7, tmp_path / "floor.json")
    at_result = _score(lossy_target, best["emulator"], 7, tmp_path / "result.json")
    print(f"result {best['emulator']}: f {at_result['f']:.2f} % on fresh runs "
          f"({best['f']:.2f} % in the search); the hidden emulator's f {floor['f']:.2f} %")
    assert {r["scheme"] for r in floor["schemes"]} == {"cubic", "udp-vegas", "udp-saturator"}
    assert floor["f"] > 0.5  # the loss makes the runs scatter: a real floor, not a rounding error
    assert at_result["f"] < 2 * floor["f"]
    _wait_clean(before_ns)


def test_resume_after_sigkill_loses_nothing_and_repeats_nothing(synthetic_target, tmp_path):
    before_ns = _namespaces()
    run_dir = tmp_path / "run"
    args = [*CALIBRATE, "run", str(synthetic_target), "--links", "constant,poisson",
            "--schemes", "udp-vegas,udp-saturator", "--budget", "3", "--runtime", "3",
            "--replicates", "1", "--optimizer", "skopt", "--out", str(run_dir), "--quiet"]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    journal = run_dir / JOURNAL
    deadline = time.monotonic() + 300
    try:
        while not (journal.exists() and len(RunDir.open(run_dir).evaluations()) >= 2):
            assert process.poll() is None, process.stdout.read().decode()
            assert time.monotonic() < deadline, "no evaluation finished in 300 s"
            time.sleep(0.2)
        time.sleep(1.0)  # the next candidates' runs are under way
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # the driver and everything it started
        process.wait()
    before = RunDir.open(run_dir).evaluations()
    assert 2 <= len(before) < 6 and not (run_dir / RESULT).exists()
    _wait_clean(before_ns)

    done = _calibrate("resume", str(run_dir), "--quiet")
    after = RunDir.open(run_dir).evaluations()
    assert after[:len(before)] == before  # the history is intact
    assert [r.link for r in after].count("constant") == 3
    assert [r.link for r in after].count("poisson") == 3
    points = [(r.link, tuple(r.x)) for r in after]
    assert len(set(points)) == len(points)  # nothing evaluated twice
    assert len({r.candidate for r in after}) == len(after)
    result = json.loads((run_dir / RESULT).read_text())
    assert result["evaluations"] == 6 and "poisson" in done.stdout
    _wait_clean(before_ns)


def test_run_refuses_bad_input_with_one_line(tmp_path):
    cases = [
        (["run", "nepal", "--budget", "0"], "--budget"),
        (["run", "nepal", "--fix", "speed=3"], "--fix"),
        (["run", "nepal", "--bound", "queue=40:10"], "low bound"),
        (["run", "nepal", "--links", "square"], "unknown link kind"),
        (["run", "nepal", "--runtime", "90"], "--runtime"),
        (["run", "nepal", "--schemes", "nosuch"], "nosuch"),
        (["resume", str(tmp_path / "nothing")], "not a calibration run directory"),
        (["score", "nepal", "--emulator", "mm-link x.trace y.trace"], "'x.trace' is not a file"),
        (["score", "nepal", "--emulator", "mm-link 9mbps.trace 9mbps.trace", "--replicates", "0"],
         "--replicates"),
    ]
    for args, needle in cases:
        done = _calibrate(*args, "--out" if args[0] == "run" else "--quiet",
                          *([str(tmp_path / "out")] if args[0] == "run" else []), check=False,
                          timeout=60)
        assert done.returncode != 0, args
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], (args, done.stderr)
        assert not (tmp_path / "out").exists(), args
    # An existing run directory is never overwritten.
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "run.json").write_text("{}")
    done = _calibrate("run", "nepal", "--out", str(existing), check=False, timeout=60)
    assert done.returncode != 0 and "calibrate resume" in done.stderr
    assert (existing / "run.json").read_text() == "{}"


def test_a_worker_killed_mid_run_is_retried_by_ray(synthetic_target, tmp_path):
    before_ns = _namespaces()
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [*CALIBRATE, "run", str(synthetic_target), "--links", "constant", "--schemes",
         "udp-vegas,udp-saturator", "--budget", "2", "--runtime", "3", "--replicates", "1",
         "--optimizer", "random", "--out", str(run_dir), "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and time.monotonic() < deadline and process.poll() is None:
        ps = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
        workers = [int(line.split()[0]) for line in ps.splitlines() if "ray::calibrate-c" in line]
        if workers:
            time.sleep(1.0)  # its engine and endpoints are running
            os.kill(workers[0], signal.SIGKILL)
            killed = workers[0]
        time.sleep(0.1)
    output = process.communicate(timeout=300)[0].decode()
    assert killed is not None, "no Ray task was seen running"
    assert process.returncode == 0, output
    records = RunDir.open(run_dir).evaluations()
    assert len(records) == 2
    for record in records:  # every run completed, none penalized: the killed task ran again
        assert not record.penalized and all(r["reason"] is None for r in record.runs)
    _wait_clean(before_ns)


def _ray(*args: str) -> subprocess.CompletedProcess:
    ray = Path(sys.executable).with_name("ray")
    return subprocess.run([str(ray), *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def ray_cluster(monkeypatch):
    """A real Ray head on this host (what `ray start` on a cluster's head node does), stopped after.
    Token auth is off for it: Ray 2.60's CLI and a driver joining by address did not agree on the
    token of a `ray start` head here (InvalidAuthToken), which is Ray's business, not ours."""
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    port = "6391"
    yield lambda resources: _ray("start", "--head", f"--port={port}", "--num-cpus=2",
                                 f"--resources={json.dumps(resources)}", "--include-dashboard=false",
                                 "--object-store-memory=100000000", "--disable-usage-stats"), f"127.0.0.1:{port}"
    _ray("stop", "--force")


def test_run_joins_an_existing_cluster_by_address(synthetic_target, tmp_path, ray_cluster):
    start, address = ray_cluster
    started = start({"emulator_slot": 2})
    assert started.returncode == 0, started.stderr
    run_dir = tmp_path / "run"
    done = _calibrate("run", str(synthetic_target), "--links", "constant", "--schemes", "udp-vegas",
                      "--budget", "1", "--runtime", "3", "--replicates", "1", "--address", address,
                      "--out", str(run_dir), "--quiet")
    assert "2 emulator slots" in done.stderr  # the cluster's, not an embedded Ray's 4 per core
    assert len(RunDir.open(run_dir).evaluations()) == 1
    # The cluster is still up after the run (joined, not started: only disconnected from).
    assert _ray("status", f"--address={address}").returncode == 0


def test_a_cluster_without_emulator_slots_is_refused_clearly(synthetic_target, tmp_path, ray_cluster):
    start, address = ray_cluster
    assert start({}).returncode == 0
    done = _calibrate("run", str(synthetic_target), "--budget", "1", "--address", address,
                      "--out", str(tmp_path / "run"), "--quiet", check=False)
    assert done.returncode != 0
    assert "emulator_slot" in done.stderr and "ray start --resources" in done.stderr
    assert not (tmp_path / "run" / JOURNAL).exists()
