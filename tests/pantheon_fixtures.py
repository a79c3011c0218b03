"""Builders for synthetic Pantheon files: merged datalink logs, data dirs of each era, archives.

The numbers are made up but shaped like Pantheon's: a sender pushes packets at a steady rate,
some never arrive, the rest arrive after a one-way delay with jitter.
"""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calibrate.metrics import analyze_datalink_log, write_perf_json, write_stats_log

WORKED_VECTOR_LOG = """\
# init timestamp: 1499999999999.000
1.000 # 1500
1.500 + 1500 1
2.000 # 1500
2.000 + 1500 1
2.500 + 1500 1
3.000 # 1500
3.000 + 100 1
21.500 - 1500 20.000 1
22.500 - 1500 20.000 1
23.000 - 100 20.000 1
"""


def datalink_log_text(*, seed: int, runtime_ms: float = 2000.0, gap_ms: float = 1.0,
                      delay_ms: float = 30.0, loss_every: int = 50, flows: int = 1,
                      integer_ms: bool = False, with_flow_column: bool = True,
                      opportunities: bool = True, init: float = 1_483_478_000_000.0) -> str:
    """A merged datalink log; timestamps `%.3f` (or integer ms with a `# base timestamp`)."""
    rng = np.random.default_rng(seed)
    lines = []
    header = [f"# init timestamp: {init:.3f}"]
    if integer_ms:
        header = [f"# init timestamp: {int(init)}", f"# base timestamp: {int(init)}"]
    events: list[tuple[float, str]] = []
    for flow in range(1, flows + 1):
        start = (flow - 1) * runtime_ms / (2 * flows)
        sends = np.arange(start, runtime_ms, gap_ms) + rng.uniform(0, 0.2)
        sizes = rng.choice([1500, 1500, 1500, 700], size=sends.size)
        delays = delay_ms + rng.exponential(5.0, size=sends.size)
        fcol = f" {flow}" if with_flow_column else ""
        for i, (t, size, d) in enumerate(zip(sends, sizes, delays, strict=True)):
            t = float(np.floor(t)) if integer_ms else float(t)
            d = float(np.round(d)) if integer_ms else float(d)
            fmt = "{:.0f}" if integer_ms else "{:.3f}"
            events.append((t, f"{fmt.format(t)} + {size}{fcol}"))
            if i % loss_every != loss_every - 1:
                events.append((t + d, f"{fmt.format(t + d)} - {size} {fmt.format(d)}{fcol}"))
    if opportunities:
        for t in np.arange(0.0, runtime_ms + delay_ms, 1.0):
            events.append((float(t), f"{t:.0f} # 1500" if integer_ms else f"{t:.3f} # 1500"))
    events.sort(key=lambda e: e[0])
    lines = header + [text for _, text in events]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Era:
    name: str  # "2016", "2017", "2018"
    metadata_string_form: bool  # cc_schemes one string (2016-17)
    integer_ms: bool  # pre-2017 merged logs
    perf_json: bool  # pantheon_perf.json (2018-05 on)
    stats_logs: bool
    datalink_logs: bool
    dir_suffix: str  # "-logs" for 2016-17 archives
    archive_suffix: str


ERAS = {
    # Nov 2016: integer-ms logs, string cc_schemes, raw_logs/ folder, .tar.xz
    "2016": Era("2016", True, True, False, True, True, "-logs", ".tar.xz"),
    # 2017: float logs, still string cc_schemes, stats logs, .tar.gz after Nov 2017
    "2017": Era("2017", True, False, False, True, True, "", ".tar.gz"),
    # 2018+: list cc_schemes, pantheon_perf.json, .tar.gz with <title>/ inside
    "2018": Era("2018", False, False, True, True, True, "", ".tar.gz"),
}


def write_data_dir(directory: Path, era: Era, *, labels=("default_tcp", "vegas"), runs=3,
                   runtime_s: float = 2.0, flows: int = 1, broken: dict | None = None) -> dict:
    """Write a data dir of `era`; returns {(label, run): RunStats} of the runs written as valid.

    `broken` maps (label, run) to a kind of damage: "missing" (no files), "malformed" (a bad
    datalink line at line 5), "short" (departures span too little of the runtime)."""
    broken = broken or {}
    directory.mkdir(parents=True, exist_ok=True)
    meta: dict = {"runtime": runtime_s, "interval": 0, "flows": flows, "run_times": runs}
    if era.metadata_string_form:
        meta.update({"cc_schemes": " ".join(labels), "git_information": "branch: master @ abc",
                     "local_information": "Nepal Wi-Fi mesh\nLinux 4.4", "remote_information":
                     "AWS India", "sender_side": "local", "local_address": "10.0.0.1",
                     "remote_address": "13.0.0.1", "ntp_addr": "pool.ntp.org"})
    else:
        meta.update({"cc_schemes": sorted(labels), "mode": "remote", "start_run_id": 1,
                     "git_summary": "branch: master @ abc", "local_desc": "AWS India",
                     "remote_desc": "Nepal", "sender_side": "remote", "random_order": True})
    (directory / "pantheon_metadata.json").write_text(json.dumps(meta, indent=4, sort_keys=True))
    if era.name == "2016":
        (directory / "raw_logs").mkdir(exist_ok=True)
        (directory / "raw_logs" / "vegas_datalink_run1_flow1.log.ingress").write_text("# x\n")
    valid = {}
    perf: dict = {}
    for index, label in enumerate(labels):
        perf[label] = {}
        for run in range(1, runs + 1):
            damage = broken.get((label, run))
            if damage == "missing":
                continue
            runtime_ms = runtime_s * 1000 * (0.5 if damage == "short" else 1.0)
            text = datalink_log_text(seed=100 * index + run, runtime_ms=runtime_ms, flows=flows,
                                     integer_ms=era.integer_ms, gap_ms=1.0 + index)
            if damage == "malformed":
                lines = text.splitlines()
                lines[4] = "12.5 + fifteen-hundred 1"
                text = "\n".join(lines) + "\n"
            path = directory / f"{label}_datalink_run{run}.log"
            path.write_text(text)
            stats = None if damage == "malformed" else analyze_datalink_log(path)
            ok = damage is None
            if not era.datalink_logs:
                path.unlink()
            if era.stats_logs:
                import datetime as dt

                start = dt.datetime(2017, 1, 3, 21, 30, run)
                write_stats_log(directory / f"{label}_stats_run{run}.log", start_at=start,
                                end_at=start + dt.timedelta(seconds=runtime_s),
                                stats=stats if ok else None)
            if ok:
                valid[(label, run)] = stats
                perf[label][run] = stats
    if era.perf_json:
        write_perf_json(directory / "pantheon_perf.json", perf)
    return valid


def tar_directory(directory: Path, archive: Path, arcname: str) -> Path:
    mode = {".tar.xz": "w:xz", ".tar.gz": "w:gz", ".tgz": "w:gz", ".tar": "w"}
    suffix = next(s for s in mode if archive.name.endswith(s))
    with tarfile.open(archive, mode[suffix]) as tar:
        tar.add(directory, arcname=arcname)
    return archive


def zip_directory(directory: Path, archive: Path, arcname: str) -> Path:
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                zf.write(path, f"{arcname}/{path.relative_to(directory)}")
    return archive


def add_tar_member(tar: tarfile.TarFile, name: str, data: bytes = b"x", **attrs) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in attrs.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data) if info.isreg() else None)


def mm_link_log_text(*, opportunities: np.ndarray, arrivals: np.ndarray, queue: int,
                     init: int = 1_795_443_106_312) -> tuple[str, dict]:
    """A Mahimahi uplink log (mm-link's `--uplink-log`) of MTU packets arriving at `arrivals` (whole
    ms) at a DropTail queue of `queue` packets served at `opportunities` (whole ms), simulated
    with Mahimahi's order: opportunities up to now are served before a packet that arrives now
    is enqueued.  Returns the text and what was simulated: drops, departure delays (ms)."""
    lines = ["# mahimahi mm-link (Uplink) [/tmp/x.trace] > /tmp/x.log", "# command line: REDACTED",
             "# queue: REDACTED", f"# init timestamp: {init}", "# base timestamp: 33",
             "# mahimahi config: REDACTED"]
    waiting: list[int] = []
    delays: list[int] = []
    drops = 0
    opps, arrs = list(map(int, opportunities)), list(map(int, arrivals))
    i = j = 0
    while i < len(opps) or j < len(arrs):
        if i < len(opps) and (j >= len(arrs) or opps[i] <= arrs[j]):
            t = opps[i]
            i += 1
            lines.append(f"{t} # 1504")
            if waiting:
                arrived = waiting.pop(0)
                delays.append(t - arrived)
                lines.append(f"{t} - 1504 {t - arrived}")
        else:
            t = arrs[j]
            j += 1
            lines.append(f"{t} + 1504")
            if len(waiting) >= queue:
                drops += 1
                lines.append(f"{t} d 1 1504")
            else:
                waiting.append(t)
    return "\n".join(lines) + "\n", {"drops": drops, "delays": np.array(delays)}
