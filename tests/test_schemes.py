"""The scheme registry, `calibrate schemes`, and the Pantheon wrapper adapter (real wrappers,
real engine runs)."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from calibrate import binaries
from calibrate.emulator import EmulatorConfig
from calibrate.errors import InputError
from calibrate.evaluation import RunTask
from calibrate.metrics import read_perf_json
from calibrate.schemes import default_interpreter, load_registry, pantheon_schemes
from calibrate.scripted import Experiment, run_experiment
from calibrate.targets.model import Workload

CALIBRATE = str(Path(sys.executable).parent / "calibrate")
PATH_12 = "mm-delay 20 mm-link 12mbps.trace 12mbps.trace --uplink-queue=droptail --uplink-queue-args=packets=100"
BUILTINS = ["cubic", "reno", "bbr", "quic-cubic", "quic-newreno", "quic-bbr", "udp-vegas", "udp-copa",
            "udp-ledbat", "udp-saturator"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CALIBRATE, *args], capture_output=True, text=True, timeout=120)


# ---------------------------------------------------------------------------------------------
# Registry and `calibrate schemes`


def test_calibrate_schemes_lists_the_builtins_with_aliases():
    result = cli("schemes", "--json")
    assert result.returncode == 0, result.stderr
    schemes = {s["name"]: s for s in json.loads(result.stdout)}
    available = [name for name, s in schemes.items() if s["available"]]
    assert len(available) >= 10
    assert set(BUILTINS) <= set(available)
    assert "default_tcp" in schemes["cubic"]["aliases"]
    assert "quic" in schemes["quic-cubic"]["aliases"]
    for name, label in (("udp-vegas", "vegas"), ("udp-copa", "copa"), ("udp-ledbat", "ledbat"),
                        ("udp-saturator", "saturator")):
        assert label in schemes[name]["aliases"]
        assert "Pantheon" in schemes[name]["note"]  # says ours is not Pantheon's implementation
    assert schemes["quic-cubic"]["run_first"] == "sender" and schemes["cubic"]["run_first"] == "receiver"
    for s in schemes.values():
        assert s["available"] or s["unavailable_reason"]

    table = cli("schemes")
    assert table.returncode == 0 and "udp-saturator" in table.stdout and "default_tcp" in table.stdout


def test_calibrate_schemes_shows_the_labels_no_port_can_reproduce_with_the_evidence():
    listed = cli("schemes", "--json")
    assert listed.returncode == 0, listed.stderr
    impossible = {s["name"]: s for s in json.loads(listed.stdout) if s["kind"] == "impossible"}
    assert set(impossible) == {"webrtc", "fillp", "fillp_sheep"}
    webrtc = impossible["webrtc"]
    assert not webrtc["available"] and "chromium-browser" in webrtc["unavailable_reason"]
    assert [why["era"] for why in webrtc["impossible"]] == ["2017", "2018"]
    assert {e["repo"] for why in webrtc["impossible"] for e in why["evidence"]} >= {
        "StanfordSNR/pantheon", "StanfordLPNG/webrtc", "StanfordSNR/webrtc"}

    table = cli("schemes")  # the table wraps to the terminal: look for single words
    assert table.returncode == 0 and "fillp_sheep" in table.stdout and "Chromium" in table.stdout
    verbose = " ".join(cli("schemes", "--verbose").stdout.split())
    assert "webrtc (2017): evidence: StanfordLPNG/webrtc 0ab51f9a256ec712c4dc9907d28055b07bcbb1b5" in verbose


def test_pantheon_labels_resolve_to_our_schemes():
    registry = load_registry()
    kernel_vegas = registry.get("vegas")
    assert registry.resolve("default_tcp").name == "cubic"
    assert registry.resolve("quic").name == "quic-cubic"
    assert registry.resolve("vegas").name == ("vegas" if kernel_vegas and kernel_vegas.available else "udp-vegas")
    assert registry.resolve("copa").name == "udp-copa"
    assert registry.resolve("ledbat").name == "udp-ledbat"
    assert registry.resolve("saturator").name == "udp-saturator"
    assert registry.resolve("greg_saturator").name == "udp-saturator"
    assert registry.resolve("TCP_BBR").name == "bbr"  # via calibrate.scheme_registry, case-insensitive
    with pytest.raises(InputError, match="unknown scheme 'sprout'.*available here: cubic"):
        registry.resolve("sprout")
    with pytest.raises(InputError, match="listed twice"):
        registry.select("cubic,default_tcp,cubic")
    assert [label for label, _ in registry.select("all")] == [s.name for s in registry.available()]


def test_commands_follow_pantheons_contract():
    registry = load_registry()
    cubic, quic = registry.resolve("cubic"), registry.resolve("quic-cubic")
    assert cubic.argv("receiver", 5000) == [str(binaries.find("calibrate-scheme")), "cubic", "receiver", "5000"]
    assert cubic.argv("sender", 5000, "10.0.0.1")[-3:] == ["sender", "10.0.0.1", "5000"]
    assert quic.argv("sender", 5000)[-2:] == ["sender", "5000"]  # sender first: it listens
    assert quic.command("receiver", 5000).endswith('receiver "$EMU_PEER" 5000')
    assert cubic.command("receiver", 5000).startswith("exec ")


def test_unknown_scheme_is_a_one_line_error_listing_the_available(tmp_path):
    result = cli("emulate", "--emulator", PATH_12, "--schemes", "cubic,nosuch", "--out", str(tmp_path / "d"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "unknown scheme 'nosuch'" in result.stderr and "udp-copa" in result.stderr
    assert not (tmp_path / "d").exists()  # nothing written before the arguments are checked


@pytest.mark.parametrize("args, message", [
    (["--runtime", "61"], "--runtime must be in (0, 60]"),
    (["--runtime", "0"], "--runtime must be in (0, 60]"),
    (["--flows", "3", "--interval", "11", "--runtime", "20"], "exceeds the runtime"),
    (["--flows", "0"], "--flows must be"),
    (["--replicates", "0"], "--replicates (runs per scheme) must be"),
    (["--parallel", "0"], "--parallel must be"),
    (["--interval", "nan"], "--interval must be"),
    (["--runtime", "abc"], "invalid float value"),
    (["--emulator", "mm-link"], "mm-link UPLINK-TRACE DOWNLINK-TRACE"),
    (["--out", "/proc/calibrate-test"], "not writable"),
])
def test_bad_arguments_give_one_line_errors(tmp_path, args, message):
    base = {"--emulator": PATH_12, "--schemes": "cubic", "--out": str(tmp_path / "d")}
    for key, value in zip(args[::2], args[1::2], strict=True):
        base[key] = value
    result = cli("emulate", *[x for kv in base.items() for x in kv])
    assert result.returncode != 0
    assert result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr


def test_a_data_dir_with_results_is_not_overwritten_by_accident(tmp_path):
    (tmp_path / "cubic_datalink_run1.log").write_text("")
    result = cli("emulate", "--emulator", PATH_12, "--schemes", "cubic", "--out", str(tmp_path))
    assert result.returncode == 2 and "--overwrite" in result.stderr
    assert (tmp_path / "cubic_datalink_run1.log").exists()


# ---------------------------------------------------------------------------------------------
# Pantheon wrapper adapter

# A wrapper with Pantheon's command line that records how it was called, then runs one of our
# built-in schemes (as Pantheon's iperf wrappers run iperf).
WRAPPER = textwrap.dedent("""\
    import os, sys
    FIRST, SCHEME, PROGRAM = {first!r}, {scheme!r}, {program!r}
    if sys.argv[1:] == ["run_first"]:
        print(FIRST)
        sys.exit(0)
    if sys.argv[1] in ("deps", "setup", "setup_after_reboot"):
        sys.exit(0)
    with open(os.path.abspath(__file__) + ".calls", "a") as log:
        log.write(" ".join(sys.argv[1:]) + "\\n")
    {body}
    """)


def write_wrapper(wrappers: Path, key: str, first: str, scheme: str, body: str | None = None) -> Path:
    program = str(binaries.find("calibrate-scheme"))
    path = wrappers / f"{key}.py"
    path.write_text(WRAPPER.format(first=first, scheme=scheme, program=program,
                                   body=body or "os.execv(PROGRAM, [PROGRAM, SCHEME] + sys.argv[1:])"))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def pantheon_checkout(tmp_path):
    wrappers = tmp_path / "pantheon" / "src" / "wrappers"
    wrappers.mkdir(parents=True)
    (wrappers / "arg_parser.py").write_text("# Pantheon's helper, not a scheme\n")
    write_wrapper(wrappers, "cubic", "receiver", "cubic")
    write_wrapper(wrappers, "quic", "sender", "quic-cubic")
    write_wrapper(wrappers, "crashy", "receiver", "cubic",
                  body="import time\nif sys.argv[1] == 'sender':\n    time.sleep(1)\n    sys.exit(3)\n"
                       "os.execv(PROGRAM, [PROGRAM, SCHEME] + sys.argv[1:])")
    (wrappers / "broken.py").write_text("import no_such_module_here\n")
    return tmp_path / "pantheon"


def test_wrappers_join_the_registry(pantheon_checkout):
    write_wrapper(pantheon_checkout / "src" / "wrappers", "pcc", "receiver", "pcc-2017")
    write_wrapper(pantheon_checkout / "src" / "wrappers", "verus", "sender", "verus-2017")
    schemes = {s.name: s for s in pantheon_schemes(pantheon_checkout, sys.executable)}
    assert set(schemes) == {"pantheon-cubic", "pantheon-quic", "pantheon-pcc", "pantheon-verus",
                            "pantheon-crashy", "pantheon-broken"}
    assert schemes["pantheon-quic"].run_first == "sender" and schemes["pantheon-cubic"].run_first == "receiver"
    assert not schemes["pantheon-broken"].available
    assert "no_such_module_here" in schemes["pantheon-broken"].unavailable_reason
    registry = load_registry(pantheon_checkout, sys.executable)
    # A label Pantheon's checkout has resolves to Pantheon's own wrapper; our names stay ours.
    assert registry.resolve("quic").name == "pantheon-quic"
    assert registry.resolve("cubic").name == "cubic"
    assert registry.resolve("pantheon-cubic").kind == "pantheon-wrapper"
    # Pantheon's pcc wrapper runs UDT, whose sender spins as our port's does: a whole core.
    assert registry.resolve("pantheon-pcc").busy_wait and not registry.resolve("pantheon-cubic").busy_wait
    # Upstream verus's sending thread spins on its release count though our port sleeps: the
    # wrapper, which runs upstream's program, asks for a whole core; the port does not.
    assert registry.resolve("pantheon-verus").busy_wait and not registry.resolve("verus-2017").busy_wait

    listed = cli("schemes", "--json", "--pantheon-dir", str(pantheon_checkout), "--pantheon-python", sys.executable)
    assert listed.returncode == 0, listed.stderr
    assert {"pantheon-cubic", "pantheon-quic", "cubic"} <= {s["name"] for s in json.loads(listed.stdout)}
    bad = cli("schemes", "--pantheon-dir", str(pantheon_checkout / "src"))
    assert bad.returncode == 2 and "not a Pantheon checkout" in bad.stderr


def test_default_interpreter_runs():
    python = default_interpreter()
    assert subprocess.run([python, "-c", "pass"]).returncode == 0


@pytest.mark.needs_root
def test_wrappers_run_with_their_contract_and_failures_are_reported(pantheon_checkout, tmp_path):
    registry = load_registry(pantheon_checkout, sys.executable)
    data_dir = tmp_path / "data"
    experiment = Experiment(EmulatorConfig.parse(PATH_12), tuple(registry.select("pantheon-cubic,quic,crashy")),
                            Workload(1, 0.0, 5.0, 1), data_dir, parallel=2)
    outcomes = {o.cc: o for o in run_experiment(experiment)}
    wrappers = pantheon_checkout / "src" / "wrappers"
    # Receiver first: `receiver PORT`, then `sender IP PORT`; sender first: the reverse.
    assert (wrappers / "cubic.py.calls").read_text().splitlines() == ["receiver 50001", "sender 100.64.0.1 50001"]
    assert (wrappers / "quic.py.calls").read_text().splitlines() == ["sender 50001", "receiver 100.64.0.2 50001"]
    for cc in ("pantheon-cubic", "quic"):
        assert outcomes[cc].valid, outcomes[cc].validity
        assert outcomes[cc].stats.utilization >= 0.85
    crashed = outcomes["crashy"]
    assert not crashed.valid and crashed.failure
    assert "status 3" in crashed.validity.reason
    assert "Run discarded" in crashed.paths.stats.read_text()
    perf = read_perf_json(data_dir / "pantheon_perf.json")
    assert set(perf["pantheon-cubic"]) == {1} and perf["crashy"] == {}


def test_calibration_runs_the_targets_own_schemes_from_a_pantheon_checkout(pantheon_checkout):
    from calibrate.runs.config import RunConfig
    from calibrate.runs.problem import problem_of
    from calibrate.targets.load import load_target

    config = RunConfig(target="nepal", pantheon_dir=str(pantheon_checkout),
                       pantheon_python=sys.executable)
    assert RunConfig.from_json(config.to_json()) == config  # kept in run.json for resume
    problem = problem_of(load_target("nepal"), config)
    assert problem.schemes["quic"] == "pantheon-quic"  # Pantheon's wrapper, not quinn
    assert problem.schemes["default_tcp"] == "cubic"
    # without a checkout, a label means the port of the target's era (Nepal: 2017), and a
    # stand-in (quinn's quic-cubic) never runs unless the scheme is named
    default = problem_of(load_target("nepal"), RunConfig(target="nepal"))
    assert default.era == "2017" and "quic-cubic" not in default.schemes.values()
    named = problem_of(load_target("nepal"), RunConfig(target="nepal", schemes=("quic",)))
    assert named.schemes["quic"] == "quic-2017"


def test_runs_shorter_than_the_targets_are_announced():
    from calibrate.cli.common import dropped_lines
    from calibrate.runs.config import RunConfig
    from calibrate.runs.problem import Problem, problem_of
    from calibrate.targets.load import load_target

    target = load_target("nepal")  # Pantheon's 30 s runs
    short = problem_of(target, RunConfig(target="nepal", runtime_s=10.0))
    assert short.target_runtime_s == 30.0
    assert any("runs of 10 s against the target's 30 s" in line and "--runtime 30" in line
               for line in dropped_lines(short))
    config = RunConfig(target="nepal", runtime_s=30.0)
    same = problem_of(target, config)
    assert not any("against the target's" in line for line in dropped_lines(same))
    # read back from run.json, the problem still knows the target's runtime
    assert Problem.from_json(short.to_json(), target, config).target_runtime_s == 30.0


def test_a_sender_that_spins_asks_the_scheduler_for_a_whole_core():
    # calibrate-scheme says which senders busy-wait (UDT's send queue); a task running one
    # holds a core at any rate, where a sleeping sender's share grows with the rate.
    registry = load_registry()
    spinning = {s.name for s in registry.available() if s.busy_wait}
    assert spinning == {"pcc-2017", "vivace-2018", "pcc_experimental-2018"}
    # A port spins because the program it ports did: the registry file says so of that program.
    upstream_spins = {s.name for s in registry.available() if s.port_of is not None and s.port_of.busy_wait}
    assert upstream_spins == spinning | {"verus-2017"}

    def cpus(scheme: str, rate_mbps: float) -> float:
        return RunTask(0, scheme, registry.resolve(scheme), 1, EmulatorConfig(rate_mbps=rate_mbps, delay_ms=20),
                       Workload(1, 0.0, 20.0)).cpus

    assert cpus("cubic", 10) == pytest.approx(0.2) and cpus("cubic", 200) == 1.0
    assert cpus("pcc_experimental-2018", 10) == cpus("pcc-2017", 2) == 1.0
