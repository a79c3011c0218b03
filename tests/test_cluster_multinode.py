"""Multi-node Ray for real, on one machine: `calibrate cluster local up --nodes 2` starts two
Ray nodes (a head and one joining it: two raylets, object stores and worker pools, token
authentication on), each advertising 3 emulator slots; `calibrate run --address` calibrates a
tiny target on it with real engines.  Asserted from Ray's own records (the state API: tasks and
the nodes they ran on), not from ours:

- the tasks of one calibration spread over the nodes, and the journal has the same shape as the
  same calibration's on one node (an embedded Ray): the same candidates, points and seeds, every
  (scheme, replicate) once;
- a node lost mid-calibration (its raylet SIGKILLed while it runs tasks) costs only the tasks
  it held, running or handed to it, which Ray runs again on the other nodes: the calibration
  completes, and its journal has every evaluation once, every run once, none penalized;
- a driver without the cluster's token is refused (Ray's InvalidAuthToken) with one message
  that says where to get the token.

Budget: a cluster start (~15 s), three calibrations of 3-4 evaluations of 3 s runs, and a refused
driver (~20 s of Ray's retries).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from calibrate.cluster import auth, local
from calibrate.runs.journal import JOURNAL, RunDir

pytestmark = pytest.mark.needs_root

CALIBRATE = [sys.executable, "-m", "calibrate"]
SCHEMES = ("udp-saturator", "udp-vegas")
#: random search with a fixed seed proposes the same points whatever the cluster
RUN = ("--links", "constant", "--runtime", "3", "--replicates", "1", "--optimizer", "random", "--seed", "3",
       "--quiet")
TINY = """# name: tiny
# runtime_s: 5
scheme,runs,tput_mbps_mean,tput_mbps_std,delay_p95_ms_mean,delay_p95_ms_std,loss_pct_mean,loss_pct_std
udp-saturator,3,7.9,0.05,130,2,0.5,0.1
udp-vegas,3,7.4,0.1,34,1,0.0,0.0
"""


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _calibrate(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run([*CALIBRATE, *args], capture_output=True, text=True, timeout=timeout, env=_env())
    if check and done.returncode != 0:
        raise AssertionError(f"calibrate {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("target") / "tiny.csv"
    path.write_text(TINY)
    return str(path)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("ray-local")
    name = f"test{os.getpid()}"
    started = _calibrate("cluster", "local", "up", "--name", name, "--state-dir", str(state), "--nodes", "2",
                         "--cpus", "1", "--slots", "3", "--port", str(local.free_port()), "--json", timeout=240)
    data = json.loads(started.stdout)
    try:
        yield local.LocalCluster.from_json(data), state
    finally:
        _calibrate("cluster", "local", "down", "--name", name, "--state-dir", str(state), "--force", check=False)
        try:
            for node in data["nodes"]:  # only our nodes' processes, all gone
                assert not local.Node(**node).processes(), node
        finally:  # Ray's session files (`down` keeps them, as `ray stop` does), whatever the check says
            shutil.rmtree(data["temp_dir"], ignore_errors=True)


def _tasks(cluster: local.LocalCluster) -> list[dict]:
    """Ray's records of calibrate's tasks: name, attempt, state, and the node it ran on."""
    from ray.util.state import list_nodes, list_tasks

    with auth.token_mode():  # the cluster's token: this user's ~/.ray/auth_token
        names = {n.node_id: n.node_name for n in list_nodes(address=cluster.dashboard)}
        tasks = list_tasks(address=cluster.dashboard, filters=[("type", "=", "NORMAL_TASK")], detail=True,
                           limit=10_000, raise_on_missing_output=False)
    return [{"name": t.name, "attempt": t.attempt_number, "state": t.state, "node": names.get(t.node_id),
             "job": t.job_id, "error": t.error_type} for t in tasks if t.name.startswith("calibrate-c")]


def _journal(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / JOURNAL).read_text().splitlines() if line.strip()]


def _shape(run_dir: Path) -> list[tuple]:
    """What must not depend on where the runs ran: per candidate its point, seeds and the
    (scheme, replicate) of its runs, each once, and the fields every record and run has."""
    out = []
    for record in sorted(_journal(run_dir), key=lambda r: r["candidate"]):
        runs = sorted((run["label"], run["replicate"]) for run in record["runs"])
        out.append((record["candidate"], record["link"], record["phase"], json.dumps(record["params"]),
                    record["emulator"], record["seed"], tuple(sorted(record)),
                    tuple(runs), tuple(sorted({k for run in record["runs"] for k in run}))))
    return out


def _complete(run_dir: Path, budget: int) -> list[dict]:
    """Every evaluation once, every (scheme, replicate) once in it, none penalized."""
    records = _journal(run_dir)
    assert sorted(r["candidate"] for r in records) == list(range(budget)), [r["candidate"] for r in records]
    for record in records:
        assert sorted((run["label"], run["replicate"]) for run in record["runs"]) == [(s, 1) for s in SCHEMES]
        assert all(run["reason"] is None for run in record["runs"]), record["runs"]
        assert not record["penalized"]
    assert len(RunDir.open(run_dir).evaluations()) == budget
    return records


def test_a_calibration_spreads_over_the_nodes_with_the_journal_of_one_node(cluster, tiny_target, tmp_path):
    ray_cluster, _ = cluster
    assert [n.slots for n in ray_cluster.nodes] == [3, 3]
    spread = tmp_path / "three-nodes"
    done = _calibrate("run", tiny_target, *RUN, "--budget", "3", "--address", ray_cluster.address,
                      "--out", str(spread))
    assert "6 emulator slots" in done.stderr, done.stderr  # the cluster's: 2 nodes x 3
    tasks = [t for t in _tasks(ray_cluster) if t["state"] == "FINISHED"]
    per_node = Counter(t["node"] for t in tasks)
    print(f"tasks per node: {dict(sorted(per_node.items()))}")
    assert sum(per_node.values()) == 3 * len(SCHEMES)  # 3 evaluations x 2 schemes x 1 replicate
    assert len(per_node) >= 2, per_node
    records = _complete(spread, 3)
    # The same calibration on one node (an embedded Ray): the same journal, but for measurements.
    single = tmp_path / "one-node"
    _calibrate("run", tiny_target, *RUN, "--budget", "3", "--slots", "6", "--out", str(single))
    _complete(single, 3)
    assert _shape(spread) == _shape(single)
    print(f"journal: {len(records)} evaluations, each with runs {[(s, 1) for s in SCHEMES]}")


def test_a_node_lost_mid_calibration_costs_only_its_tasks(cluster, tiny_target, tmp_path):
    ray_cluster, _ = cluster
    run_dir = tmp_path / "node-lost"
    budget = 4
    process = subprocess.Popen([*CALIBRATE, "run", tiny_target, *RUN, "--budget", str(budget), "--address",
                                ray_cluster.address, "--out", str(run_dir)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
    workers = {n.name: n for n in ray_cluster.nodes if not n.head}
    earlier_jobs = {t["job"] for t in _tasks(ray_cluster)}  # the drivers of other tests
    victim, running = None, set()
    deadline = time.monotonic() + 120
    try:
        while victim is None and time.monotonic() < deadline and process.poll() is None:
            now = [t for t in _tasks(ray_cluster) if t["job"] not in earlier_jobs]
            for name, node in workers.items():
                running = {t["name"] for t in now if t["node"] == name and t["state"] == "RUNNING"}
                if running:
                    time.sleep(1.0)  # its engines and endpoints are running
                    raylet = node.raylet_pid()
                    assert raylet is not None, name
                    os.kill(raylet, signal.SIGKILL)
                    victim = name
                    break
            time.sleep(0.3)
        output = process.communicate(timeout=300)[0]
    finally:
        if process.poll() is None:
            process.kill()
    assert victim is not None, "no task was seen running on a worker node"
    assert process.returncode == 0, output
    _complete(run_dir, budget)
    # From Ray's records, attempt by attempt: the only attempts that failed were on the lost node
    # (its running tasks, and those it had been handed but not started), each of those tasks
    # finished once, on a node that survived, and no task that ran elsewhere ran twice.
    tasks = [t for t in _tasks(ray_cluster) if t["job"] not in earlier_jobs]
    failed = [t for t in tasks if t["state"] == "FAILED"]
    finished = [t for t in tasks if t["state"] == "FINISHED"]
    assert failed and {t["node"] for t in failed} == {victim}, failed
    assert Counter(t["name"] for t in finished) == Counter({name: 1 for name in {t["name"] for t in tasks}})
    retried = {t["name"]: t for t in finished if t["attempt"] > 0}
    assert set(retried) == {t["name"] for t in failed}
    assert all(t["node"] != victim for t in retried.values()), retried
    assert running & set(retried), (running, retried)  # what was seen running there was among them
    per_node = Counter(t["node"] for t in finished)
    print(f"killed the raylet of {victim} while it ran {sorted(running)}; failed attempts there: "
          f"{sorted((t['name'], t['attempt'], t['error']) for t in failed)}; retried elsewhere: "
          f"{sorted((n, t['attempt'], t['node']) for n, t in retried.items())}; finished per node: "
          f"{dict(sorted(per_node.items()))}; journal: {budget} evaluations, candidates "
          f"{sorted(r['candidate'] for r in _journal(run_dir))}, {budget * len(SCHEMES)} runs, each "
          f"(scheme, replicate) once, none penalized")
    assert workers[victim].raylet_pid() is None


def test_a_driver_without_the_clusters_token_is_refused_with_the_fix(cluster, tiny_target, tmp_path):
    """The InvalidAuthToken case for real: a driver whose user has no token (another HOME, no
    RAY_AUTH_* variables) joining the cluster, which uses token authentication, is refused by
    Ray, and calibrate says so in one message naming where to get the token."""
    ray_cluster, _ = cluster
    env = {k: v for k, v in _env().items() if not k.startswith("RAY_AUTH")}
    env["HOME"] = str(tmp_path)
    done = subprocess.run([*CALIBRATE, "run", tiny_target, *RUN, "--budget", "1", "--address", ray_cluster.address,
                           "--out", str(tmp_path / "refused")], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 3, done.stderr
    assert "InvalidAuthToken" in done.stderr  # Ray's own words, above ours
    error = [line for line in done.stderr.splitlines() if line.startswith("calibrate: error:")]
    assert len(error) == 1, done.stderr
    assert f"cannot join the Ray cluster at {ray_cluster.address}" in error[0]
    assert "refused no token (none found)" in error[0] and "ray get-auth-token" in error[0], error[0]
    assert not (tmp_path / "refused" / JOURNAL).exists()
    print(f"refused without a token: {error[0][:160]}...")
