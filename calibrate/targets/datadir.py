"""Reading a Pantheon data directory of any era into a Target (an archive of one:
`calibrate.targets.archive`; its `pantheon_perf.json` alone: `calibrate.targets.perf`).

Per scheme and run the richest source present wins: the run's entry in
`pantheon_perf.json` (2018+); else its `<cc>_datalink_run<N>.log`, recomputed with
calibrate.metrics and judged valid or not with Pantheon's rule; else its `<cc>_stats_run<N>.log`.
A run that none of them yields is dropped with the reason, and the rest are used.
`pantheon_metadata.json` is read in its 2016–17 form (`cc_schemes` one string) and the later one.
Any log may be gzipped (`<name>.log.gz`).

Per-packet evidence (`calibrate.evidence`) is read for every run in the target from its datalink
log and its Mahimahi link log `<cc>_mm_datalink_run<N>.log`, where present, whichever source gave
the run's numbers; a log that cannot be read for it leaves a note, not an error.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from calibrate.errors import InputError
from calibrate.evidence import PathEvidence, RunEvidence, parse_link_log, read_log_bytes, run_evidence
from calibrate.jsonfile import read_json
from calibrate.metrics import (
    TOTAL,
    DatalinkLog,
    Stats,
    check_run,
    parse_datalink_log,
    parse_stats_log,
    read_perf_json,
    run_stats,
)
from calibrate.targets.bounds import declared
from calibrate.targets.model import DroppedRun, Provenance, RunResult, SchemeResult, Target, Workload

METADATA = "pantheon_metadata.json"
PERF = "pantheon_perf.json"
PANTHEON_DEFAULT_RUNTIME_S = 30.0  # test.py's default -t
_LOG_RE = re.compile(r"^(?P<cc>.+)_(?P<kind>datalink|stats)_run(?P<run>\d+)\.log(?:\.gz)?$")
MM_SUFFIX = "_mm"  # <cc>_mm_datalink_run<N>.log is Mahimahi's link log, not the merged one
SOURCE_PERF, SOURCE_DATALINK, SOURCE_STATS = "pantheon_perf.json", "datalink log", "stats log"


# ----------------------------------------------------------------------------------------------
# Metadata


@dataclass(frozen=True)
class Metadata:
    schemes: tuple[str, ...]
    flows: int
    interval_s: float
    runtime_s: float | None
    run_times: int | None
    start_run_id: int
    era: str  # "2016-17" (cc_schemes a string) or "2018+" (a list)
    path_description: str | None


def read_metadata(path: Path) -> Metadata:
    data = read_json(path, what=METADATA)
    if not isinstance(data, dict):
        raise InputError(f"{path}: {METADATA} is a {type(data).__name__}, not an object")

    def number(key: str, field: str, default: Any) -> Any:
        """The number `key` declares, within the bound of `field` (`calibrate.targets.bounds`)."""
        value = data.get(key)
        if value is None:
            return default
        return declared(field, value, str(path), f"correct {key!r} in {METADATA}")

    schemes = data.get("cc_schemes", [])
    if isinstance(schemes, str):  # 2016-17: one space-separated string
        era, labels = "2016-17", tuple(schemes.split())
    elif isinstance(schemes, list) and all(isinstance(s, str) for s in schemes):
        era, labels = "2018+", tuple(schemes)
    else:
        raise InputError(f"{path}: 'cc_schemes' is {schemes!r}; expected a list of scheme names "
                         "or one space-separated string")
    # Pantheon's -f 0 runs one flow without a tunnel: one flow at the link
    flows = 1 if str(data.get("flows")) == "0" else number("flows", "flows", 1)
    return Metadata(labels, flows, number("interval", "interval_s", 0.0),
                    number("runtime", "runtime_s", None), number("run_times", "runs", None),
                    number("start_run_id", "run", 1), era, _describe_path(data))


def _first_line(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip().splitlines()[0].strip()


def _describe_path(data: dict[str, Any]) -> str | None:
    if data.get("mode") == "local":  # an emulator, described by its command line
        parts = [data.get("prepend_mm_cmds"), "mm-link", data.get("uplink_trace"),
                 data.get("downlink_trace"), data.get("extra_mm_link_args"),
                 data.get("append_mm_cmds")]
        return "emulated: " + " ".join(str(p) for p in parts if p)
    local = _first_line(data.get("local_desc")) or _first_line(data.get("local_information"))
    remote = _first_line(data.get("remote_desc")) or _first_line(data.get("remote_information"))
    if not (local or remote):
        return None
    local, remote = local or "local", remote or "remote"
    sender_is_remote = data.get("sender_side") == "remote"
    return f"{remote} -> {local}" if sender_is_remote else f"{local} -> {remote}"


# ----------------------------------------------------------------------------------------------
# Experiment titles (archive names)

_TITLE_RE = re.compile(
    r"^(?P<time>\d{4}-\d{2}-\d{2}T\d{2}-\d{2})-(?P<body>.+?)(?:-(?P<runs>\d+)-runs?)?"
    r"(?:-(?P<flows>\d+)-flows?)?(?:-FAILED)?$")


@dataclass(frozen=True)
class Title:
    name: str
    date: str | None  # ISO, minutes
    path_description: str | None
    runs: int | None


def parse_title(filename: str) -> Title:
    """Pantheon's archive names: `<YYYY-MM-DDTHH-MM>-<src>-to-<dst>-<N>-runs
    [-<F>-flows]` with `-logs.tar.xz` (2016-17) or `.tar.gz` (later)."""
    name = filename
    for suffix in (".tar.xz", ".tar.gz", ".tar.bz2", ".tgz", ".txz", ".tar", ".zip"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
            break
    name = re.sub(r"-logs$", "", name)
    m = _TITLE_RE.match(name)
    if not m:
        return Title(name, None, None, None)
    day, hm = m.group("time").split("T")
    date = f"{day}T{hm.replace('-', ':')}"
    body = m.group("body")
    if body.startswith("emu-"):
        path = f"emulation scenario {body[4:]}"
    elif "-to-" in body:
        src, dst = body.split("-to-", 1)
        path = f"{src.replace('-', ' ')} -> {dst.replace('-', ' ')}"
    else:
        path = None
    return Title(name, date, path, int(m.group("runs")) if m.group("runs") else None)


# ----------------------------------------------------------------------------------------------
# Data directory


def wanted_member(rel: str) -> bool:
    """The archive members a reader needs (raw tunnel logs, acklinks and plots are skipped; the
    uplink Mahimahi link logs are kept for their evidence)."""
    base = rel.rsplit("/", 1)[-1]
    if base in (METADATA, PERF, "perf_data.pkl"):  # the pickle only to say it is not loaded
        return True
    m = _LOG_RE.match(base)
    return m is not None and (not m.group("cc").endswith(MM_SUFFIX) or m.group("kind") == "datalink")


LogIndex = dict[tuple[str, int], Path]


def _scan(directory: Path) -> tuple[LogIndex, LogIndex, LogIndex]:
    """(merged datalink logs, stats logs, Mahimahi link logs) by (label, run); a plain file wins
    over its gzipped twin."""
    datalink: LogIndex = {}
    stats: LogIndex = {}
    links: LogIndex = {}
    for entry in sorted(directory.iterdir(), key=lambda e: (e.name.endswith(".gz"), e.name)):
        m = _LOG_RE.match(entry.name)
        if not m or not entry.is_file():
            continue
        cc, run = m.group("cc"), declared("run", m.group("run"), f"{directory / entry.name}",
                                          "rename or remove that file")
        if cc.endswith(MM_SUFFIX):
            if m.group("kind") == "datalink":
                links.setdefault((cc[: -len(MM_SUFFIX)], run), entry)
            continue
        (datalink if m.group("kind") == "datalink" else stats).setdefault((cc, run), entry)
    return datalink, stats, links


def read_data_dir(directory: Path | str, *, perf_file: Path | None = None,
                  provenance: Provenance | None = None) -> Target:
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"{directory} is not a directory")
    notes: list[str] = []
    meta = read_metadata(directory / METADATA) if (directory / METADATA).is_file() else None
    if meta is None:
        notes.append(f"no {METADATA}: schemes and runs taken from the file names")

    perf: dict[str, dict[int, dict[str, Stats]]] = {}
    perf_path = perf_file or directory / PERF
    datalink, stats, links = _scan(directory)
    if perf_path.is_file():
        try:
            perf = read_perf_json(perf_path)
        except InputError as error:
            if not (datalink or stats):
                raise
            notes.append(f"ignored {perf_path.name} ({error}); used the logs instead")
    for name in ("perf_data.pkl",):
        if (directory / name).exists():
            notes.append(f"{name} not read: pickles from the internet are never unpickled")

    runtime = meta.runtime_s if meta and meta.runtime_s else None
    if runtime is None:
        runtime = PANTHEON_DEFAULT_RUNTIME_S
        if datalink:
            notes.append(f"runtime unknown; judged run validity against Pantheon's default "
                         f"{runtime:g} s")

    labels = _ordered(list(meta.schemes if meta else ()) + list(perf)
                      + sorted({cc for cc, _ in datalink} | {cc for cc, _ in stats}))
    if not labels:
        if perf_path.is_file():
            raise InputError(f"{perf_path}: holds no scheme ({{}}), and {directory.resolve()} has "
                             f"no <scheme>_datalink_run<N>.log or <scheme>_stats_run<N>.log to "
                             f"compute results from; give the data directory with Pantheon's "
                             f"logs, or a {PERF} that lists the runs")
        raise InputError(f"{directory}: no Pantheon results here (no {PERF}, no "
                         "<scheme>_datalink_run<N>.log, no <scheme>_stats_run<N>.log)")
    expected_runs: set[int] = set()
    if meta and meta.run_times:
        expected_runs = set(range(meta.start_run_id, meta.start_run_id + meta.run_times))

    schemes: list[SchemeResult] = []
    all_dropped: list[DroppedRun] = []
    evidence: list[RunEvidence] = []
    sources: dict[str, int] = {}
    earliest_init: float | None = None
    for label in labels:
        runs = sorted(expected_runs | set(perf.get(label, {}))
                      | {r for cc, r in datalink if cc == label} | {r for cc, r in stats if cc == label})
        results: list[RunResult] = []
        dropped: list[DroppedRun] = []
        for run in runs:
            result, reason, init, parsed = _read_run(label, run, perf, datalink, stats, runtime)
            if init is not None:
                earliest_init = init if earliest_init is None else min(earliest_init, init)
            if result is None:
                dropped.append(DroppedRun(label, run, reason or "unknown"))
            else:
                results.append(result)
                sources[result.source] = sources.get(result.source, 0) + 1
                found = _run_evidence(label, run, result, parsed, datalink, links, notes)
                if found is not None:
                    evidence.append(found)
        all_dropped += dropped
        if results:
            schemes.append(SchemeResult.of_runs(label, results, dropped))
        else:
            all_dropped.append(DroppedRun(label, None, "no valid run"))
    if not schemes:
        shown = "; ".join(str(d) for d in all_dropped[:6])
        more = f" (and {len(all_dropped) - 6} more)" if len(all_dropped) > 6 else ""
        raise InputError(f"{directory}: no valid run of any scheme: {shown}{more}")

    workload = Workload(meta.flows if meta else _flows_seen(schemes), meta.interval_s if meta else 0.0,
                        runtime, meta.run_times if meta else None)
    date = None
    if earliest_init is not None and earliest_init > 1e12:  # epoch ms, not a relative time
        date = dt.datetime.fromtimestamp(earliest_init / 1000, dt.UTC).strftime(
            "%Y-%m-%dT%H:%M")
    metrics_from = ", ".join(f"{n} runs from {src}" for src, n in sorted(sources.items()))
    if SOURCE_DATALINK in sources:
        metrics_from += " (recomputed with Pantheon's math, as its tunnel_graph.py)"
    base = provenance or Provenance(kind="data dir", source=str(directory), name=directory.name)
    era = f"metadata form {meta.era}" if meta else None
    prov = replace(base, metrics_from=metrics_from,
                   date=base.date or date,
                   path_description=base.path_description or (meta.path_description if meta else None),
                   notes=tuple(base.notes) + tuple(notes) + ((era,) if era else ()))
    return Target(tuple(schemes), workload, prov, tuple(all_dropped), name=prov.name,
                  evidence=PathEvidence(tuple(evidence)) if evidence else None)


def _run_evidence(label: str, run: int, result: RunResult, parsed: DatalinkLog | None,
                  datalink: LogIndex, links: LogIndex, notes: list[str]) -> RunEvidence | None:
    """The run's per-packet evidence from its logs (None without any); an unreadable log leaves a
    note and no evidence from it."""
    if parsed is None and (label, run) in datalink:
        path = datalink[(label, run)]
        try:
            parsed = parse_datalink_log(path, data=read_log_bytes(path))
        except InputError as error:
            notes.append(f"no evidence from {path.name}: {error}")
    link = None
    if (label, run) in links:
        try:
            link = parse_link_log(links[(label, run)])
        except InputError as error:
            notes.append(f"no evidence from {links[(label, run)].name}: {error}")
    if parsed is None and link is None:
        return None
    total = result.flows.get(TOTAL)
    return run_evidence(label, run, datalink=parsed, link=link,
                        one_way_p95_ms=None if total is None else total.delay)


def _ordered(labels: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for label in labels:
        seen.setdefault(label, None)
    return list(seen)


def _flows_seen(schemes: list[SchemeResult]) -> int:
    return max((sum(1 for k in s.summary if k != TOTAL) for s in schemes), default=1) or 1


def _read_run(label: str, run: int, perf, datalink, stats, runtime: float
              ) -> tuple[RunResult | None, str | None, float | None, DatalinkLog | None]:
    """One run from the richest source; (result, why-dropped, log init timestamp, the datalink
    log when it was parsed)."""
    if run in perf.get(label, {}):
        return RunResult(run, perf[label][run], SOURCE_PERF), None, None, None
    reasons = []
    if perf:
        reasons.append(f"not in {PERF}")
    if (label, run) in datalink:
        path = datalink[(label, run)]
        try:
            log = parse_datalink_log(path, data=read_log_bytes(path))
        except InputError as error:
            return None, "; ".join(reasons + [str(error)]), None, None
        computed = run_stats(log)
        validity = check_run(computed, runtime)
        if not validity.valid:
            return None, "; ".join(reasons + [f"{path.name}: {validity.reason}"]), \
                computed.init_timestamp_ms, None
        return (RunResult(run, computed.metrics(), SOURCE_DATALINK), None,
                computed.init_timestamp_ms, log)
    if (label, run) in stats:
        path = stats[(label, run)]
        try:
            log_text = read_log_bytes(path).decode("utf-8", errors="replace")
            stats_log = parse_stats_log(path, text=log_text)
        except InputError as error:
            return None, "; ".join(reasons + [str(error)]), None, None
        if stats_log.flows is None:
            why = f"{path.name} has no statistics block (Pantheon discarded the run"
            why += f": {stats_log.discarded_reason})" if stats_log.discarded_reason else ")"
            return None, "; ".join(reasons + [why]), None, None
        return RunResult(run, stats_log.flows, SOURCE_STATS), None, None, None
    reasons.append(f"no {label}_datalink_run{run}.log or {label}_stats_run{run}.log")
    return None, "; ".join(reasons), None, None
