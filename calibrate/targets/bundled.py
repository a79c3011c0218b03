"""The targets shipped inside the package (calibrate/data/bundled_targets.json): name -> a
summary table in calibrate/data, with the workload and provenance the table itself lacks."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources
from typing import Any

from calibrate.targets.model import Target, Workload
from calibrate.targets.tables import read_summary_table

BUNDLED_INDEX = "bundled_targets.json"


def bundled_targets() -> dict[str, dict[str, Any]]:
    """Name -> description of the targets shipped inside the package (calibrate/data)."""
    text = resources.files("calibrate.data").joinpath(BUNDLED_INDEX).read_text()
    return json.loads(text)


def load_bundled(name: str) -> Target:
    entry = bundled_targets()[name]
    resource = resources.files("calibrate.data").joinpath(entry["file"])
    with resources.as_file(resource) as path:
        target = read_summary_table(path)
    prov: dict[str, Any] = {k: (tuple(v) if k == "notes" else v)
                            for k, v in entry.get("provenance", {}).items()}
    return replace(target, name=name, workload=Workload.from_json(entry.get("workload", {})),
                   provenance=replace(target.provenance, kind="bundled", source=name, **prov))
