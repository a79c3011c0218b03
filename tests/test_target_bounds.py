"""Every number a target declares has a physical bound (`calibrate.targets.bounds`), checked by
each reader where it reads it: a declared number past its bound, or no number at all, is one
line (InputError, the CLI's exit 2) naming the field, the value, the bound and the fix, and
nothing is made per declared flow or run before that."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from calibrate.cli import main
from calibrate.errors import InputError
from calibrate.targets.bounds import BOUNDS
from calibrate.targets.load import load_target

ROW = "scheme,runs,tput_mbps_mean,delay_p95_ms_mean,loss_pct_mean\ncubic,10,5.1,52.0,0.2\n"
PERF = {"cubic": {"1": {"all": {"tput": 5.1, "delay": 52.0, "loss": 0.002}}}}
#: the address space the memory-limited reader gets: a regression fails with MemoryError
#: instead of taking the host's memory
MEMORY_LIMIT = 400 * 1024**2


def _json_table(**top) -> str:
    scheme = {"runs": 10, "tput_mbps": {"mean": 5.1}, "delay_p95_ms": {"mean": 52.0}}
    return json.dumps({"schemes": {"cubic": {**scheme, **top.pop("scheme", {})}}, **top})


def _target_json(**changes) -> str:
    data = json.loads(load_target("nepal").dumps())
    for key, value in changes.items():
        if key == "flows":
            data["workload"]["flows"] = value
        else:
            data[key] = value
    return json.dumps(data)


def _data_dir(directory: Path, metadata: dict | None = None, perf: object = None) -> Path:
    directory.mkdir()
    (directory / "pantheon_metadata.json").write_text(json.dumps(
        {"cc_schemes": ["cubic"], "runtime": 30, "flows": 1, "run_times": 1, **(metadata or {})}))
    (directory / "pantheon_perf.json").write_text(perf if isinstance(perf, str) else json.dumps(perf or PERF))
    return directory


#: (what, file name, its text or a data directory maker, words of the one-line message)
HOSTILE = [
    ("flows 1e30 in a table", "t.csv", "# flows: 1e30\n" + ROW, "flows '1e30' is not a whole number from 1 to 64"),
    ("flows nan", "t.csv", "# flows: nan\n" + ROW, "flows 'nan' is not a whole number from 1 to 64"),
    ("flows 0", "t.csv", "# flows: 0\n" + ROW, "flows '0' is not a whole number from 1 to 64"),
    ("flows 2.5", "t.csv", "# flows: 2.5\n" + ROW, "flows '2.5' is not a whole number"),
    ("flows past Pantheon's", "t.csv", "# flows: 65\n" + ROW, "from 1 to 64 (flows per run, Pantheon's -f)"),
    ("negative runtime", "t.csv", "# runtime_s: -5\n" + ROW,
     "runtime_s '-5' is not a number above 0 and at most 600 s"),
    ("zero runtime", "t.csv", "# runtime_s: 0\n" + ROW, "runtime_s '0' is not a number above 0"),
    ("runtime of a day", "t.csv", "# runtime_s: 86400\n" + ROW, "at most 600 s"),
    ("negative interval", "t.csv", "# interval_s: -1\n" + ROW, "interval_s '-1' is not a number from 0 to 600 s"),
    ("run_times 1e12", "t.csv", "# run_times: 1000000000000\n" + ROW,
     "runs '1000000000000' is not a whole number from 1 to 1000"),
    ("std_ddof not a number", "t.csv", "# std_ddof: sample\n" + ROW,
     "std_ddof 'sample' is not a whole number from 0 to 1"),
    ("std_ddof 5", "t.csv", "# std_ddof: 5\n" + ROW, "std_ddof '5' is not"),
    ("runs past the bound", "t.csv", ROW.replace(",10,", ",99999999999,"), "t.csv:2: runs '99999999999' is not"),
    ("a flow key past the bound", "t.csv",
     "scheme,flow,tput_mbps_mean,delay_p95_ms_mean\ncubic,all,5,50\ncubic,1000000,5,50\n", "flows '1000000' is not"),
    ("a flow key that is no number", "t.csv",
     "scheme,flow,tput_mbps_mean,delay_p95_ms_mean\ncubic,all,5,50\ncubic,1e30,5,50\n",
     "flow key '1e30' is neither 'all' nor a flow number"),
    ("JSON table flows 1e300", "t.json", _json_table(workload={"flows": 1e300}), "flows '1e+300' is not"),
    ("JSON table std_ddof a word", "t.json", _json_table(std_ddof="x"), "std_ddof 'x' is not"),
    ("JSON table runs true", "t.json", _json_table(scheme={"runs": True}), "runs True is not"),
    ("JSON table loss: 5", "t.json", _json_table(scheme={"loss": 5}),
     "loss 5 is not {\"mean\": .., \"std\": ..}; \"loss\" holds fractions (0.004), \"loss_pct\" percent"),
    ("JSON table loss mean 5 (a fraction: 500 %)", "t.json", _json_table(scheme={"loss": {"mean": 5}}),
     "loss 500 % is impossible"),
    ("target JSON version a word", "target.json", lambda: _target_json(version="x"), "version 'x' is not 1"),
    ("target JSON version true", "target.json", lambda: _target_json(version=True), "version True is not 1"),
    ("target JSON of a newer version", "target.json", lambda: _target_json(version=2),
     "version 2 is not 1 (the version of a calibrate target JSON this calibrate reads); a newer version"),
    ("target JSON flows 1e30", "target.json", lambda: _target_json(flows=1e30), "flows 1e+30 is not"),
    ("metadata run_times 1e12", "dir", {"metadata": {"run_times": 10**12}},
     "runs 1000000000000 is not a whole number from 1 to 1000"),
    ("metadata flows 1e30", "dir", {"metadata": {"flows": 1e30}}, "flows 1e+30 is not"),
    ("metadata negative runtime", "dir", {"metadata": {"runtime": -30}}, "runtime_s -30 is not"),
    ("metadata start_run_id 1e9", "dir", {"metadata": {"start_run_id": 10**9}}, "run 1000000000 is not"),
    ("metadata interval nan", "dir", {"metadata": {"interval": "nan"}}, "interval_s 'nan' is not"),
    ("perf run id of 5000 digits", "dir", {"perf": '{"cubic": {"' + "9" * 5000 + '": {"all": {"tput": 1}}}}'},
     "run '999999999"),
    ("perf flow key past the bound", "dir",
     {"perf": {"cubic": {"1": {"all": {"tput": 1}, "100": {"tput": 1}}}}}, "flows '100' is not"),
]


def _write(tmp_path: Path, name: str, content) -> Path:
    if name == "dir":
        return _data_dir(tmp_path / "data", **content)
    path = tmp_path / name
    path.write_text(content() if callable(content) else content)
    return path


@pytest.mark.parametrize("what", [row[0] for row in HOSTILE])
def test_a_declared_number_past_its_bound_is_one_line(tmp_path, what):
    (_, name, content, words), = [row for row in HOSTILE if row[0] == what]
    path = _write(tmp_path, name, content)
    with pytest.raises(InputError) as error:
        load_target(str(path))
    message = str(error.value)
    assert words in message and "\n" not in message and len(message) < 400, message


@pytest.mark.parametrize("what", ["flows 1e30 in a table", "JSON table loss: 5", "target JSON version a word",
                                  "metadata run_times 1e12"])
def test_the_cli_refuses_them_with_exit_2_and_one_line(tmp_path, capsys, what):
    (_, name, content, words), = [row for row in HOSTILE if row[0] == what]
    path = _write(tmp_path, name, content)
    assert main(["target", "show", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("calibrate: error: ") and words in err, err


def test_the_bounds_themselves_are_accepted(tmp_path):
    flows = int(BOUNDS["flows"].high)
    per_flow = "".join(f"cubic,{f},5,50\n" for f in range(1, flows + 1))
    table = tmp_path / "edge.csv"
    table.write_text(f"# flows: {flows}\n# runtime_s: {BOUNDS['runtime_s'].high:g}\n# interval_s: 0\n"
                     f"# run_times: {int(BOUNDS['runs'].high)}\n# std_ddof: 1\n"
                     f"scheme,runs,flow,tput_mbps_mean,delay_p95_ms_mean\ncubic,1000,all,5,50\n"
                     + per_flow.replace("cubic,", "cubic,1000,"))
    target = load_target(str(table))
    assert (target.workload.flows, target.workload.runtime_s, target.workload.run_times) == (64, 600.0, 1000)
    assert target.provenance.std_ddof == 1 and len(target.schemes[0].summary) == 65
    # Pantheon's -f 0 (no tunnel) is one flow at the link
    assert load_target(str(_data_dir(tmp_path / "f0", {"flows": 0}))).workload.flows == 1


_BOUNDED_READ = textwrap.dedent("""
    import resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
    from calibrate.errors import InputError
    from calibrate.runs.config import RunConfig
    from calibrate.runs.problem import problem_of, registry_of
    from calibrate.targets.load import load_target
    start = time.perf_counter()
    try:
        target = load_target(sys.argv[1])
    except InputError as error:
        print(f"{{time.perf_counter() - start:.6f}} {{error}}")
        sys.exit(0)
    # accepted: derive the problem as the service's intake does (a MemoryError under the limit)
    config = RunConfig(target=sys.argv[1])
    problem_of(target, config, registry_of(config))
    sys.exit(1)
""")


@pytest.mark.parametrize("what", ["flows 1e30 in a table", "JSON table flows 1e300", "target JSON flows 1e30",
                                  "metadata run_times 1e12", "metadata flows 1e30"])
def test_a_huge_declared_count_is_refused_in_milliseconds_without_allocating(tmp_path, what):
    """The attack (a small upload declaring 1e30 flows) under an address-space limit:
    refused by the reader in milliseconds, instead of allocating one entry per declared flow."""
    (_, name, content, words), = [row for row in HOSTILE if row[0] == what]
    path = _write(tmp_path, name, content)
    script = _BOUNDED_READ.format(limit=MEMORY_LIMIT)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    seconds, message = done.stdout.split(" ", 1)
    assert words in message
    assert float(seconds) < 0.5, seconds


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000,
                                  '{"cubic": {"1": {"all": {"tput": ' + "9" * 5000 + "}}}}"])
def test_json_no_parser_survives_is_one_line(tmp_path, text):
    """Nesting past Python's recursion limit, a number past its digit limit: malformed JSON."""
    directory = _data_dir(tmp_path / "data", perf=text)
    with pytest.raises(InputError, match="pantheon_perf.json: malformed pantheon_perf.json") as error:
        load_target(str(directory))
    assert "\n" not in str(error.value)


def test_a_datalink_flow_id_past_the_bound_is_refused(tmp_path):
    directory = _data_dir(tmp_path / "data", perf={})
    (directory / "pantheon_perf.json").unlink()
    (directory / "cubic_datalink_run1.log").write_text(
        "# base timestamp: 0\n0 + 1500 99999999999999999999\n1 - 1500 5 99999999999999999999\n")
    with pytest.raises(InputError, match="its largest flow id: flows 1e\\+20 is not a whole number from 1 to 64"):
        load_target(str(directory))


def test_any_other_reader_failure_is_one_input_error(tmp_path, monkeypatch):
    """What a reader did not foresee is still the input's refusal, one line, not a traceback."""
    import calibrate.targets.load as load

    def fails(path, **_):
        raise RecursionError("maximum recursion depth exceeded\nwhile reading")

    monkeypatch.setattr(load, "read_summary_table", fails)
    path = _write(tmp_path, "t.csv", ROW)
    with pytest.raises(InputError) as error:
        load_target(str(path))
    assert str(error.value) == (f"{path}: cannot be read (RecursionError: maximum recursion depth exceeded while "
                                "reading); it is not a Pantheon result or table this calibrate reads")
