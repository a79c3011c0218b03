"""`calibrate cluster local` without starting Ray (that is tests/test_cluster_multinode.py): how
nodes are sized and started, and the token-authentication rule that removed the "flaky"
InvalidAuthToken (calibrate.cluster.auth): the mode is set explicitly on every node a local
cluster starts, and a driver joining by address uses a token when one is there."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from calibrate.cli import main
from calibrate.cluster import auth, local
from calibrate.errors import InputError
from calibrate.evaluation import SLOT, SLOTS_PER_CORE


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in (auth.MODE, auth.TOKEN, auth.TOKEN_PATH):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_nodes_share_the_cores_and_advertise_slots_from_them():
    specs = local.plan(2, cores=8)
    assert [(s.cpus, s.slots, s.head) for s in specs] == [(4, 4 * SLOTS_PER_CORE, True), (4, 4 * SLOTS_PER_CORE, False)]
    assert [(s.cpus, s.slots) for s in local.plan(3, cores=2)] == [(1, SLOTS_PER_CORE)] * 3  # at least one CPU
    assert [s.slots for s in local.plan(2, cores=8, slots=5)] == [5, 5]  # overridden
    assert not any(s.head for s in local.plan(2, cores=8, join=True))  # joining a cluster: no head here
    for bad in ({"nodes": 0}, {"nodes": 1, "cpus": 0}, {"nodes": 1, "slots": -1}):
        with pytest.raises(InputError):
            local.plan(cores=2, **bad)


def test_each_node_is_one_ray_start_with_its_resources():
    head, node = local.plan(2, cores=4, prefix="calibrate-t")
    command = local.start_command(head, temp_dir="/tmp/calibrate-ray-t", address=None, port=6400,
                                  dashboard_port=8300)
    assert command[1:3] == ["start", "--block"] and "--head" in command and "--port=6400" in command
    assert f"--resources={json.dumps({SLOT: 2 * SLOTS_PER_CORE})}" in command and "--num-cpus=2" in command
    assert "--node-name=calibrate-t-0" in command and "--dashboard-port=8300" in command
    joining = local.start_command(node, temp_dir="/tmp/calibrate-ray-t", address="10.0.0.1:6400", port=None,
                                  dashboard_port=None)
    assert "--address=10.0.0.1:6400" in joining and "--head" not in joining
    # several nodes on one machine: each dashboard agent on a port of its own
    agents = {a for a in command + joining if a.startswith("--dashboard-agent-listen-port=")}
    assert len(agents) == 2


def test_a_new_cluster_sets_the_auth_mode_on_every_node_explicitly(home):
    # Ray's `ray start --head` enables token auth only if a token file happens to exist, while
    # nodes joining with `ray start --address` never do: calibrate leaves nothing to that.
    assert local.node_environment("token", {})[auth.MODE] == "token"
    assert local.node_environment("disabled", {"RAY_AUTH_MODE": "token"})[auth.MODE] == "disabled"
    with pytest.raises(InputError):
        local.node_environment("tokens", {})


def test_a_driver_joining_by_address_uses_a_token_when_one_is_there(home):
    assert auth.joining_environment({}) == {}  # no token anywhere: a cluster without auth
    assert auth.joining_environment({auth.TOKEN: "abc"}) == {auth.MODE: "token"}
    path, created = auth.ensure_token()
    assert created and path == home / ".ray" / "auth_token"
    token = path.read_text()
    assert len(token) == 64 and int(token, 16) >= 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert auth.ensure_token() == (path, False) and path.read_text() == token  # kept
    assert auth.joining_environment({}) == {auth.MODE: "token"}
    assert auth.joining_environment({auth.MODE: "disabled"}) == {}  # an explicit choice stands
    assert auth.token_source({}) == str(path)
    assert auth.token_source({auth.TOKEN_PATH: "/etc/ray/token"}) == "$RAY_AUTH_TOKEN_PATH (/etc/ray/token)"


def test_a_refusal_says_where_the_token_came_from_and_what_to_do(home):
    hint = auth.refusal_hint("10.0.0.1:6379", {})
    assert "refused no token (none found)" in hint and "RAY_AUTH_TOKEN" in hint and "ray get-auth-token" in hint
    auth.ensure_token()
    assert f"refused the token from {home / '.ray' / 'auth_token'}" in auth.refusal_hint("h:1", {})
    assert "RAY_AUTH_MODE=disabled" in auth.refusal_hint("h:1", {auth.MODE: "disabled"})


def test_a_local_cluster_that_is_up_is_not_started_twice(tmp_path):
    cluster = local.LocalCluster("x", "127.0.0.1:6379", None, "token", "/tmp/calibrate-ray-x",
                                 (local.Node("x-0", os.getpid(), 1, 4, True, "log", 0.0),))
    (tmp_path / local.STATE_FILE).write_text(json.dumps(cluster.to_json()))
    with pytest.raises(InputError, match="already up at 127.0.0.1:6379"):
        local.up("x", local.plan(1, cores=1), state_dir=tmp_path)
    assert local.load(tmp_path) == cluster


def test_the_local_verbs_dry_run_and_refuse_clearly(tmp_path, capsys):
    assert main(["cluster", "local", "up", "--nodes", "2", "--cpus", "1", "--slots", "3", "--dry-run",
                 "--state-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "--head" in lines[0] and "--address=<head>:6379" in lines[1]
    assert all('--resources={"emulator_slot": 3}' in line for line in lines)
    assert main(["cluster", "local", "down", "--state-dir", str(tmp_path)]) == 2
    assert "no local cluster" in capsys.readouterr().err
    assert main(["cluster", "local", "status", "--state-dir", str(tmp_path)]) == 2
