"""`load_target`: what a user types as TARGET, to the reader that makes a Target of it.

The only dispatcher: every command, run and experiment loads targets through `load_target`; each
reader lives in its own module of `calibrate.targets` and knows nothing of the others' inputs.
"""

from __future__ import annotations

import os
from pathlib import Path

from calibrate.errors import InputError, read_as_input
from calibrate.jsonfile import read_json
from calibrate.targets.archive import is_archive_name, read_archive
from calibrate.targets.bundled import bundled_targets, load_bundled
from calibrate.targets.datadir import METADATA, read_data_dir
from calibrate.targets.model import FORMAT, Target
from calibrate.targets.perf import is_perf_json, read_perf_file
from calibrate.targets.result_id import FetchOptions, looks_like_result_id, read_result
from calibrate.targets.tables import read_summary_table

#: the explicit spelling of a bundled target (`bundled:nepal`), which no file or directory shadows
BUNDLED_PREFIX = "bundled:"


def load_target(spec: str, *, fetch: FetchOptions | None = None) -> Target:
    """Resolve TARGET as typed on the command line.  ``bundled:NAME`` is a bundled target; else
    an existing path wins (`load_path`); then a bundled name; then a Pantheon result ID (P188,
    188 or its URL).  `fetch` says where result IDs come from and where archives are extracted
    (default: from the environment)."""
    bundled = bundled_targets()
    if spec.startswith(BUNDLED_PREFIX):
        name = spec.removeprefix(BUNDLED_PREFIX)
        if name not in bundled:
            raise InputError(f"no bundled target {name!r}; the bundled ones are "
                             f"{', '.join(BUNDLED_PREFIX + n for n in sorted(bundled))}")
        return load_bundled(name)
    path = Path(os.path.expanduser(spec))
    if path.exists():
        if spec not in bundled:
            return load_path(path, fetch=fetch)
        try:  # a file or directory here that has a bundled target's name wins, but says so
            target = load_path(path, fetch=fetch)
        except InputError as error:
            what = "directory" if path.is_dir() else "file"
            raise InputError(f"{error} ({spec!r} was read as the {what} {path.resolve()}, which "
                             f"shadows the bundled target {spec}; to use the bundled one, write "
                             f"{BUNDLED_PREFIX}{spec})") from None
        note = (f"{spec!r} is {path.resolve()} here, not the bundled target {spec} (that one is "
                f"{BUNDLED_PREFIX}{spec})")
        return target.with_provenance(notes=(*target.provenance.notes, note))
    if spec in bundled:
        return load_bundled(spec)
    if looks_like_result_id(spec):
        return read_result(spec, fetch or FetchOptions.from_environment())
    hint = ""
    if is_archive_name(spec) or spec.endswith((".csv", ".json", ".txt")):
        hint = " (no such file)"
    raise InputError(f"target {spec!r} is not a file or directory{hint}, a bundled target "
                     f"({', '.join(sorted(bundled))}) or a Pantheon result ID "
                     "(P188, 188 or https://pantheon.stanford.edu/result/188/)")


def load_path(path: Path, *, fetch: FetchOptions | None = None) -> Target:
    """A file or directory: a data directory, an archive, a saved target JSON, a
    pantheon_perf.json, a pantheon_metadata.json (its directory), else a summary table.  Every
    failure is an InputError (`read_as_input`)."""
    with read_as_input(str(path)):
        return _read_path(path, fetch)


def _read_path(path: Path, fetch: FetchOptions | None) -> Target:
    if path.is_dir():
        return read_data_dir(path)
    if is_archive_name(path.name):
        options = fetch or FetchOptions.from_environment()
        return read_archive(path, options.cache_dir, options.max_extract_bytes)
    if path.suffix.lower() == ".json":
        data = read_json(path)
        if isinstance(data, dict) and data.get("format") == FORMAT:
            return Target.from_json(data, source=str(path))
        if is_perf_json(path, data):
            return read_perf_file(path)
        return read_summary_table(path)
    if path.name.endswith(METADATA):
        return read_data_dir(path.parent)
    return read_summary_table(path)
