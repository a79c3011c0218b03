"""Pantheon data dirs and archives of every era read into a Target."""

from __future__ import annotations

import json

import pytest

from calibrate.errors import InputError
from calibrate.targets.datadir import parse_title, read_data_dir
from calibrate.targets.load import load_target
from calibrate.targets.model import Target
from calibrate.targets.result_id import FetchOptions
from pantheon_fixtures import ERAS, tar_directory, write_data_dir, zip_directory

TITLE = "2017-01-03T21-30-Nepal-to-AWS-India-3-runs"


def _expected(valid, label):
    return {run: stats.metrics() for (lab, run), stats in valid.items() if lab == label}


@pytest.mark.parametrize("era", sorted(ERAS))
def test_every_era_as_archive(tmp_path, era):
    e = ERAS[era]
    folder = tmp_path / "src" / (TITLE + e.dir_suffix)
    valid = write_data_dir(folder, e, broken={("vegas", 2): "malformed",
                                              ("default_tcp", 3): "short",
                                              ("vegas", 3): "missing"})
    if era == "2017":
        (folder / "perf_data.pkl").write_bytes(b"\x80\x04not unpickled")
    archive = tar_directory(folder, tmp_path / f"{TITLE}{e.dir_suffix}{e.archive_suffix}",
                            folder.name)
    target = load_target(str(archive), fetch=FetchOptions(cache_dir=tmp_path / "cache"))

    cubic = target.scheme("cubic")
    assert cubic.label == "default_tcp" and target.scheme("default_tcp") is cubic
    assert [r.run for r in cubic.runs] == [1, 2]
    for run in cubic.runs:
        expected = _expected(valid, "default_tcp")[run.run]["all"]
        got = run.flows["all"]
        if era == "2018":  # pantheon_perf.json carries full precision
            assert run.source == "pantheon_perf.json" and got == expected
        else:  # recomputed from the datalink log with the same math
            assert run.source == "datalink log" and got == expected
    assert cubic.total.tput_mbps.mean == pytest.approx(
        sum(m["all"].throughput for m in _expected(valid, "default_tcp").values()) / 2)
    reasons = {(d.label, d.run): d.reason for d in target.dropped}
    assert "less than 80% of the 2 s runtime" in reasons[("default_tcp", 3)]
    assert "vegas_datalink_run2.log:5: malformed datalink log line" in reasons[("vegas", 2)]
    assert "no vegas_datalink_run3.log" in reasons[("vegas", 3)]
    assert len(target.dropped) == 3

    prov = target.provenance
    assert prov.kind == "archive" and prov.archive_name == archive.name
    assert prov.date == "2017-01-03T21:30" and prov.name == TITLE
    assert prov.path_description == "Nepal -> AWS India" and len(prov.sha256) == 64
    assert target.workload.runtime_s == 2.0 and target.workload.run_times == 3
    if era == "2017":
        assert any("perf_data.pkl not read" in n for n in prov.notes)
    assert any(("2016-17" if e.metadata_string_form else "2018+") in n for n in prov.notes)
    # nothing but the needed members was extracted (no raw logs)
    extracted = [p.name for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert not any(name.endswith(".ingress") for name in extracted)


def test_zip_archive_and_json_round_trip(tmp_path):
    folder = tmp_path / "src" / TITLE
    write_data_dir(folder, ERAS["2018"], flows=3, labels=("cubic", "quic", "copa"))
    archive = zip_directory(folder, tmp_path / f"{TITLE}.zip", TITLE)
    target = load_target(str(archive), fetch=FetchOptions(cache_dir=tmp_path / "cache"))
    assert target.scheme_names == ["copa", "cubic", "quic-cubic"]  # 2018+ lists are sorted
    assert set(target.scheme("quic").summary) == {"all", "1", "2", "3"}
    assert target.workload.flows == 3
    again = Target.from_json(json.loads(target.dumps()))
    assert again == target
    # and a saved target is itself a TARGET
    saved = tmp_path / "t.json"
    saved.write_text(target.dumps())
    assert load_target(str(saved)) == target


def test_metadata_forms(tmp_path):
    old = tmp_path / "old"
    write_data_dir(old, ERAS["2017"])
    meta = json.loads((old / "pantheon_metadata.json").read_text())
    assert isinstance(meta["cc_schemes"], str)
    t_old = read_data_dir(old)
    new = tmp_path / "new"
    write_data_dir(new, ERAS["2018"])
    t_new = read_data_dir(new)
    assert t_old.scheme_names == ["cubic", "vegas"]
    assert sorted(t_new.scheme_names) == ["cubic", "vegas"]
    assert t_old.provenance.path_description == "Nepal Wi-Fi mesh -> AWS India"
    assert t_new.provenance.path_description == "Nepal -> AWS India"  # sender is remote


def test_perf_json_preferred_per_run_with_fallback(tmp_path):
    folder = tmp_path / "d"
    valid = write_data_dir(folder, ERAS["2018"])
    perf = json.loads((folder / "pantheon_perf.json").read_text())
    del perf["vegas"]["2"]  # e.g. Pantheon crashed on it (tunnel_graph.py under NumPy 2)
    (folder / "pantheon_perf.json").write_text(json.dumps(perf))
    target = read_data_dir(folder)
    sources = {r.run: r.source for r in target.scheme("vegas").runs}
    assert sources == {1: "pantheon_perf.json", 2: "datalink log", 3: "pantheon_perf.json"}
    assert target.scheme("vegas").runs[1].flows == valid[("vegas", 2)].metrics()


def test_stats_logs_only(tmp_path):
    folder = tmp_path / "d"
    valid = write_data_dir(folder, ERAS["2017"], broken={("vegas", 1): "short"})
    for log in folder.glob("*_datalink_run*.log"):
        log.unlink()
    target = read_data_dir(folder)
    vegas = target.scheme("vegas")
    assert [r.source for r in vegas.runs] == ["stats log", "stats log"]
    assert vegas.runs[0].flows["all"].throughput == pytest.approx(
        valid[("vegas", 2)].total.tput_mbps, abs=0.005)
    (reason,) = [d.reason for d in target.dropped]
    assert "no statistics block (Pantheon discarded the run" in reason


def test_malformed_metadata_names_file_and_line(tmp_path):
    folder = tmp_path / "d"
    write_data_dir(folder, ERAS["2018"])
    (folder / "pantheon_metadata.json").write_text('{\n  "runtime": 30,\n  "flows": 1,,\n}')
    with pytest.raises(InputError, match=r"pantheon_metadata\.json:3:\d+: malformed"):
        read_data_dir(folder)


def test_malformed_perf_json_falls_back_to_logs_with_a_note(tmp_path):
    folder = tmp_path / "d"
    write_data_dir(folder, ERAS["2018"])
    (folder / "pantheon_perf.json").write_text("{\n  nope\n}")
    target = read_data_dir(folder)
    assert all(r.source == "datalink log" for s in target.schemes for r in s.runs)
    assert any("pantheon_perf.json:2:" in n for n in target.provenance.notes)


def test_nothing_valid_is_an_error_listing_reasons(tmp_path):
    folder = tmp_path / "d"
    write_data_dir(folder, ERAS["2017"], labels=("copa",), runs=1, broken={("copa", 1): "short"})
    with pytest.raises(InputError, match="no valid run of any scheme: copa run 1"):
        read_data_dir(folder)
    with pytest.raises(InputError, match="no Pantheon results here"):
        read_data_dir(tmp_path / "d2" if (tmp_path / "d2").mkdir() is None else None)


def test_title_parsing():
    t = parse_title("2017-01-03T21-30-Nepal-to-AWS-India-10-runs-logs.tar.xz")
    assert (t.name, t.date, t.path_description, t.runs) == (
        "2017-01-03T21-30-Nepal-to-AWS-India-10-runs", "2017-01-03T21:30", "Nepal -> AWS India", 10)
    t = parse_title("2018-06-01T01-02-AWS-Brazil-2-to-Colombia-cellular-5-runs-3-flows.tar.gz")
    assert t.path_description == "AWS Brazil 2 -> Colombia cellular" and t.runs == 5
    assert parse_title("2018-06-01T01-02-emu-3-5-runs.tar.gz").path_description == \
        "emulation scenario 3"
