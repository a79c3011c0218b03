"""Targets from summary tables: per-scheme mean/std, without per-run values.

Three forms:
- the text table printed by Pantheon's `compare_two_experiments.py` (one row per scheme and
  metric, columns for both experiments; experiment 1 is read unless told otherwise);
- CSV with a header `scheme,runs,tput_mbps_mean,tput_mbps_std,delay_p95_ms_mean,
  delay_p95_ms_std,loss_pct_mean,loss_pct_std` (optional `flow` and `*_median` columns), and
  `# key: value` comment lines above it for provenance (`name`, `date`, `path`, `source`,
  `runtime_s`, `flows`, `interval_s`, `std_ddof`, `note`) — so a table from a paper can be typed in;
- JSON: `{"schemes": {"<label>": {"runs": 10, "tput_mbps": {"mean": .., "std": ..},
  "delay_p95_ms": {..}, "loss_pct": {..}}}, "workload": {..}, "provenance": {..}, "std_ddof": 0}`.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from calibrate.errors import InputError
from calibrate.jsonfile import read_json
from calibrate.metrics import STD_DDOF, TOTAL, Aggregate
from calibrate.scheme_registry import canonical_scheme
from calibrate.targets.bounds import declared
from calibrate.targets.datadir import parse_title
from calibrate.targets.model import FlowSummary, Provenance, SchemeResult, Target, Workload, check_flow_key

_METRICS = ("tput_mbps", "delay_p95_ms", "loss_pct")
_REQUIRED = ("scheme", "tput_mbps_mean", "delay_p95_ms_mean")
_KNOWN = {"scheme", "runs", "flow"} | {f"{m}_{s}" for m in _METRICS
                                       for s in ("mean", "std", "median")}
_MAX_TABLE_BYTES = 16 * 1024 * 1024


def read_summary_table(path: Path | str, *, experiment: int = 1) -> Target:
    path = Path(path)
    if path.suffix.lower() == ".json":
        return _read_json_table(path)
    try:
        if path.stat().st_size > _MAX_TABLE_BYTES:
            raise InputError(f"{path}: too large for a summary table")
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file; a summary table is CSV, JSON or the text "
                         "printed by compare_two_experiments.py") from None
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror or error}") from None
    if _COMPARE_HEADER.search(text):
        return read_compare_table(text, source=str(path), experiment=experiment)
    first = next((line for line in text.splitlines()
                  if line.strip() and not line.lstrip().startswith("#")), "")
    if path.suffix.lower() == ".csv" or "," in first:
        return read_csv_table(text, source=str(path))
    raise InputError(f"{path}: not a recognised target: expected a Pantheon data directory or "
                     "archive, a result ID, a CSV or JSON summary table, or the text table "
                     "printed by compare_two_experiments.py")


def _number(text: str, source: str, line: int, column: str) -> float | None:
    text = text.strip()
    if text == "" or text.lower() in ("nan", "na", "n/a", "-"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{source}:{line}: {column} {text!r} is not a number; correct that "
                         f"cell (a measured value, or empty when unknown)") from None
    if math.isinf(value):
        raise InputError(f"{source}:{line}: {column} {text} is impossible (a measured value is "
                         f"finite); correct that cell (empty when unknown)")
    return value


def _scheme(label: str, runs: int | None, flows: Mapping[str, dict[str, float | None]],
            ddof: int) -> SchemeResult:
    """A scheme with aggregates only.  Values: tput/delay mean, std, median; loss in %."""
    summary = {}
    for key, v in flows.items():
        # tables print loss in %, targets hold a fraction
        summary[key] = FlowSummary(_aggregate(v, "tput_mbps", runs, ddof), _aggregate(v, "delay_p95_ms", runs, ddof),
                                   _aggregate(v, "loss_pct", runs, ddof, 100.0))
    return SchemeResult(canonical_scheme(label), label, (), summary)


def _aggregate(values: Mapping[str, float | None], metric: str, runs: int | None, ddof: int,
               divisor: float = 1.0) -> Aggregate:
    """One metric's aggregate from a table row's `<metric>_mean`, `_std` and `_median` cells."""
    mean = values.get(f"{metric}_mean")
    if mean is None:
        return Aggregate(None, None, None, 0, ddof)
    std, median = values.get(f"{metric}_std"), values.get(f"{metric}_median")
    return Aggregate(mean / divisor, None if median is None else median / divisor,
                     None if std is None else std / divisor, runs or 1, ddof)


# ----------------------------------------------------------------------------------------------
# CSV


def read_csv_table(text: str, *, source: str) -> Target:
    meta: dict[str, str] = {}
    body: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("#"):
            if m := re.match(r"#\s*([A-Za-z_][\w ]*?)\s*:\s*(.*)$", stripped):
                key = m.group(1).lower().replace(" ", "_")
                meta[key] = (meta[key] + " " + m.group(2)) if key == "note" and key in meta \
                    else m.group(2).strip()
            continue
        if stripped:
            body.append((number, line))
    if not body:
        raise InputError(f"{source}: empty table; expected a header line "
                         f"{','.join(_REQUIRED)},...")
    header_line, header = body[0][0], next(csv.reader([body[0][1]]))
    header = [h.strip().lower() for h in header]
    missing = [c for c in _REQUIRED if c not in header]
    if missing:
        raise InputError(f"{source}:{header_line}: the header lacks {', '.join(missing)}; "
                         f"expected e.g. scheme,runs,tput_mbps_mean,tput_mbps_std,"
                         "delay_p95_ms_mean,delay_p95_ms_std,loss_pct_mean,loss_pct_std")
    unknown = [c for c in header if c not in _KNOWN]
    if unknown:
        raise InputError(f"{source}:{header_line}: unknown column(s) {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(_KNOWN))}")
    ddof = _meta_number(meta, "std_ddof", STD_DDOF, source)
    if len(body) == 1:
        raise InputError(f"{source}: the table has a header but no rows; add one line per scheme "
                         f"under it, e.g. {_example_row(header)}")
    rows: dict[str, dict[str, Any]] = {}
    for number, line in body[1:]:
        cells = next(csv.reader([line]))
        if len(cells) != len(header):
            raise InputError(f"{source}:{number}: {len(cells)} cells, the header has "
                             f"{len(header)}")
        row = dict(zip(header, (c.strip() for c in cells), strict=True))
        label = row["scheme"]
        if not label:
            raise InputError(f"{source}:{number}: empty scheme name")
        flow = row.get("flow") or TOTAL
        check_flow_key(flow, f"{source}:{number}", "correct that cell")
        runs = None
        if row.get("runs"):
            runs = declared("runs", row["runs"], f"{source}:{number}", "correct that cell")
        values = {c: _number(row[c], source, number, c) for c in header
                  if c not in ("scheme", "runs", "flow")}
        for col in ("tput_mbps_mean", "delay_p95_ms_mean"):
            if values.get(col) is None:
                raise InputError(f"{source}:{number}: {col} is empty for {label}")
        entry = rows.setdefault(label, {"runs": runs, "flows": {}})
        if flow in entry["flows"]:
            raise InputError(f"{source}:{number}: {label} flow {flow} appears twice")
        entry["flows"][flow] = values
        entry["runs"] = entry["runs"] or runs
    return _target(rows, meta, source, ddof)


_EXAMPLE = {"scheme": "cubic", "runs": "10", "flow": "all", "tput_mbps_mean": "5.1",
            "tput_mbps_std": "0.3", "tput_mbps_median": "5.2", "delay_p95_ms_mean": "52.0",
            "delay_p95_ms_std": "4.1", "delay_p95_ms_median": "51.5", "loss_pct_mean": "0.2",
            "loss_pct_std": "0.05", "loss_pct_median": "0.2"}


def _example_row(header: list[str]) -> str:
    """A plausible row for this header (what to type under it)."""
    return ",".join(_EXAMPLE.get(column, "") for column in header)


def _meta_number(meta: Mapping[str, str], key: str, default: Any, source: str,
                 field: str | None = None) -> Any:
    """The number the table declares as `key` (bounded as `field`, by default `key`:
    `calibrate.targets.bounds`), or `default` without it."""
    if key not in meta:
        return default
    return declared(field or key, meta[key], source, f"correct its '# {key}:' line (or the "
                                                     f"table's {key!r} entry)")


def _target(rows: Mapping[str, dict[str, Any]], meta: Mapping[str, str], source: str,
            ddof: int, kind: str = "summary table") -> Target:
    if not rows:
        raise InputError(f"{source}: the table lists no scheme; add each scheme's numbers "
                         "(module calibrate.targets.tables shows the forms)")
    schemes = []
    for label, entry in rows.items():
        if TOTAL not in entry["flows"]:
            raise InputError(f"{source}: {label} has per-flow rows but no '{TOTAL}' row")
        schemes.append(_scheme(label, entry["runs"], entry["flows"], ddof))

    default = Workload()
    workload = Workload(_meta_number(meta, "flows", default.flows, source),
                        _meta_number(meta, "interval_s", default.interval_s, source),
                        _meta_number(meta, "runtime_s", default.runtime_s, source),
                        _meta_number(meta, "run_times", None, source, field="runs"))
    notes = [meta["note"]] if meta.get("note") else []
    notes.append("aggregates only: the table has no per-run values")
    prov = Provenance(kind=kind, source=meta.get("source", source), name=meta.get("name", ""),
                      date=meta.get("date"), path_description=meta.get("path"),
                      archive_name=meta.get("archive"),
                      metrics_from=meta.get("metrics_from", f"per-scheme mean/std from {source}"),
                      std_ddof=ddof, notes=tuple(notes))
    return Target(tuple(schemes), workload, prov, (), name=prov.name)


# ----------------------------------------------------------------------------------------------
# JSON


def _read_json_table(path: Path) -> Target:
    data = read_json(path, what="summary table")
    source = str(path)
    if not isinstance(data, dict) or not isinstance(data.get("schemes"), (dict, list)):
        raise InputError(f"{source}: a JSON summary table is an object with \"schemes\": "
                         '{"<label>": {"runs": N, "tput_mbps": {"mean": .., "std": ..}, '
                         '"delay_p95_ms": {..}, "loss_pct": {..}}}')
    items = data["schemes"].items() if isinstance(data["schemes"], dict) else \
        ((s.get("scheme") if isinstance(s, dict) else None, s) for s in data["schemes"])
    ddof = declared("std_ddof", data.get("std_ddof", STD_DDOF), source,
                    "correct its \"std_ddof\"")
    rows: dict[str, dict[str, Any]] = {}
    for label, entry in items:
        where = f"{source}: scheme {label!r}"
        if not isinstance(label, str) or not isinstance(entry, dict):
            raise InputError(f"{where}: each scheme is an object named by its label")
        values: dict[str, float | None] = {}
        for metric in _METRICS:
            stat = entry.get(metric)
            if stat is None and metric == "loss_pct" and "loss" in entry:
                stat = _percent(entry["loss"], where)
            if stat is None:
                continue
            if not isinstance(stat, dict):
                raise InputError(f"{where}: {metric!r} must be {{\"mean\": .., \"std\": ..}}")
            for part in ("mean", "std", "median"):
                value = stat.get(part)
                if value is not None and (isinstance(value, bool)
                                          or not isinstance(value, (int, float))):
                    raise InputError(f"{where}: {metric}.{part} {value!r} is not a number")
                values[f"{metric}_{part}"] = None if value is None else float(value)
        for col in ("tput_mbps_mean", "delay_p95_ms_mean"):
            if values.get(col) is None:
                raise InputError(f"{where}: {col.replace('_mean', '')}.mean is missing")
        runs = entry.get("runs")
        if runs is not None:
            runs = declared("runs", runs, where, "correct its \"runs\"")
        rows[label] = {"runs": runs, "flows": {TOTAL: values}}
    meta = {k: str(v) for k, v in (data.get("provenance") or {}).items() if v is not None}
    meta.update({k: str(v) for k, v in (data.get("workload") or {}).items() if v is not None})
    if "name" in data:
        meta["name"] = str(data["name"])
    return _target(rows, meta, source, ddof)


def _percent(loss: Any, where: str) -> dict[str, Any]:
    """A JSON table's "loss" (fractions) as its "loss_pct" would hold it (percent)."""
    if not isinstance(loss, dict):
        raise InputError(f"{where}: loss {json.dumps(loss)[:40]} is not {{\"mean\": .., \"std\": ..}}; "
                         "\"loss\" holds fractions (0.004), \"loss_pct\" percent (0.4)")
    bad = next((v for v in loss.values() if v is not None and (
        isinstance(v, bool) or not isinstance(v, (int, float)))), None)
    if bad is not None:
        raise InputError(f"{where}: loss {json.dumps(bad)[:40]} is not a number")
    return {k: (None if v is None else 100 * v) for k, v in loss.items()}


# ----------------------------------------------------------------------------------------------
# compare_two_experiments.py text table

_COMPARE_HEADER = re.compile(r"^\s*scheme\s+exp 1 runs\s+exp 2 runs\s+aggregate metric", re.M)
_NUMBER = r"(-?(?:\d+(?:\.\d*)?|\.\d+)|nan|-?inf)"
_COMPARE_ROW = re.compile(
    r"^(?P<scheme>\S+)\s+(?P<r1>\d+)\s+(?P<r2>\d+)\s+(?P<metric>\S.*?)\s+"
    rf"(?P<m1>{_NUMBER})\s+(?P<m2>{_NUMBER})\s+\S+\s+(?P<s1>{_NUMBER})\s+(?P<s2>{_NUMBER})\s+\S+\s*$")
_COMPARISON_OF = re.compile(r"^\s*Comparison of:\s*(?P<a>.+?)\s+and\s+(?P<b>.+?)\s*$", re.M)


def _metric_kind(label: str) -> str | None:
    low = label.lower()
    if "throughput" in low:
        return "tput_mbps"
    if "delay" in low:
        return "delay_p95_ms"
    if "loss" in low:
        return "loss_pct"
    return None


def read_compare_table(text: str, *, source: str, experiment: int = 1) -> Target:
    """Experiment 1's (or 2's) per-scheme mean and std from compare_two_experiments.py output."""
    if experiment not in (1, 2):
        raise InputError("experiment must be 1 or 2")
    lines = text.splitlines()
    header_at = next(i for i, line in enumerate(lines) if _COMPARE_HEADER.match(line))
    start = header_at + 1
    if start < len(lines) and set(lines[start].strip()) <= {"-", " "} and lines[start].strip():
        start += 1
    rows: dict[str, dict[str, Any]] = {}
    for index in range(start, len(lines)):
        line = lines[index]
        if not line.strip():
            break  # the table ends at the first blank line; scores may follow
        m = _COMPARE_ROW.match(line.strip())
        if not m:
            raise InputError(f"{source}:{index + 1}: not a row of a compare_two_experiments "
                             f"table: {line.strip()[:80]!r}")
        kind = _metric_kind(m.group("metric"))
        if kind is None:
            raise InputError(f"{source}:{index + 1}: unknown aggregate metric "
                             f"{m.group('metric')!r}; expected throughput, delay or loss")
        runs = declared("runs", m.group(f"r{experiment}"), f"{source}:{index + 1}",
                        "correct that row")
        mean = _number(m.group(f"m{experiment}"), source, index + 1, "mean")
        std = _number(m.group(f"s{experiment}"), source, index + 1, "std dev")
        entry = rows.setdefault(m.group("scheme"), {"runs": runs, "flows": {TOTAL: {}}})
        entry["flows"][TOTAL][f"{kind}_mean"] = mean
        entry["flows"][TOTAL][f"{kind}_std"] = std
    if not rows:
        raise InputError(f"{source}:{header_at + 1}: the compare_two_experiments table has no rows")
    for label, entry in rows.items():
        for col in ("tput_mbps_mean", "delay_p95_ms_mean"):
            if entry["flows"][TOTAL].get(col) is None:
                raise InputError(f"{source}: {label} has no {col.split('_')[0]} row for "
                                 f"experiment {experiment}")
    meta: dict[str, str] = {"metrics_from": f"experiment {experiment} of a "
                                            "compare_two_experiments.py table (mean, np.std)"}
    if m := _COMPARISON_OF.search(text):
        title = parse_title(m.group("a" if experiment == 1 else "b").rstrip("/"))
        meta["name"] = title.name
        if title.date:
            meta["date"] = title.date
        if title.path_description:
            meta["path"] = title.path_description
    return _target(rows, meta, source, STD_DDOF)
