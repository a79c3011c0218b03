"""What clients read about a job, from its run directory (`RunDir.open`, the one reader of run
directories) and its row: the summary, the journal as events, the catalogue entry, the zips.

Reading is cheap and often (every poll of every client): a job's RunDir and journal are read
again only when their files change (`Runs`, keyed by size and mtime), and the zips are made
once, beside the run, when first asked for.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import tempfile
import threading
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calibrate import installed_version
from calibrate.errors import InputError
from calibrate.export import EXPORT_DIR, REPORT, read_report
from calibrate.jsonfile import read_json
from calibrate.parameters import PARAMETER_TABLE, by_key
from calibrate.runs.journal import JOURNAL, RESULT, RUN_FILE, Evaluation, RunDir
from calibrate.runs.progress import eta_s
from calibrate.runs.result import CalibrationResult
from calibrate.service.intake import LOG_FILE, made_file
from calibrate.service.store import CALIBRATION, DONE, FINISHED, RUNNING, SCORE, STUDY, Job, parse_time

EXPORT_ZIP = "export.zip"
BUNDLE_ZIP = "bundle.zip"
#: the winner's files a catalogue bundle holds, beside its traces
BUNDLE_FILES = (REPORT, "mahimahi.txt", "pantheon_args.txt", "engine.txt")


def _signature(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


@dataclass
class Runs:
    """Jobs' run directories, read again only when their files change."""

    _dirs: dict[str, tuple[Any, RunDir | None]] = field(default_factory=dict)
    _journals: dict[str, tuple[Any, list[Evaluation]]] = field(default_factory=dict)
    _results: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, job: Job) -> RunDir | None:
        """The job's RunDir, or None before its run.json is written."""
        path = Path(job.run_dir)
        key = _signature(path / RUN_FILE)
        with self._lock:
            cached = self._dirs.get(job.id)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:  # a study's run.json names its kind; a calibration's may not (format 1)
            run = RunDir.open(path, CALIBRATION if job.kind == CALIBRATION else None) if key is not None else None
        except InputError:
            run = None
        with self._lock:
            self._dirs[job.id] = (key, run)
        return run

    def records(self, job: Job) -> list[Evaluation]:
        """The journal's records (none before the run has one)."""
        run = self.run(job)
        if run is None:
            return []
        key = _signature(run.path / JOURNAL)
        with self._lock:
            cached = self._journals.get(job.id)
        if cached is not None and cached[0] == key:
            return cached[1]
        records = run.evaluations() if key is not None else []
        with self._lock:
            self._journals[job.id] = (key, records)
        return records

    def result(self, job: Job) -> CalibrationResult | None:
        """A calibration's result.json, once the loop has written it."""
        run = self.run(job)
        if run is None:
            return None
        key = _signature(run.path / RESULT)
        with self._lock:
            cached = self._results.get(job.id)
        if cached is not None and cached[0] == key:
            return cached[1]
        saved = run.read_result() if key is not None else None
        result = None if saved is None else CalibrationResult.from_json(saved, str(run.result_file))
        with self._lock:
            self._results[job.id] = (key, result)
        return result

    def report(self, job: Job) -> Mapping[str, Any] | None:
        """What the job's command wrote last (`made_file`), once the job is done: a calibration's
        emulator.json, a study's loo.json or ablation.json, a score's score.json."""
        path = made_file(job)
        if job.state != DONE or not path.exists():
            return None
        key = _signature(path)
        with self._lock:
            cached = self._results.get(f"{job.id}/report")
        if cached is not None and cached[0] == key:
            return cached[1]
        report = read_report(read_json(path, what=f"{job.kind} result"))
        with self._lock:
            self._results[f"{job.id}/report"] = (key, report)
        return report


# ----------------------------------------------------------------------------------------------
# A job's summary


def collection(kind: str) -> str:
    """The URL path of a kind's jobs: /v1/calibrations, /v1/scores, /v1/studies."""
    return "/v1/studies" if kind == STUDY else f"/v1/{kind}s"


def urls(job: Job) -> dict[str, str]:
    base = f"{collection(job.kind)}/{job.id}"
    if job.kind == SCORE:
        return {"self": base}
    if job.kind == STUDY:
        return {"self": base, "export": f"{base}/export", "log": f"{base}/log"}
    return {"self": base, "events": f"{base}/events", "export": f"{base}/export",
            "convergence": f"{base}/convergence.png", "log": f"{base}/log"}


def _elapsed(job: Job) -> float | None:
    started = parse_time(job.started)
    if started is None:
        return None
    end = parse_time(job.finished) or dt.datetime.now(dt.UTC)
    return round((end - started).total_seconds(), 1)


def summary(job: Job, runs: Runs) -> dict[str, Any]:
    """GET /v1/calibrations/{id} (and /v1/scores/{id}, whose `result` is score.json)."""
    out: dict[str, Any] = {
        "id": job.id, "kind": job.kind, "state": job.state, "target": job.target,
        "created": job.created, "started": job.started, "finished": job.finished,
        "options": dict(job.options), "message": job.message, "elapsed_s": _elapsed(job),
        "urls": urls(job)}
    if job.kind == SCORE:
        out["result"] = runs.report(job)
        return out
    if job.kind == STUDY:
        return {**out, **study_summary(job, runs)}
    records = runs.records(job)
    budget = int(job.options["budget"])
    progress: dict[str, dict[str, Any]] = {}
    for link in job.options["links"]:
        mine = [r.f for r in records if r.link == link]
        progress[link] = {"done": len(mine), "budget": budget, "best_f": min(mine, default=None)}
    result = runs.result(job)
    if result is not None:
        for link, entry in result.links.items():
            if link in progress:
                progress[link]["stopped"] = entry.stopped
    best = None
    winner = None if result is None else result.best
    if job.state == DONE and result is not None and winner is not None:
        best = {"link": result.winner, "f": winner.f, "noise": winner.noise,
                "emulator": by_key(winner.params or {}), "text": winner.emulator}
    elif records:
        record = min(records, key=lambda r: r.f)
        best = {"link": record.link, "f": record.f, "noise": record.noise,
                "emulator": by_key(record.params), "text": record.emulator}
    eta = None
    if job.state == RUNNING and records:
        left = sum(max(budget - p["done"], 0) for p in progress.values() if not p.get("stopped"))
        eta = round(eta_s(max(r.elapsed_s for r in records), len(records), left) or 0.0)
    report = runs.report(job)
    schemes = None
    if report is not None:
        schemes = report["links"][report["winner"]].get("schemes")
    out.update({"progress": progress, "evaluations": len(records), "best": best, "eta_s": eta,
                "schemes": schemes})
    return out


def study_summary(job: Job, runs: Runs) -> dict[str, Any]:
    """A study's part of its summary: the evaluations journaled so far, and once it is done its
    table as the export's loo.json / ablation.json holds it."""
    records = runs.records(job)
    result = runs.report(job)
    return {"study": job.options["study"], "evaluations": len(records),
            "best_f": min((r.f for r in records), default=None), "result": result,
            "files": export_files(job) if result is not None else None}


# ----------------------------------------------------------------------------------------------
# Events


def event_records(records: Sequence[Evaluation]) -> list[dict[str, Any]]:
    """The journal's records as events carry them: the record (less its per-run metrics), with
    `n`, its number among its link kind's evaluations, `values`, its parameters, and
    `parameters`, the same keyed as emulator.json (`calibrate.parameters.by_key`)."""
    counts: dict[str, int] = {}
    out = []
    for record in records:
        counts[record.link] = counts.get(record.link, 0) + 1
        data = record.to_json()
        data.pop("runs", None)
        data.update(n=counts[record.link], values=dict(record.params), parameters=by_key(record.params))
        out.append(data)
    return out


# ----------------------------------------------------------------------------------------------
# The catalogue


def catalogue_entry(job: Job, runs: Runs) -> dict[str, Any] | None:
    """A finished calibration's winner, as GET /v1/emulators lists it."""
    report = runs.report(job)
    run = runs.run(job)
    if report is None or run is None:
        return None
    winner = report["emulator"]
    prov = run.target.provenance
    return {
        "id": job.id, "target": job.target,
        "description": prov.path_description or run.target.name or job.target,
        "link": report["winner"],
        "parameters": {p.key: winner[p.key] for p in PARAMETER_TABLE.values()},
        "f": winner["f"], "noise": winner.get("noise"), "date": job.finished,
        "measured": prov.date,
        "provenance": {"calibrate_version": (report.get("provenance") or {}).get("calibrate_version")
                       or installed_version(),
                       "job": job.id, "options": dict(job.options), "target_digest": job.target_digest},
        "urls": {"mahimahi": f"/v1/emulators/{job.id}/mahimahi.txt",
                 "bundle": f"/v1/emulators/{job.id}/bundle.zip",
                 "calibration": f"/v1/calibrations/{job.id}"}}


def sort_entries(entries: list[dict[str, Any]], sort: str, order: str) -> list[dict[str, Any]]:
    key = (lambda e: (e["f"] is None, e["f"] or 0.0)) if sort == "f" else (lambda e: e["date"] or "")
    return sorted(entries, key=key, reverse=order == "desc")


# ----------------------------------------------------------------------------------------------
# Files and zips


def export_dir(job: Job) -> Path:
    return Path(job.run_dir) / EXPORT_DIR


def export_files(job: Job) -> list[str]:
    """The export's files, as paths inside it."""
    root = export_dir(job)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def export_file(job: Job, name: str) -> Path | None:
    """The export's file `name` (a relative path inside it), or None when there is no such
    file; InputError for a name that would leave the export."""
    parts = name.replace("\\", "/").split("/")
    if name.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\x00" in name:
        raise InputError(f"file name {name!r} must be a path inside the export, like mahimahi.txt or "
                         f"traces/12mbps.trace (no '..', no leading '/')")
    root = export_dir(job).resolve()
    path = (root / Path(*parts)).resolve()
    if root not in path.parents or not path.is_file():
        return None
    return path


def _zip(path: Path, members: Mapping[str, Path]) -> Path:
    """Write `members` (name in the zip -> file) as the zip `path`, whole or not at all."""
    if path.exists():
        return path
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, source in sorted(members.items()):
                archive.write(source, name)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def export_zip(job: Job) -> Path:
    """The whole export as a zip (its files under ``<id>/``), made once."""
    root = export_dir(job)
    members = {f"{job.kind}-{job.id}/{p.relative_to(root)}": p for p in root.rglob("*") if p.is_file()}
    return _zip(Path(job.run_dir).parent / EXPORT_ZIP, members)


def bundle_zip(job: Job, report: Mapping[str, Any]) -> Path:
    """The winner ready to use: its command lines, emulator.json and trace files."""
    root = export_dir(job)
    names = [*BUNDLE_FILES, *report["emulator"]["files"].get("traces", [])]
    members = {f"emulator-{job.id}/{name}": root / name for name in names if (root / name).is_file()}
    return _zip(Path(job.run_dir).parent / BUNDLE_ZIP, members)


@dataclass
class Plots:
    """The convergence plot of a running job's journal, drawn again only when it grows."""

    _cache: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def convergence(self, job: Job, records: Sequence[Evaluation]) -> bytes:
        from calibrate.export import plot_convergence

        with self._lock:
            cached = self._cache.get(job.id)
            if cached is not None and cached[0] == len(records):
                return cached[1]
            with tempfile.TemporaryDirectory(dir=Path(job.run_dir).parent) as tmp:
                out = Path(tmp) / "convergence.png"
                plot_convergence(records, out)
                data = out.read_bytes()
            self._cache[job.id] = (len(records), data)
            return data


def log_tail(job: Job, limit: int = 65536) -> str:
    """The end of the job's log (its command's stdout and stderr)."""
    path = Path(job.run_dir).parent / LOG_FILE
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, io.SEEK_END) - limit))
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def finished(job: Job) -> bool:
    return job.state in FINISHED

