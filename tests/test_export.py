"""Exporting a calibration: a run directory made by the real writers (Calibration.start writes
run.json and target.json; the journal lines are scored by the real objective from made-up
emulated numbers), exported, and every file of the export checked."""

from __future__ import annotations

import datetime as dt
import json
import shlex
from pathlib import Path

import pytest

from calibrate import trace
from calibrate.emulator import EmulatorConfig
from calibrate.errors import InputError
from calibrate.export import export
from calibrate.metrics import Stats
from calibrate.objective import Failure, replication_error
from calibrate.runs.calibration import Calibration
from calibrate.runs.config import RunConfig, emulator_of
from calibrate.runs.evaluate import scheme_table
from calibrate.runs.journal import JOURNAL, RESULT, Evaluation, RunDir, jsonable, write_atomic
from calibrate.targets.load import load_target

# (link, params, how far the emulated numbers are off): poisson's second candidate is best;
# constant's best is the third line, with one scheme's runs all failed (penalized)
CANDIDATES = [
    ("constant", {"rate": 9.6, "delay": 36, "queue": 187, "loss": 0.0034}, 0.60),
    ("poisson", {"rate": 9.6, "delay": 36, "queue": 187, "loss": 0.0034}, 0.25),
    ("constant", {"rate": 7.25, "delay": 20, "queue": 90, "loss": 0.0}, 0.12),
    ("poisson", {"rate": 6.125, "delay": 28, "queue": 60, "loss": 0.0477}, 0.04),
    ("constant", {"rate": 12.5, "delay": 10, "queue": 400, "loss": 0.001}, 0.50),
]
WINNER = CANDIDATES[3]
RUNNER_UP = CANDIDATES[2]
FAILING = 2  # the candidate with a failed scheme


def _record(calibration: Calibration, index: int, link: str, params: dict, off: float) -> Evaluation:
    """One journal record as `Calibration._finish` makes it, scored by the real objective."""
    problem = calibration.problem
    emulated = {}
    for i, (key, real) in enumerate(problem.real.items()):
        if index == FAILING and i == 0:  # a scheme whose runs all failed: penalized, no emulated point
            emulated[key] = [Failure("engine failed"), Failure("engine failed")]
            continue
        sign = 1 if i % 2 else -1
        emulated[key] = [Stats(real.throughput * (1 + sign * off * k), real.delay * (1 - sign * off * k),
                               real.loss) for k in (0.9, 1.1)]
    error = replication_error(problem.real, emulated, aggregate="mean")
    seed = json.loads((calibration.run_dir / "run.json").read_text())["seeds"][link]
    emulator = emulator_of(params, link, seed)
    now = dt.datetime.now(dt.UTC).isoformat()
    return Evaluation.from_json(jsonable({
        "index": index, "link": link, "candidate": index,
        "x": [float(v) for v in problem.space.from_values(params, clip=True)],
        "params": params, "emulator": emulator.mahimahi_command(), "seed": seed,
        "loss_seeds": [seed * 1000 + 1, seed * 1000 + 2], "f": error.f, "noise": error.noise,
        "floor": error.floor,
        "errors_pct": {"tput": error.throughput, "delay": error.delay, "loss": error.loss},
        "schemes": scheme_table(error), "penalized": {str(k): v for k, v in error.penalized.items()},
        "runs": [], "started_at": now, "finished_at": now, "seconds": 12.0,
        "elapsed_s": 12.0 * (index + 1)}))


def make_run(root: Path, candidates=CANDIDATES, *, result: bool = True) -> Path:
    run_dir = root / "run"
    config = RunConfig(target="nepal", optimizer="random", budget=3, runtime_s=10, replicates=2,
                       seed=3)
    calibration = Calibration.start(run_dir, config, load_target("nepal"))
    for index, (link, params, off) in enumerate(candidates):
        calibration.directory.append(_record(calibration, index, link, params, off))
    if result:
        write_atomic(run_dir / RESULT, jsonable(Calibration.open(run_dir).result()))
    return run_dir


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, Path, dict]:
    run_dir = make_run(tmp_path_factory.mktemp("export"))
    out = export(run_dir)
    return run_dir, out, json.loads((out / "emulator.json").read_text())


def _journal(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / JOURNAL).read_text().splitlines()]


def test_emulator_json_reports_both_link_kinds_winner_first(exported):
    run_dir, out, report = exported
    assert out == run_dir / "export"
    journal = _journal(run_dir)
    best = {link: min((r for r in journal if r["link"] == link), key=lambda r: r["f"])
            for link in ("constant", "poisson")}
    assert best["poisson"]["f"] < best["constant"]["f"]
    assert report["winner"] == "poisson" and list(report["links"]) == ["poisson", "constant"]
    assert report["links"]["poisson"]["winner"] and not report["links"]["constant"]["winner"]
    for link, (_, params, _) in (("poisson", WINNER), ("constant", RUNNER_UP)):
        entry, record = report["links"][link], best[link]
        assert entry["candidate"] == record["candidate"]
        assert entry["f"] == pytest.approx(record["f"])
        assert entry["noise"] == pytest.approx(record["noise"])
        assert entry["floor"] == pytest.approx(record["floor"])
        assert entry["loss_error_pct"] == pytest.approx(record["errors_pct"]["loss"])
        assert entry["evaluations"] == sum(r["link"] == link for r in journal)
        emu = entry["emulator"]
        assert (emu["rate_mbps"], emu["delay_ms"], emu["queue_packets"], emu["uplink_loss"]) == \
            (params["rate"], params["delay"], params["queue"], params["loss"])
        assert emu["link"] == link and emu["seed"] == record["seed"] and emu["queue"] == "droptail"
        rows = {r["scheme"]: r for r in entry["schemes"]}
        assert set(rows) == {r["scheme"] for r in record["schemes"]}
        for row in record["schemes"]:
            mine = rows[row["scheme"]]
            assert mine["real"]["tput"] == pytest.approx(row["real"]["tput"])
            assert mine["real"]["delay"] == pytest.approx(row["real"]["delay"])
            if row["emulated"] is None:
                assert mine["emulated"] is None and mine["failures"] and link == "constant"
            else:
                assert mine["emulated"]["tput"] == pytest.approx(row["emulated"]["tput"])
            assert mine["error_pct"] == pytest.approx(row["error_pct"])
        assert rows["default_tcp"]["ran_as"] == "cubic"
    # every scored label, what ran for it, and its fidelity to what Pantheon ran
    fidelity = report["scheme_fidelity"]
    assert set(fidelity) == {r["scheme"] for r in report["links"]["poisson"]["schemes"]}
    assert fidelity["default_tcp"]["ran_as"] == "cubic" and fidelity["default_tcp"]["faithful"]
    assert fidelity["default_tcp"]["difference"].startswith("the Linux kernel's own")
    assert report["emulator"]["link"] == "poisson"
    assert report["emulator"]["rate_mbps"] == WINNER[1]["rate"]
    assert report["evaluations"] == len(journal) and report["wall_s"] == pytest.approx(60.0)
    prov = report["provenance"]
    assert prov["target"]["name"] == "nepal" and prov["target"]["provenance"]["kind"] == "bundled"
    assert prov["run"]["settings"]["optimizer"] == "random" and prov["run"]["result"] == RESULT
    assert prov["calibrate_version"] and prov["exported_at"]
    assert sorted(report["files"]) == sorted(
        str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


def test_mahimahi_line_parses_back_and_traces_have_the_rate(exported):
    _, out, report = exported
    for folder, (link, params, _) in (("", WINNER), ("poisson", WINNER), ("constant", RUNNER_UP)):
        seed = report["links"][link]["emulator"]["seed"]
        text = (out / folder / "mahimahi.txt").read_text().strip()
        # the trace paths in the line are relative to the export directory; elsewhere their
        # Pantheon-style names still say the rate, kind and seed
        for dirs in ((out,), (out / "traces",)):
            parsed = EmulatorConfig.parse(text, trace_dirs=dirs)
            assert parsed.delay_ms == params["delay"]
            assert parsed.queue.kind == "droptail" and parsed.queue.packets == params["queue"]
            assert parsed.uplink_loss == pytest.approx(params["loss"])
            assert parsed.downlink_loss == 0
            if dirs == (out,):
                assert parsed.uplink_trace == parsed.downlink_trace
                assert parsed.uplink_trace.parent == out / "traces"
                info = trace.describe(parsed.uplink_trace)
                assert info.rate_mbps == pytest.approx(params["rate"], rel=0.03)
            else:
                assert parsed.uplink_trace is None and parsed.link == link
                assert parsed.rate_mbps == pytest.approx(params["rate"], rel=1e-5)
                assert parsed.trace_seed == (seed if link == "poisson" else 0)
        kind = "poisson" if link == "poisson" else "constant"
        expected = emulator_of(params, link, seed).trace_paths(out / "traces")
        assert [p.name for p in expected] == [Path(t).name for t in shlex.split(text)[-4:-2]]
        if kind == "constant":  # Pantheon's constant trace, exactly
            assert trace.describe(expected[0]).opportunities == round(params["rate"] * 5000)
        pantheon = (out / folder / "pantheon_args.txt").read_text().strip()
        assert EmulatorConfig.parse(pantheon, trace_dirs=(out,)) == EmulatorConfig.parse(text, trace_dirs=(out,))
        args = shlex.split(pantheon)
        assert args[args.index("--extra-mm-link-args") + 1] == \
            f"--uplink-queue=droptail --uplink-queue-args=packets={params['queue']}"
        engine = shlex.split((out / folder / "engine.txt").read_text())
        assert engine[0] == "calibrate-link"
        assert engine[engine.index("--delay") + 1] == str(params["delay"])
        assert engine[engine.index("--seed") + 1] == str(seed)
        assert engine[engine.index("--uplink-trace") + 1].startswith("traces/")
    assert (out / "mahimahi.txt").read_text() == (out / "poisson" / "mahimahi.txt").read_text()
    assert report["emulator"]["files"]["mahimahi"] == "mahimahi.txt"
    assert report["links"]["constant"]["files"]["mahimahi"] == "constant/mahimahi.txt"


def test_plots_are_real_images(exported):
    _, out, _ = exported
    for name in ("figure3.png", "convergence.png"):
        data = (out / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000, name
    svg = (out / "figure3.svg").read_text()
    assert "<svg" in svg and "default_tcp" in svg and "poisson deliveries, winner" in svg
    assert "scored: " in svg and "default_tcp as cubic" in svg  # the caption names what ran


def test_missing_result_is_computed_from_the_journal(tmp_path, exported):
    _, _, with_result = exported
    run_dir = make_run(tmp_path, result=False)
    out = export(run_dir, tmp_path / "elsewhere" / "exp")
    report = json.loads((out / "emulator.json").read_text())
    assert not (run_dir / "export").exists() and not (run_dir / RESULT).exists()
    assert "computed from the journal" in report["provenance"]["run"]["result"]
    for key in ("winner", "evaluations", "emulator"):
        assert report[key] == with_result[key]
    assert report["links"]["constant"]["f"] == with_result["links"]["constant"]["f"]


def test_export_of_a_run_still_writing_leaves_its_journal_alone(tmp_path, exported):
    """A run that is writing its next journal line (no newline yet) exports what is finished,
    and the half-written line is still there for the run to complete."""
    _, _, with_result = exported
    run_dir = make_run(tmp_path, result=False)
    journal = run_dir / JOURNAL
    with open(journal, "a") as f:
        f.write('{"index": 4, "link": "const')
    before = journal.read_bytes()
    report = json.loads((export(run_dir) / "emulator.json").read_text())
    assert journal.read_bytes() == before
    assert report["evaluations"] == with_result["evaluations"]


def test_a_single_link_kind_and_reexport_replace_old_files(tmp_path):
    run_dir = make_run(tmp_path, [CANDIDATES[0], RUNNER_UP], result=False)
    out = export(run_dir)
    report = json.loads((out / "emulator.json").read_text())
    assert report["winner"] == "constant" and list(report["links"]) == ["constant", "poisson"]
    assert report["links"]["poisson"]["evaluations"] == 0
    assert "emulator" not in report["links"]["poisson"] and not (out / "poisson").exists()
    assert report["links"]["constant"]["files"]["traces"] == ["traces/7.25mbps.trace"]
    # a resumed run found a better constant emulator: the re-export drops the old trace
    better = ("constant", {"rate": 8.0, "delay": 30, "queue": 60, "loss": 0.0}, 0.02)
    RunDir.open(run_dir).append(_record(Calibration.open(run_dir), 5, *better))
    report = json.loads((export(run_dir) / "emulator.json").read_text())
    assert report["emulator"]["rate_mbps"] == 8.0
    assert sorted(p.name for p in (out / "traces").iterdir()) == ["8mbps.trace"]
    assert sorted(report["files"]) == sorted(
        str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert not [p for p in out.parent.iterdir() if p.name.endswith(".tmp")]


def _no_leftovers(parent: Path) -> None:
    assert not (parent / "export").exists()
    assert not [p for p in parent.iterdir() if p.name.startswith(".export")]


def test_errors_name_the_problem_and_leave_nothing(tmp_path):
    with pytest.raises(InputError, match="no such run directory"):
        export(tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="not a calibration run directory"):
        export(tmp_path / "empty")
    _no_leftovers(tmp_path / "empty")

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    Calibration.start(fresh / "run", RunConfig(target="nepal", optimizer="random"), load_target("nepal"))
    with pytest.raises(InputError, match="nothing evaluated yet.*calibrate resume"):
        export(fresh / "run")
    _no_leftovers(fresh / "run")

    run_dir = make_run(tmp_path / "broken")
    (run_dir / JOURNAL).write_text('{"link": "constant"}\n')
    with pytest.raises(InputError, match=r"evaluations\.jsonl:1 \(evaluation 1\) lacks"):
        export(run_dir)
    (run_dir / JOURNAL).write_text("{not json\n")
    with pytest.raises(InputError, match=r"evaluations\.jsonl:1:2: not a JSON record.*delete that line"):
        export(run_dir)
    (run_dir / "run.json").write_text("[1, 2")
    with pytest.raises(InputError, match="run.json.*malformed run settings"):
        export(run_dir)
    _no_leftovers(run_dir)


def test_unwritable_output_leaves_nothing(tmp_path, exported):
    run_dir, _, _ = exported
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError, match="is a file"):
        export(run_dir, blocker)
    with pytest.raises(InputError, match="cannot create the export directory"):
        export(run_dir, blocker / "sub" / "export")
    assert blocker.read_text() == "x"


def test_cli_prints_tables_and_json(exported, tmp_path, capsys):
    from calibrate import cli

    run_dir, _, report = exported
    assert cli.main(["export", str(run_dir), "--out", str(tmp_path / "x")]) == 0
    text = capsys.readouterr().out
    for needle in ("emulator.json", "traces/", "constant/mahimahi.txt",
                   "winner (poisson)", "emulator: mm-delay 28"):
        assert needle in text, needle
    assert cli.main(["export", str(run_dir), "--out", str(tmp_path / "x"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["emulator"] == report["emulator"] and printed["winner"] == "poisson"
    assert cli.main(["export", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such run directory" in err[0]


def test_ranges_reach_emulator_json_and_figure_3(tmp_path, exported):
    from calibrate.ranges import Range, Ranges

    _, out, report = exported  # random search: no model, no range, and the export says why
    for entry in report["links"].values():
        assert entry["ranges"] is None and "random search has no model" in entry["ranges_note"]
    assert report["emulator"]["ranges"] is None
    assert "no range: random search has no model" in (out / "figure3.svg").read_text()
    # a GP search's ranges, as Calibration.result writes them into result.json
    run_dir = make_run(tmp_path)
    result = json.loads((run_dir / RESULT).read_text())
    ranges = Ranges((Range("rate", 5.9, 6.4), Range("delay", 27, 30), Range("queue", 40, 90),
                     Range("loss", 0.03, 0.06)))
    result["links"]["poisson"].update(ranges.to_json())
    write_atomic(run_dir / RESULT, result)
    out = export(run_dir)
    report = json.loads((out / "emulator.json").read_text())
    expected = {"rate_mbps": [5.9, 6.4], "delay_ms": [27, 30], "queue_packets": [40, 90],
                "uplink_loss": [0.03, 0.06]}
    assert report["emulator"]["ranges"] == report["links"]["poisson"]["ranges"] == expected
    text = report["links"]["poisson"]["ranges_text"]
    assert text == ("indistinguishable from the best: rate 5.90–6.40 Mbit/s, delay 27–30 ms, "
                    "queue 40–90 packets, loss 3.00–6.00 %")
    assert "rate 5.90–6.40 Mbit/s" in (out / "figure3.svg").read_text()


def test_a_version_1_report_reads_in_todays_spelling() -> None:
    """emulator.json 1 spelt a scheme's numbers {"tput_mbps", "delay_p95_ms", "loss"}; readers
    (the service) see every version as today's {"tput", "delay", "loss"}."""
    from calibrate.export import EXPORT_FORMAT, EXPORT_VERSION, read_report

    old = {"format": EXPORT_FORMAT, "version": 1, "links": {
        "poisson": {"winner": True, "schemes": [
            {"scheme": "cubic", "real": {"tput_mbps": 5.08, "delay_p95_ms": 58.2, "loss": 0.001},
             "emulated": None}]},
        "constant": {"winner": False, "stopped": "budget"}}}
    new = read_report(old)
    row = new["links"]["poisson"]["schemes"][0]
    assert row["real"] == {"tput": 5.08, "delay": 58.2, "loss": 0.001} and row["emulated"] is None
    assert new["version"] == EXPORT_VERSION and new["links"]["constant"] == old["links"]["constant"]
    assert read_report(new) is new
