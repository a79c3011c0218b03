"""The calibration service for real: `calibrate serve` as a subprocess, jobs that are real small
calibrations (two schemes of the bundled Nepal target, real engines on an embedded Ray), its
clients (`calibrate submit|jobs|fetch`), a server killed with SIGKILL mid-calibration and
started again, the store on a real PostgreSQL server, and every malformed request answered
with its status and one sentence.

One server and one finished calibration serve most tests (module fixtures): the suite is long
already.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
import warnings
import zipfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from calibrate.errors import Notice
from calibrate.runs.config import RunConfig
from calibrate.runs.journal import RunDir
from calibrate.service.intake import CalibrationRequest, Intake, RunOptions, ScoreRequest
from calibrate.service.scheduler import Scheduler
from calibrate.service.settings import ServiceSettings
from calibrate.service.store import CALIBRATION, DONE, QUEUED, RUNNING, Job, Store, now
from service_fixtures import (
    CALIBRATE,
    SMALL,
    Server,
    free_port,
    make_token,
    running_server,
    start_server,
    wait_for,
)

pytestmark = pytest.mark.needs_root

#: the shared server's upload limit, small enough to pass with a test archive
UPLOAD_LIMIT = 200_000
#: the shared server's expansion limit for an uploaded archive (its default is 1 GiB)
EXTRACT_LIMIT = 10 * 1024**2
NEPAL_CSV = Path(__file__).parents[1] / "calibrate" / "data" / "nepal-2017-01-03.csv"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("service"), "--max-upload-bytes", str(UPLOAD_LIMIT),
                        "--max-extract-bytes", str(EXTRACT_LIMIT)) as server:
        yield server
    assert server.process is not None and server.process.returncode == 0, server.log.read_text()


@pytest.fixture(scope="module")
def finished(server) -> dict:
    """The shared small calibration, run to its end."""
    answer = server.submit()
    assert answer["existing"] is False and answer["state"] == "queued"
    job = server.wait(answer["id"])
    assert job["state"] == "done", (job, server.get(f"/v1/calibrations/{answer['id']}/log").text)
    return job


def _events(server, job_id: str, **headers: str) -> list[tuple[str, str | None, dict]]:
    """(event, id, data) of the job's stream, to its end."""
    out, name, ident, data = [], None, None, []
    with httpx.stream("GET", f"{server.url}/v1/calibrations/{job_id}/events", headers={**server.headers(), **headers},
                      timeout=httpx.Timeout(30, read=300)) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("id: "):
                ident = line.removeprefix("id: ")
            elif line.startswith("data: "):
                data.append(line.removeprefix("data: "))
            elif not line and name:
                out.append((name, ident, json.loads("\n".join(data))))
                name, ident, data = None, None, []
                if out[-1][0] == "end":
                    break
    return out


def _check_journal(run_dir: Path, budget: int) -> list:
    """Every evaluation once: per link kind n = 1..budget, each candidate once."""
    records = RunDir.open(run_dir).evaluations()
    links: dict[str, int] = {}
    for r in records:
        links[r.link] = links.get(r.link, 0) + 1
    assert links == {"constant": budget}, links
    assert len({r.candidate for r in records}) == len(records) == budget
    assert sorted(r.index for r in records) == list(range(budget))
    return records


# ----------------------------------------------------------------------------------------------
# A calibration from submission to the catalogue


def test_submitted_calibration_runs_to_its_export_and_the_catalogue(server, finished):
    job_id = finished["id"]
    assert finished["progress"] == {"constant": {"done": 2, "budget": 2, "best_f": finished["best"]["f"],
                                                 "stopped": "budget"}}
    assert finished["options"]["schemes"] == ["vegas", "saturator"] and finished["eta_s"] is None
    best = finished["best"]
    assert best["link"] == "constant" and best["text"].startswith("mm-delay ")
    assert set(best["emulator"]) == {"rate_mbps", "delay_ms", "queue_packets", "uplink_loss"}
    assert [row["scheme"] for row in finished["schemes"]] == ["vegas", "saturator"]
    # the export, whole and file by file
    response = server.get(f"/v1/calibrations/{job_id}/export")
    assert response.status_code == 200 and response.headers["content-type"] == "application/zip"
    names = zipfile.ZipFile(io.BytesIO(response.content)).namelist()
    prefix = f"calibration-{job_id}/"
    for name in ("emulator.json", "mahimahi.txt", "pantheon_args.txt", "engine.txt", "figure3.png",
                 "convergence.png"):
        assert prefix + name in names
    assert any(n.startswith(prefix + "traces/") for n in names)
    mahimahi = server.get(f"/v1/calibrations/{job_id}/files/mahimahi.txt")
    assert mahimahi.status_code == 200 and mahimahi.text.startswith("mm-delay ")
    report = server.get(f"/v1/calibrations/{job_id}/files/emulator.json").json()
    assert report["winner"] == "constant" and report["emulator"]["f"] == best["f"]
    plot = server.get(f"/v1/calibrations/{job_id}/convergence.png")
    assert plot.status_code == 200 and plot.content.startswith(b"\x89PNG")
    # the catalogue: the winner, with its target's description, downloadable
    catalogue = server.get("/v1/emulators").json()["emulators"]
    entry = next(e for e in catalogue if e["id"] == job_id)
    assert entry["target"] == "nepal" and entry["description"] == "Nepal (Wi-Fi mesh node) -> AWS India"
    assert entry["link"] == "constant" and entry["f"] == best["f"]
    assert entry["parameters"]["delay_ms"] == report["emulator"]["delay_ms"]
    assert entry["provenance"]["job"] == job_id and entry["provenance"]["target_digest"]
    assert entry["provenance"]["options"]["budget"] == 2
    assert server.get("/v1/emulators?link=poisson").json()["emulators"] == []
    assert [e["id"] for e in server.get("/v1/emulators?target=nepal&sort=date&order=desc&limit=1")
            .json()["emulators"]] == [job_id]
    assert server.get(entry["urls"]["mahimahi"]).text == mahimahi.text
    bundle = zipfile.ZipFile(io.BytesIO(server.get(entry["urls"]["bundle"]).content))
    assert {n.split("/", 1)[1] for n in bundle.namelist()} >= {"mahimahi.txt", "emulator.json", "engine.txt"}
    assert any("/traces/" in n for n in bundle.namelist())
    # listed, filterable; the schema is served
    assert job_id in [j["id"] for j in server.get("/v1/calibrations?state=done").json()["calibrations"]]
    assert job_id not in [j["id"] for j in server.get("/v1/calibrations?state=running").json()["calibrations"]]
    paths = server.get("/openapi.json").json()["paths"]
    assert {"/v1/calibrations", "/v1/calibrations/{job_id}/events", "/v1/scores", "/v1/emulators"} <= set(paths)


def test_the_same_content_and_options_return_the_same_job(server, finished):
    """Content-addressed: another spelling of the target and of the options is the same job;
    only `force` makes a new one."""
    job_id = finished["id"]
    spellings = [
        {"target": "nepal", "options": SMALL},
        {"target": "bundled:nepal", "options": {**SMALL, "schemes": ["vegas", "saturator"], "runtime": 3.0,
                                                "seed": 0, "optimizer": "gpytorch", "fix": {}}},
    ]
    for body in spellings:
        response = server.post("/v1/calibrations", json=body)
        assert response.status_code == 200, response.text
        assert response.json()["id"] == job_id and response.json()["existing"] is True
    other = server.post("/v1/calibrations", json={"target": "nepal", "options": {**SMALL, "seed": 7}})
    assert other.status_code == 202 and other.json()["id"] != job_id
    forced = server.post("/v1/calibrations", json={"target": "nepal", "options": SMALL, "force": True})
    assert forced.status_code == 202 and forced.json()["id"] == f"{job_id}-2"
    for answer in (other.json(), forced.json()):  # not needed: cancel (queued, or just started)
        assert server.delete(f"/v1/calibrations/{answer['id']}").json()["state"] == "cancelled"
        assert server.processes(answer["id"]) == []


def test_a_job_log_needs_a_token_and_shows_no_server_path(server, finished):
    """GET .../log: 401 without a token; the command line it starts with, and everything
    after, names the server's root as <root> and its interpreter as python."""
    job_id = finished["id"]
    anonymous = httpx.get(f"{server.url}/v1/calibrations/{job_id}/log", timeout=60)
    assert anonymous.status_code == 401 and "needs an API token" in anonymous.json()["detail"]
    log = server.get(f"/v1/calibrations/{job_id}/log").text
    first = log.splitlines()[0]
    assert first.split(": ", 1)[1].startswith(f"python -m calibrate run <root>/jobs/{job_id}/input/target.json "), first
    assert str(server.root) not in log and sys.executable not in log


def test_events_list_every_journal_evaluation(server, finished):
    job_id = finished["id"]
    events = _events(server, job_id)
    evaluations = [(ident, data) for name, ident, data in events if name == "evaluation"]
    records = RunDir.open(server.root / "jobs" / job_id / "run").evaluations()
    assert [data["candidate"] for _, data in evaluations] == [r.candidate for r in records]
    assert [data["f"] for _, data in evaluations] == [r.f for r in records]
    assert [(ident, data["n"], data["link"]) for ident, data in evaluations] == [
        ("1", 1, "constant"), ("2", 2, "constant")]
    assert all(data["emulator"] == r.emulator and data["values"] == dict(r.params)
               for (_, data), r in zip(evaluations, records, strict=True))
    # the parameters as emulator.json keys them, the one spelling the page reads
    assert all(data["parameters"] == {"rate_mbps": r.params["rate"], "delay_ms": r.params["delay"],
                                      "queue_packets": r.params["queue"], "uplink_loss": r.params["loss"]}
               for (_, data), r in zip(evaluations, records, strict=True))
    assert [name for name, _, _ in events][-2:] == ["state", "end"] and events[-1][2]["state"] == "done"
    # a client that reconnects after the first event gets the rest only
    again = _events(server, job_id, **{"Last-Event-ID": "1"})
    assert [data["n"] for name, _, data in again if name == "evaluation"] == [2]


# ----------------------------------------------------------------------------------------------
# Cancel, uploads, scores


def _host_devices() -> tuple[str, str]:
    """The named network namespaces and the host's TUN devices."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    tuns = subprocess.run(["ip", "-o", "link", "show", "type", "tun"], capture_output=True, text=True).stdout
    return netns, tuns


def test_cancel_ends_every_process_and_keeps_the_journal(server, finished):
    before = _host_devices()
    job_id = server.submit(budget=6, seed=3)["id"]
    run_dir = server.root / "jobs" / job_id / "run"
    server.wait(job_id, 120, until=lambda job: job["evaluations"] >= 1)
    wait_for(lambda: server.processes(job_id), lambda procs: any("calibrate-link" in p for p in procs), 60,
             "the job's engines")
    # meanwhile an upload (the bundled table's bytes) waits in the queue: one job at a time here
    with open(NEPAL_CSV, "rb") as f:
        upload = server.post("/v1/calibrations", files={"archive": ("my table.csv", f, "text/csv")},
                             data={"request": json.dumps({"options": SMALL})})
    assert upload.status_code == 202, upload.text
    uploaded = upload.json()["id"]
    inputs = server.root / "jobs" / uploaded / "input"
    assert sorted(p.name for p in inputs.iterdir()) == ["target.json", "upload.csv"]  # the server's names
    assert (inputs / "upload.csv").read_bytes() == NEPAL_CSV.read_bytes()
    assert server.get(f"/v1/calibrations/{uploaded}").json()["target"] == "my table.csv"
    with open(NEPAL_CSV, "rb") as f:
        again = server.post("/v1/calibrations", files={"archive": ("other name.csv", f)},
                            data={"request": json.dumps({"options": SMALL})})
    assert again.status_code == 200 and again.json()["id"] == uploaded  # the same bytes
    queued = server.delete(f"/v1/calibrations/{uploaded}").json()
    assert queued["state"] == "cancelled" and queued["message"] == "cancelled before it started"
    # the running one
    started = time.monotonic()
    response = server.delete(f"/v1/calibrations/{job_id}")
    print(f"cancelled in {time.monotonic() - started:.1f} s")
    assert response.status_code == 200, response.text
    job = response.json()
    assert job["state"] == "cancelled" and job["progress"]["constant"]["done"] >= 1
    # nothing left: no process of the job (engines, endpoints, Ray: each namespace and TUN device
    # of an engine goes with it), no named namespace or host TUN device more than before
    assert server.processes(job_id) == []
    assert _host_devices() == before
    records = RunDir.open(run_dir).evaluations()  # readable, every record whole
    assert len(records) == job["evaluations"] and len({r.candidate for r in records}) == len(records)
    assert "interrupted (SIGTERM)" in server.get(f"/v1/calibrations/{job_id}/log").text
    # cancelled once: a second cancel is refused as for a done or failed job; no export of it
    again = server.delete(f"/v1/calibrations/{job_id}")
    assert again.status_code == 409 and again.json()["detail"].startswith(
        f"calibration {job_id} is cancelled: cancelled; finished evaluations are kept"), again.text
    assert again.json()["detail"].endswith("; there is nothing to cancel")
    refused = server.get(f"/v1/calibrations/{job_id}/export")
    assert refused.status_code == 409 and "cancelled" in refused.json()["detail"]


def test_a_score_runs_as_a_job(server, finished):
    body = {"target": "nepal", "emulator": "mm-delay 60 mm-link 10mbps.trace 10mbps.trace", "schemes": "vegas",
            "replicates": 1, "runtime": 3}
    response = server.post("/v1/scores", json=body)
    assert response.status_code == 202, response.text
    score_id = response.json()["id"]
    again = server.post("/v1/scores", json=body)
    assert again.status_code == 200 and again.json()["id"] == score_id and again.json()["existing"] is True
    score = server.wait(score_id, 180, kind="scores")
    assert score["state"] == "done", score
    result = score["result"]
    assert result["format"] == "calibrate-score" and result["f"] > 0
    assert [row["scheme"] for row in result["schemes"]] == ["vegas"]
    assert result["emulator"] == "mm-delay 60 mm-link 10mbps.trace 10mbps.trace"
    assert server.get(f"/v1/calibrations/{score_id}").status_code == 404  # a score, not a calibration


def test_a_study_of_a_calibrations_target_runs_to_its_table_and_export(server, finished, tmp_path):
    """A leave-one-out (`calibrate loo`) of the finished calibration's target, submitted with
    `calibrate submit --study loo --calibration ID --wait`, a job of its own, to its table and
    export (POST /v1/studies, GET /v1/studies/{id}, its files, `calibrate fetch`)."""
    small = [f"--{k}={v}" for k, v in SMALL.items()]
    env = {"CALIBRATE_SERVER": server.url, "CALIBRATE_TOKEN": server.token}
    submitted = _client("submit", "--study", "loo", "--calibration", finished["id"], *small, "--wait", env=env)
    assert submitted.returncode == 0, submitted.stderr
    study_id = submitted.stdout.strip()
    assert "held-out f mean" in submitted.stderr and f"calibrate fetch {study_id}" in submitted.stderr
    body = {"study": "loo", "calibration": finished["id"], "options": SMALL}
    again = server.post("/v1/studies", json=body)
    assert again.status_code == 200 and again.json()["id"] == study_id and again.json()["existing"] is True
    study = server.get(f"/v1/studies/{study_id}").json()
    assert study["state"] == "done", (study, server.get(f"/v1/studies/{study_id}/log").text)
    assert study["kind"] == "study" and study["study"] == "loo" and study["target"] == finished["target"]
    assert study["options"]["links"] == ["constant"] and study["options"]["budget"] == 2
    result = study["result"]
    assert {fold["fold"] for fold in result["folds"]} == {"vegas", "saturator"}
    assert result["held_out"]["n"] == 2 and result["held_out"]["mean"] > 0
    assert study["evaluations"] == result["evaluations"] > 0
    # the journal holds each evaluation once
    records = RunDir.open(Path(server.root) / "jobs" / study_id / "run", None).evaluations()
    assert sorted(r.index for r in records) == list(range(result["evaluations"]))
    # its files and its export
    assert {"loo.csv", "loo.json", "loo.png"} <= set(study["files"])
    table = server.get(f"/v1/studies/{study_id}/files/loo.csv")
    assert table.status_code == 200 and table.text.splitlines()[0].startswith("held_out")
    exported = server.get(f"/v1/studies/{study_id}/export")
    assert exported.status_code == 200 and exported.headers["content-type"] == "application/zip"
    names = zipfile.ZipFile(io.BytesIO(exported.content)).namelist()
    assert f"study-{study_id}/loo.json" in names and any("/folds/vegas/mahimahi.txt" in n for n in names), names
    assert server.get(f"/v1/calibrations/{study_id}").status_code == 404  # a study, not a calibration
    assert study_id in [s["id"] for s in server.get("/v1/studies?state=done").json()["studies"]]
    listed = _client("jobs", "--studies", env=env)
    assert listed.returncode == 0 and study_id in listed.stdout and "loo" in listed.stdout, listed.stderr
    out = tmp_path / "study"
    fetched = _client("fetch", study_id, "--out", str(out), env=env)
    assert fetched.returncode == 0, fetched.stderr
    assert (out / "loo.csv").is_file() and "the table" in fetched.stderr


# ----------------------------------------------------------------------------------------------
# Bad input: each request, its status and its sentence


def _chunks(size: int, chunk: int = 16384) -> Iterator[bytes]:
    """A body of `size` bytes sent chunked (httpx gives a generator no Content-Length): the
    server must count what arrives."""
    for start in range(0, size, chunk):
        yield b" " * min(chunk, size - start)


async def _achunks(size: int, chunk: int = 16384) -> AsyncIterator[bytes]:
    """_chunks for an async client."""
    for part in _chunks(size, chunk):
        yield part


def _tar_gz(members: list[tuple[str, bytes]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


_ROW = "scheme,runs,tput_mbps_mean,delay_p95_ms_mean,loss_pct_mean\ncubic,10,5.1,52.0,0.2\n"
_JSON_LOSS_5 = json.dumps({"schemes": {"cubic": {"runs": 10, "tput_mbps": {"mean": 5.1},
                                                 "delay_p95_ms": {"mean": 52.0}, "loss": 5}}})
#: uploads a reader refuses: (name, bytes)
HOSTILE_UPLOADS = {
    "table declaring 1e30 flows": ("t.csv", f"# flows: 1e30\n{_ROW}".encode()),
    "table declaring nan flows": ("t.csv", f"# flows: nan\n{_ROW}".encode()),
    "table with a std_ddof that is no number": ("t.csv", f"# std_ddof: sample\n{_ROW}".encode()),
    "table with a negative runtime": ("t.csv", f"# runtime_s: -30\n{_ROW}".encode()),
    "JSON table with loss: 5": ("t.json", _JSON_LOSS_5.encode()),
    "target JSON of a bad version": ("t.json", b'{"format": "calibrate-target", "version": "x", "schemes": []}'),
    "archive 1000 directories deep": ("deep.tar.gz", _tar_gz([("a/" * 1000 + "pantheon_perf.json", b"{}")])),
    "archive with a newline in a member name": ("nl.tar.gz", _tar_gz([("exp\nx/pantheon_perf.json", b"{}")])),
    "archive expanding past the limit": ("bomb.tar.gz", _tar_gz([("exp/cubic_datalink_run1.log",
                                                                   b"\0" * (2 * EXTRACT_LIMIT))])),
    "archive refused after its extraction": ("junk.tar.gz", _tar_gz([("exp/cubic_datalink_run1.log",
                                                                       b"not a datalink line\n" * 100_000)])),
}


def _bad_requests(url: str, token: str, job_id: str, other: str = "", cancelled: str = ""
                  ) -> list[tuple[str, str, dict, int, str]]:
    """(what, method path, request, status, words of the message); `other` is another token of the
    server, `cancelled` the id of a cancelled job."""
    auth = {"Authorization": f"Bearer {token}"}
    as_other = {"headers": {"Authorization": f"Bearer {other}"}}
    post = "POST /v1/calibrations"
    big = io.BytesIO(b"x" * (UPLOAD_LIMIT + 1))

    def refused_upload(what: str, words: str) -> tuple[str, str, dict, int, str]:
        """The row of HOSTILE_UPLOADS[what], which the readers refuse (422) with `words`."""
        return what, post, {"files": {"archive": HOSTILE_UPLOADS[what]}, "headers": auth}, 422, words

    return [
        ("malformed JSON", post, {"content": b'{"target": "nepal",', "headers": auth}, 400, "not valid JSON"),
        ("not an object", post, {"json": [1, 2], "headers": auth}, 422, "must be a JSON object"),
        ("unknown option", post, {"json": {"target": "nepal", "options": {"colour": "red"}}, "headers": auth},
         422, "unknown option 'colour' (in options); the options are schemes, links, budget"),
        ("unknown field (a path)", post, {"json": {"target": "nepal", "out": "/etc"}, "headers": auth},
         422, "unknown field 'out'; the fields are target, options, force"),
        ("budget 0", post, {"json": {"target": "nepal", "options": {"budget": 0}}, "headers": auth},
         422, "options.budget: Input should be greater than or equal to 1 (got 0)"),
        ("runtime past Pantheon's 60 s", post, {"json": {"target": "nepal", "options": {"runtime": 61}},
                                                "headers": auth}, 422, "options.runtime"),
        ("unknown link kind", post, {"json": {"target": "nepal", "options": {"links": "wifi"}}, "headers": auth},
         422, "unknown link kind 'wifi'"),
        ("fixed value out of bounds", post, {"json": {"target": "nepal", "options": {"fix": {"loss": 5}}},
                                             "headers": auth}, 422, "fixed loss = 5.0 is outside"),
        ("scheme not in the target", post, {"json": {"target": "nepal", "options": {"schemes": "bbr2"}},
                                            "headers": auth}, 422, "scheme 'bbr2' is not in target 'nepal'"),
        ("bad target name", post, {"json": {"target": "nowhere"}, "headers": auth},
         422, "neither a bundled target (nepal) nor a Pantheon result ID"),
        ("a server path as target", post, {"json": {"target": "/etc/passwd"}, "headers": auth},
         422, "neither a bundled target"),
        ("no target", post, {"json": {"options": SMALL}, "headers": auth}, 422, "no target"),
        ("oversized upload", post, {"files": {"archive": ("big.csv", big)}, "headers": auth},
         413, f"larger than this server's limit of {UPLOAD_LIMIT} bytes"),
        ("oversized body", post, {"content": b"[" + b"0," * UPLOAD_LIMIT + b"0]", "headers": auth},
         413, "the request body is larger than this server's limit"),
        ("oversized chunked body (no length)", post,
         {"content": _chunks(2 * UPLOAD_LIMIT), "headers": {**auth, "Content-Type": "application/json"}},
         413, "the request body is larger than this server's limit"),
        ("upload of another kind", post, {"files": {"archive": ("evil.sh", b"rm -rf /")}, "headers": auth},
         422, "expected a Pantheon result archive"),
        ("upload that is no result", post, {"files": {"archive": ("empty.tar.gz", b"not gzip")}, "headers": auth},
         422, "the upload 'empty.tar.gz': not a readable tar archive"),
        ("missing token", post, {"json": {"target": "nepal"}}, 401, "needs an API token"),
        ("not a bearer token", post, {"json": {"target": "nepal"}, "headers": {"Authorization": "Basic eDp5"}},
         401, "must be 'Bearer TOKEN'"),
        ("wrong token", post, {"json": {"target": "nepal"}, "headers": {"Authorization": "Bearer cal_nope"}},
         403, "not valid on this server"),
        ("wrong token, cancel", f"DELETE /v1/calibrations/{job_id}",
         {"headers": {"Authorization": "Bearer cal_nope"}}, 403, "not valid"),
        ("unknown id", "GET /v1/calibrations/0123456789abcdef", {"headers": auth}, 404,
         "no calibration '0123456789abcdef'"),
        ("unknown id, cancel", "DELETE /v1/calibrations/0123456789abcdef", {"headers": auth}, 404,
         "no calibration"),
        ("unknown id, export", "GET /v1/calibrations/0123456789abcdef/export", {"headers": auth}, 404,
         "no calibration"),
        ("path traversal in files/", f"GET /v1/calibrations/{job_id}/files/..%2F..%2F..%2Fetc%2Fpasswd",
         {"headers": auth}, 400, "must be a path inside the export"),
        ("no such export file", f"GET /v1/calibrations/{job_id}/files/secret.txt", {"headers": auth}, 404,
         "no file 'secret.txt' in the export"),
        ("cancel a finished job", f"DELETE /v1/calibrations/{job_id}", {"headers": auth}, 409,
         "is done; there is nothing to cancel"),
        ("unknown state filter", "GET /v1/calibrations?state=paused", {"headers": auth}, 422, "query.state"),
        ("unknown catalogue sort", "GET /v1/emulators?sort=speed", {"headers": auth}, 422, "query.sort"),
        ("score reading a trace file", "POST /v1/scores",
         {"json": {"target": "nepal", "emulator": "mm-link /etc/passwd /etc/passwd"}, "headers": auth},
         422, "the server reads no trace files"),
        ("study of an unknown kind", "POST /v1/studies",
         {"json": {"study": "bisect", "target": "nepal"}, "headers": auth},
         422, "study: Input should be 'loo' or 'ablate'"),
        ("study of both a target and a calibration", "POST /v1/studies",
         {"json": {"study": "loo", "target": "nepal", "calibration": job_id}, "headers": auth},
         422, "give either \"target\""),
        ("study of an unknown calibration", "POST /v1/studies",
         {"json": {"study": "loo", "calibration": "0123456789abcdef"}, "headers": auth},
         422, "no calibration '0123456789abcdef' on this server that this API token submitted"),
        ("ablation fixing a parameter", "POST /v1/studies",
         {"json": {"study": "ablate", "target": "nepal", "options": {"fix": {"loss": 0}}}, "headers": auth},
         422, "an ablation fixes nothing"),
        ("ablation in an order without the rate first", "POST /v1/studies",
         {"json": {"study": "ablate", "target": "nepal", "order": "delay,rate"}, "headers": auth},
         422, "order 'delay,rate': give greedy, or distinct parameters"),
        ("leave-one-out with an order", "POST /v1/studies",
         {"json": {"study": "loo", "target": "nepal", "order": "greedy"}, "headers": auth},
         422, "only an ablation adds parameters in an order"),
        ("unknown study id", "GET /v1/studies/0123456789abcdef", {"headers": auth}, 404, "no study '0123456789abcdef'"),
        ("score of a malformed emulator", "POST /v1/scores",
         {"json": {"target": "nepal", "emulator": "mm-delay x mm-link 12mbps.trace 12mbps.trace"},
          "headers": auth}, 422, "mm-delay takes an integer"),
        ("budget as a string", post, {"json": {"target": "nepal", "options": {"budget": "10"}}, "headers": auth},
         422, 'options.budget: Input should be a valid integer (got "10")'),
        ("budget true", post, {"json": {"target": "nepal", "options": {"budget": True}}, "headers": auth},
         422, "options.budget: Input should be a valid integer (got true)"),
        ("a Last-Event-ID of 5000 digits", "GET /v1/calibrations/0123456789abcdef/events",
         {"headers": {**auth, "Last-Event-ID": "9" * 5000}}, 400, "the Last-Event-ID header (5000 characters)"),
        refused_upload("table declaring 1e30 flows",
            "the upload 't.csv': flows '1e30' is not a whole number from 1 to 64 (flows per run, Pantheon's -f)"),
        refused_upload("table declaring nan flows", "flows 'nan' is not"),
        refused_upload("table with a std_ddof that is no number",
            "std_ddof 'sample' is not a whole number from 0 to 1"),
        refused_upload("table with a negative runtime", "runtime_s '-30' is not a number above 0"),
        refused_upload("JSON table with loss: 5", '"loss" holds fractions (0.004), "loss_pct" percent (0.4)'),
        refused_upload("target JSON of a bad version", "version 'x' is not 1"),
        refused_upload("archive 1000 directories deep", "is more than 16 directories deep"),
        refused_upload("archive with a newline in a member name",
            "member 'exp\\nx/pantheon_perf.json' has a control character in its name"),
        refused_upload("archive expanding past the limit", f"past the size limit of {EXTRACT_LIMIT} bytes"),
        refused_upload("archive refused after its extraction",
            "junk.tar.gz/exp: no valid run of any scheme: cubic run 1: junk.tar.gz/exp/cubic_datalink_run1.log:1: "
            "malformed datalink log line"),
        ("job log without a token", f"GET /v1/calibrations/{job_id}/log", {}, 401, "needs an API token"),
        ("job list without a token", "GET /v1/calibrations", {}, 401, "needs an API token"),
        # owners: another token's job is absent to it (404: a 403 would tell that someone submitted
        # that content, whose digest the id is), its upload cannot seed a study
        ("another token's job, read", f"GET /v1/calibrations/{job_id}", as_other, 404,
         f"no calibration '{job_id}' on this server"),
        ("another token's job, cancel", f"DELETE /v1/calibrations/{job_id}", as_other, 404,
         f"no calibration '{job_id}' on this server"),
        ("another token's job, log", f"GET /v1/calibrations/{job_id}/log", as_other, 404, "no calibration"),
        ("another token's job, export", f"GET /v1/calibrations/{job_id}/export", as_other, 404, "no calibration"),
        ("another token's job, events", f"GET /v1/calibrations/{job_id}/events", as_other, 404, "no calibration"),
        ("another token's job, catalogue", f"GET /v1/emulators/{job_id}/mahimahi.txt", as_other, 404,
         f"no emulator '{job_id}' in the catalogue"),
        ("another token's calibration as a study's target", "POST /v1/studies",
         {"json": {"study": "loo", "calibration": job_id}, **as_other}, 422,
         f"no calibration '{job_id}' on this server that this API token submitted"),
        ("cancel a cancelled job", f"DELETE /v1/calibrations/{cancelled}", {"headers": auth}, 409,
         f"calibration {cancelled} is cancelled: cancelled"),
    ]


BAD = [row[0] for row in _bad_requests("", "", "")]
#: the rows about the shared calibration, another token, a cancelled job (the rest need only the server)
ABOUT_A_JOB = {row[0] for row in _bad_requests("", "", "JOB-ID") if "JOB-ID" in repr(row)}
ABOUT_ANOTHER = {row[0] for row in _bad_requests("", "", "", "OTHER-TOKEN") if "OTHER-TOKEN" in repr(row)}
ABOUT_A_CANCELLED = {row[0] for row in _bad_requests("", "", "", "", "CANCELLED") if "CANCELLED" in repr(row)}


@pytest.fixture(scope="module")
def other_token(server) -> str:
    """A second token of the shared server: another user."""
    return make_token(server.root, "other")


@pytest.fixture(scope="module")
def cancelled(server) -> str:
    """A calibration of a seed no other test submits, cancelled at once (queued, or just started)."""
    job_id = server.submit(seed=4242, budget=1)["id"]
    response = server.delete(f"/v1/calibrations/{job_id}")
    assert response.status_code == 200 and response.json()["state"] == "cancelled", response.text
    return job_id


@pytest.mark.parametrize("what", BAD)
def test_bad_requests_are_refused_with_a_sentence(server, request, what):
    job_id = request.getfixturevalue("finished")["id"] if what in ABOUT_A_JOB else ""
    other = request.getfixturevalue("other_token") if what in ABOUT_ANOTHER else ""
    cancelled = request.getfixturevalue("cancelled") if what in ABOUT_A_CANCELLED else ""
    (_, method_path, kwargs, status, words), = [row for row in _bad_requests(server.url, server.token, job_id,
                                                                             other, cancelled) if row[0] == what]
    method, path = method_path.split(" ", 1)
    response = httpx.request(method, server.url + path, timeout=60, **kwargs)
    detail = response.json()["detail"]
    print(f"{what}: {method} {path} -> {response.status_code}: {detail}")
    assert response.status_code == status, detail
    assert isinstance(detail, str) and words in detail and "\n" not in detail
    assert str(server.root) not in detail and "/uploads/" not in detail  # no server path
    if status == 401:
        assert response.headers["www-authenticate"] == "Bearer"


def test_a_client_that_sends_a_whole_oversized_body_reads_the_413(server):
    """httpx reads the answer only once it has sent the body: a server that answered and closed
    before reading it made the client's kernel see a reset, and the 413's sentence was lost (the
    hostile mix of experiments/service_load.py: 8 of 43 such requests with a length, 24 of 43
    chunked ones). The server reads the rest of such a body first, so every one is answered."""
    body = b" " * (10 * UPLOAD_LIMIT)

    async def clients() -> list[int | str]:
        async def one(client: httpx.AsyncClient, chunked: bool) -> int | str:
            try:
                response = await client.post("/v1/calibrations", content=_achunks(len(body)) if chunked else body)
            except httpx.TransportError as error:
                return repr(error)
            assert "larger than this server's limit" in response.json()["detail"]
            return response.status_code
        headers = {**server.headers(), "Content-Type": "application/json"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60) as a, \
                httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60) as b:
            return list(await asyncio.gather(*(one(c, k % 2 == 1) for k in range(20) for c in (a, b))))
    answers = asyncio.run(clients())
    assert answers == [413] * len(answers), answers


def test_hostile_uploads_leave_nothing_and_one_log_line_each(server):
    """Every upload a reader refuses: 422, nothing of it under the server's root (the upload, an
    extraction in the cache, a job), and one line in the server's log, no traceback."""
    jobs_before = set(os.listdir(server.root / "jobs"))
    log_before = server.log.read_text()
    for what, upload in HOSTILE_UPLOADS.items():
        response = server.post("/v1/calibrations", files={"archive": upload})
        assert response.status_code == 422, (what, response.text)
    assert os.listdir(server.root / "uploads") == []
    assert [p for p in (server.root / "cache").rglob("*") if not p.is_dir()] == []
    assert set(os.listdir(server.root / "jobs")) == jobs_before
    log = server.log.read_text()[len(log_before):]
    assert "Traceback" not in log, log[-4000:]
    refused = [line for line in log.splitlines() if line.startswith("calibrate: refused POST /v1/calibrations: 422 ")]
    assert len(refused) == len(HOSTILE_UPLOADS), log


def test_jobs_are_their_tokens_and_public_reads_share_results_never_control(tmp_path):
    """Two users, a server with --public-reads: the same request makes each one a job of their own
    (never the other's, whose id it does not learn); each reads the other's job but cannot cancel it
    or read its log (403, saying why); each cancels their own."""
    with running_server(tmp_path / "root", "--public-reads") as alice:
        bob = {"Authorization": f"Bearer {make_token(alice.root, 'bob')}"}
        request = {"target": "nepal", "options": {**SMALL, "seed": 77}}
        hers = alice.submit(seed=77)
        his = httpx.post(f"{alice.url}/v1/calibrations", json=request, headers=bob, timeout=120)
        assert his.status_code == 202 and his.json()["existing"] is False and his.json()["id"] != hers["id"]
        again = httpx.post(f"{alice.url}/v1/calibrations", json=request, headers=bob, timeout=120)
        assert again.json()["id"] == his.json()["id"] and again.json()["existing"] is True  # his own, deduplicated
        job_url = f"{alice.url}/v1/calibrations/{hers['id']}"
        assert httpx.get(job_url, headers=bob).json()["id"] == hers["id"]  # --public-reads
        listed = httpx.get(f"{alice.url}/v1/calibrations", headers=bob).json()["calibrations"]
        assert {job["id"] for job in listed} == {hers["id"], his.json()["id"]}
        for method, path, doing in (("DELETE", "", "cancel it"), ("GET", "/log", "read its log")):
            refused = httpx.request(method, job_url + path, headers=bob, timeout=60)
            assert refused.status_code == 403 and refused.json()["detail"] == (
                f"calibration {hers['id']} belongs to another API token; only the token that submitted it can "
                f"{doing} (submit your own, with your token)"), refused.text
        assert httpx.delete(f"{alice.url}/v1/calibrations/{his.json()['id']}", headers=bob,
                            timeout=180).json()["state"] == "cancelled"
        assert alice.delete(f"/v1/calibrations/{hers['id']}").json()["state"] == "cancelled"
        store = Store(f"sqlite:///{alice.root / 'service.sqlite'}")
        owners = {store.job(hers["id"]).owner, store.job(his.json()["id"]).owner}
        store.close()
        assert len(owners) == 2 and None not in owners  # the tokens' stored hashes, never the tokens
        assert alice.token not in owners and bob["Authorization"].split()[1] not in owners


def test_a_store_from_before_owners_is_migrated_its_jobs_read_only(tmp_path):
    """A store whose jobs table has no owner column (a server from before owners): opened, the
    column is added; its jobs are nobody's, readable by every token, cancelled by none."""
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    old = Store(url)
    with old.engine.begin() as db:
        db.exec_driver_sql("DROP INDEX ix_jobs_owner")
        db.exec_driver_sql("ALTER TABLE jobs DROP COLUMN owner")
        db.exec_driver_sql("INSERT INTO jobs (id, kind, digest, state, target, target_digest, options, run_dir, "
                           "created, starts) VALUES ('old', 'calibration', 'd', 'done', 'nepal', 't', '{}', '/x', "
                           "'2024-01-01T00:00:00+00:00', 1)")
    old.close()
    store = Store(url)
    job = store.job("old")
    store.close()
    assert job is not None and job.owner is None
    assert job.readable_by("anyone", public_reads=False) and not job.owned_by("anyone")


def test_tls_serves_https_with_the_given_certificate(tmp_path):
    """--tls-cert/--tls-key: uvicorn's own TLS; a client that trusts the (self-signed) certificate
    reads over HTTPS, plain HTTP gets no answer; one flag without the other is refused."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now_ = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now_ - dt.timedelta(minutes=5))
            .not_valid_after(now_ + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    root = tmp_path / "root"
    root.mkdir()
    server = Server(root, make_token(root), free_port(), ("--tls-cert", str(cert_file), "--tls-key", str(key_file)),
                    cert=cert_file).start()
    try:
        assert server.url.startswith("https://")
        assert server.get("/v1/status").json()["jobs"]["queued"] == 0
        assert server.get("/v1/calibrations").json() == {"calibrations": []}  # the token, over TLS
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{server.port}/v1/status", timeout=5).raise_for_status()
        with pytest.raises(httpx.ConnectError):  # a client that does not trust it
            httpx.get(f"{server.url}/v1/status", timeout=5)
    finally:
        server.stop()
    half = _client("serve", "--root", str(root), "--port", str(free_port()), "--tls-cert", str(cert_file))
    assert half.returncode == 2 and half.stderr.strip() == (
        "calibrate: error: --tls-cert and --tls-key go together: give the certificate and its private key")


def test_the_api_docs_load_nothing_from_elsewhere(server):
    """/docs: Swagger UI from the installed package, under a Content-Security-Policy that allows
    this origin alone (the page's origin keeps the web page's token)."""
    page = httpx.get(f"{server.url}/docs", timeout=60)
    assert page.status_code == 200 and "swagger-ui" in page.text
    assert "https://" not in page.text and "http://" not in page.text, page.text
    policy = page.headers["content-security-policy"]
    assert policy.startswith("default-src 'self'; script-src 'self' 'sha256-") and "frame-ancestors 'none'" in policy
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"):
        assert httpx.get(f"{server.url}/docs-assets/{asset}", timeout=60).status_code == 200, asset


def test_the_service_state_is_private_to_its_user(server):
    assert stat.S_IMODE((server.root / "service.sqlite").stat().st_mode) == 0o600
    for name in ("jobs", "uploads", "cache"):
        assert stat.S_IMODE((server.root / name).stat().st_mode) == 0o700, name


def test_loose_state_is_made_private_at_start_and_said(tmp_path):
    """A root made with looser modes (an older server, a umask of 022): tightened, with a note."""
    settings = ServiceSettings(root=tmp_path / "root")
    for directory in (settings.jobs_dir, settings.uploads_dir, settings.cache_dir):
        directory.mkdir(parents=True, mode=0o755)
        directory.chmod(0o755)
    store_file = settings.root / "service.sqlite"
    Store(settings.store).close()
    store_file.chmod(0o644)
    with pytest.warns(Notice) as notes:
        settings.make_dirs()
        Store(settings.store).close()
    assert [str(n.message).split(" ", 3)[:3] for n in notes] == [["made", "the", "service's"], ["made", "the", "job"]]
    assert "private to this user" in str(notes[0].message) and str(settings.jobs_dir) in str(notes[0].message)
    assert stat.S_IMODE(store_file.stat().st_mode) == 0o600
    assert all(stat.S_IMODE(d.stat().st_mode) == 0o700
               for d in (settings.jobs_dir, settings.uploads_dir, settings.cache_dir))
    fresh = ServiceSettings(root=tmp_path / "fresh")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to tighten, nothing said
        fresh.make_dirs()
        Store(fresh.store).close()
    assert stat.S_IMODE((fresh.root / "service.sqlite").stat().st_mode) == 0o600


# ----------------------------------------------------------------------------------------------
# The clients


def _unprivileged() -> list[str]:
    """A prefix that runs a command without privileges: as the user nobody where nobody can run
    this interpreter, else as root without any capability (no namespace, no TUN device, no
    file it does not own)."""
    if subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-c", "pass"],
                      capture_output=True).returncode == 0:
        return ["runuser", "-u", "nobody", "--"]
    return ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]


def _client(*args: str, env: dict | None = None, unprivileged: bool = False) -> subprocess.CompletedProcess:
    command = [*CALIBRATE, *args]
    if unprivileged:  # clients need no root
        command = [*_unprivileged(), *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir(),
                          env={**os.environ, "CALIBRATE_TOKEN": "", **(env or {})})


def test_clients_submit_wait_list_and_fetch(server, finished, tmp_path):
    job_id = finished["id"]
    options = [f"--{k}={v}" for k, v in SMALL.items()]
    done = _client("submit", "nepal", *options, "--wait", "--server", server.url, "--token", server.token)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == job_id
    assert "the same calibration exists already" in done.stderr and "constant #2" in done.stderr
    # no root needed to list and fetch
    os.chmod(tmp_path, 0o777)
    listed = _client("jobs", "--json", env={"CALIBRATE_SERVER": server.url, "CALIBRATE_TOKEN": server.token},
                     unprivileged=True)
    assert listed.returncode == 0, listed.stderr
    assert job_id in [j["id"] for j in json.loads(listed.stdout)]
    table = _client("jobs", "--server", server.url, "--state", "done", "--token", server.token)
    assert job_id in table.stdout and "constant 2/2" in table.stdout
    out = tmp_path / "export"
    fetched = _client("fetch", job_id, "--server", server.url, "--token", server.token, "--out", str(out),
                      unprivileged=True)
    assert fetched.returncode == 0, fetched.stderr
    assert (out / "emulator.json").is_file() and (out / "mahimahi.txt").read_text().startswith("mm-delay ")
    assert json.loads((out / "emulator.json").read_text())["winner"] == "constant"
    # tokens: made, listed (never shown again), revoked
    root = ["--root", str(server.root)]
    # a name of its own per try (a rerun finds the first try's token) beside the module's others
    name = f"bob-{uuid.uuid4().hex[:6]}"
    names_before = [t["name"] for t in json.loads(_client("serve", "token", "list", "--json", *root).stdout)]
    bob = _client("serve", "token", "create", "--name", name, *root).stdout.strip()
    bad_budget = {"target": "nepal", "options": {"budget": 0}}
    as_bob = {"Authorization": f"Bearer {bob}"}
    assert httpx.post(f"{server.url}/v1/calibrations", json=bad_budget, headers=as_bob).status_code == 422
    tokens = _client("serve", "token", "list", "--json", *root)
    assert [t["name"] for t in json.loads(tokens.stdout)] == [*names_before, name] and bob not in tokens.stdout
    assert all(bob.encode() not in f.read_bytes() for f in server.root.glob("service.sqlite*"))
    assert _client("serve", "token", "revoke", name, *root).returncode == 0
    assert httpx.post(f"{server.url}/v1/calibrations", json=bad_budget, headers=as_bob).status_code == 403
    # one line for each refusal
    for args, code, words in [
        (("serve", "token", "revoke", name, *root), 2, f"no token named '{name}'"),
        (("serve", "--root", str(server.root), "--port", str(free_port())), 3,
         f"another calibrate serve (pid {server.process.pid}, root {server.root}, http://127.0.0.1:{server.port}) "
         f"runs the jobs of {server.root}"),
        (("jobs", "--server", "http://127.0.0.1:9", "--token", "cal_x"), 3,
         "cannot reach the calibration server at http://127.0.0.1:9"),
        (("jobs", "--server", server.url), 2, "need the server's API token: give --token"),
        (("submit", "nepal", "--server", server.url), 2, "need the server's API token: give --token"),
        (("submit", "nepal", "--server", server.url, "--token", "cal_nope"), 2,
         "the server refused (HTTP 403): the API token is not valid"),
        (("submit", "nepal", "--budget", "0", "--server", server.url, "--token", server.token), 2,
         "the server refused (HTTP 422): options.budget"),
        (("fetch", "0123456789abcdef", "--server", server.url, "--token", server.token, "--out", str(tmp_path / "x")),
         2,
         "no calibration or study '0123456789abcdef' on "),
        (("submit", "--study", "loo", "--server", server.url, "--token", server.token), 2,
         "a study needs TARGET or --calibration ID"),
        (("submit", "nepal", "--order", "greedy", "--server", server.url, "--token", server.token), 2,
         "--calibration and --order belong to a study"),
        (("fetch", job_id, "--server", server.url, "--token", server.token, "--out", str(out)), 2, "exists already"),
    ]:
        refused = _client(*args)
        assert refused.returncode == code, (args, refused.stderr)
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("calibrate: error: ") and words in lines[0], lines


def test_a_second_server_on_the_same_store_is_refused_naming_the_first(tmp_path):
    """Another --root, the same store: refused before it schedules anything (it would take the
    first one's queued jobs and fail them), naming the first, leaving no root of its own behind;
    started once the first stops."""
    store = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    second = ("serve", "--root", str(tmp_path / "second"), "--store", store, "--port", str(free_port()))
    with running_server(tmp_path / "first", store=store) as first:
        refused = _client(*second)
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 3 and len(lines) == 1, refused.stderr
        assert lines[0] == (f"calibrate: error: another calibrate serve (pid {first.process.pid}, root {first.root}, "
                            f"http://127.0.0.1:{first.port}) runs the jobs of the store {store}; stop it, or give "
                            f"this one another --store"), lines
        assert first.get("/v1/status").status_code == 200  # the first one goes on
        assert not (tmp_path / "second").exists()  # the refused one left no root behind
    assert stat.S_IMODE((tmp_path / "shared.sqlite-server.lock").stat().st_mode) == 0o600
    taken_over = Server(tmp_path / "second", first.token, free_port(), ("--store", store)).start()
    try:
        assert taken_over.get("/v1/status").status_code == 200
    finally:
        taken_over.stop()


# ----------------------------------------------------------------------------------------------
# A server killed with SIGKILL while a job runs


def test_a_server_killed_with_sigkill_continues_its_job_when_restarted(tmp_path):
    server = start_server(tmp_path / "root")
    try:
        job_id = server.submit(budget=4, seed=11)["id"]
        run_dir = server.root / "jobs" / job_id / "run"
        server.wait(job_id, 120, until=lambda job: job["evaluations"] >= 1)
        server.kill9()
        # the job's process gets SIGTERM from the kernel (PR_SET_PDEATHSIG) and ends cleanly
        wait_for(lambda: server.processes(job_id), lambda left: left == [], 60, "the orphaned job's processes")
        log = (server.root / "jobs" / job_id / "log.txt").read_text()
        assert "interrupted (SIGTERM)" in log, log
        before = len(RunDir.open(run_dir).evaluations())
        print(f"killed with {before} of 4 evaluations journaled")
        store = Store(f"sqlite:///{server.root / 'service.sqlite'}")
        assert store.job(job_id).state == RUNNING  # as the dead server left it
        store.close()
        server.restart()
        job = server.wait(job_id, 240)
        assert job["state"] == "done", (job, server.get(f"/v1/calibrations/{job_id}/log").text)
        records = _check_journal(run_dir, 4)
        print("journal after the restart (index, link, candidate, phase):",
              [(r.index, r.link, r.candidate, r.phase) for r in records])
        log = (server.root / "jobs" / job_id / "log.txt").read_text()
        print("".join(line[:140] + "\n" for line in log.splitlines()
                      if line.startswith(("==", "calibrate: interrupted", "calibrate: Ray up"))))
        assert log.count("== ") == 2 and f"resume: {sys.executable} -m calibrate resume {run_dir}" in log
        events = _events(server, job_id)
        assert [d["candidate"] for name, _, d in events if name == "evaluation"] == [r.candidate for r in records]
        assert [d["n"] for name, _, d in events if name == "evaluation"] == [1, 2, 3, 4]
    finally:
        server.stop()


# ----------------------------------------------------------------------------------------------
# The store on PostgreSQL


@pytest.fixture
def postgresql() -> Iterator[str]:
    """A throw-away PostgreSQL cluster of Debian's binaries, as the user postgres, on a unix socket
    in a temporary directory (never the system's cluster): its SQLAlchemy URL."""
    initdb = shutil.which("initdb") or next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))), None)
    if initdb is None:
        pytest.skip("PostgreSQL is not installed (initdb absent): ./scripts/install test installs it")
    bin_dir = Path(initdb).resolve().parent
    base = Path(tempfile.mkdtemp(prefix="calibrate-pg-"))
    shutil.chown(base, "postgres")
    data, sock = base / "data", base / "sock"

    def as_postgres(*args: str) -> None:
        done = subprocess.run(["runuser", "-u", "postgres", "--", *args], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr

    try:
        as_postgres("mkdir", str(sock))
        as_postgres(str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
        as_postgres(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-w", "-o",
                    f"-k {sock} -c listen_addresses='' -p 5432 -c fsync=off", "start")
        yield f"postgresql+psycopg://postgres@/postgres?host={sock}"
    finally:
        if (data / "postmaster.pid").exists():
            as_postgres(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(base, ignore_errors=True)


def test_the_store_on_postgresql(postgresql, tmp_path):
    store = Store(postgresql)
    try:
        job = Job(id="abc", kind=CALIBRATION, digest="d" * 64, state=QUEUED, target="nepal", target_digest="t",
                  options={"budget": 2, "links": ["constant"], "fix": {"loss": 0.0}}, run_dir="/x", created=now())
        assert store.add_job(job) and not store.add_job(job)  # one row per id
        assert store.job("abc") == job and store.live_job("d" * 64) == job
        assert store.transition("abc", [QUEUED], RUNNING, started=now(), pid=123)
        assert not store.transition("abc", [QUEUED], RUNNING)  # compare-and-set: it is running now
        assert store.jobs(states=[RUNNING])[0].pid == 123
        assert store.transition("abc", [RUNNING], DONE, finished=now())
        token = store.create_token("ci")
        assert store.check_token(token).name == "ci" and store.check_token(token + "x") is None
        assert token not in json.dumps([list(map(str, row)) for row in store.engine.connect().exec_driver_sql(
            "SELECT * FROM tokens").all()])  # stored hashed
        assert store.revoke_token("ci") and store.check_token(token) is None
    finally:
        store.close()
    # a server on it: tokens by the command line, jobs by the API
    with running_server(tmp_path / "root", store=postgresql) as server:
        assert server.get("/v1/status").json()["jobs"]["queued"] == 0
        refused = server.post("/v1/calibrations", json={"target": "nepal", "options": {"budget": 0}})
        assert refused.status_code == 422
        answer = server.submit(seed=21)
        assert server.delete(f"/v1/calibrations/{answer['id']}").json()["state"] == "cancelled"
        again = Store(postgresql)
        assert again.job(answer["id"]).state == "cancelled"
        again.close()
        second = _client("serve", "--root", str(tmp_path / "second"), "--store", postgresql, "--port",
                         str(free_port()))
        assert second.returncode == 3 and f"another calibrate serve (pid {server.process.pid}, root " \
            f"{server.root}" in second.stderr and "runs the jobs of the store postgresql" in second.stderr, \
            second.stderr
    assert not (tmp_path / "root" / "service.sqlite").exists()


# ----------------------------------------------------------------------------------------------
# Without a server


def test_request_defaults_are_calibrate_runs():
    defaults, options, score = RunConfig(target=""), RunOptions(), ScoreRequest(target="nepal", emulator="x")
    assert (options.budget, options.replicates, options.runtime, options.optimizer, options.seed) == (
        defaults.budget, defaults.replicates, defaults.runtime_s, defaults.optimizer, defaults.seed)
    assert (score.replicates, score.runtime, score.seed) == (defaults.replicates, defaults.runtime_s, defaults.seed)


def test_a_job_whose_command_fails_is_failed_with_its_error_line(tmp_path):
    """The scheduler's side of a failure: the job's command (here an interpreter that fails as
    `calibrate run` does on a host problem) exits non-zero; the job ends `failed`, with the
    command's own error line and status, and the next queued job starts."""
    failing = tmp_path / "python"
    failing.write_text("#!/bin/sh\necho 'calibrate: Ray up in 4 s'\n"
                       "echo 'calibrate: error: the engine could not create a TUN device; run as root' >&2\n"
                       "exit 2\n")
    failing.chmod(0o755)
    settings = ServiceSettings(root=tmp_path / "root", python=str(failing), max_running=1)
    settings.make_dirs()
    store = Store(settings.store)
    scheduler = Scheduler(settings, store)
    intake = Intake(settings, store, scheduler.wake)
    ids = [intake.calibration(CalibrationRequest(target="nepal", options=RunOptions(budget=2, seed=seed)), "o")[0].id
           for seed in (1, 2)]
    scheduler.claim()
    scheduler.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(store.job(i).state != "failed" for i in ids):
            time.sleep(0.1)
    finally:
        scheduler.stop()
    for job_id in ids:
        job = store.job(job_id)
        assert job.state == "failed" and job.exit_code == 2 and job.finished is not None, job
        assert job.message == "the engine could not create a TUN device; run as root (exit status 2)"
        assert "calibrate: error:" in (settings.jobs_dir / job_id / "log.txt").read_text()
    store.close()
