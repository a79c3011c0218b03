"""Pantheon result IDs (`P188`, `188`, `https://pantheon.stanford.edu/result/188/`) to targets.

A result ID is resolved to its data archive through an archive index when one is configured
(a JSON file or URL: `{"results": {"188": {"url": ..., "sha256": ..., "size": ...}}}`, URLs
relative to the index), else through the result's web page, whose data-archive link is taken.
The archive is downloaded with progress into the cache directory, resumed after an interruption
(HTTP Range), checked against the index's sha256 when it has one (and against the checksum
recorded at first download afterwards), and read from the cache from then on — also offline.

Configuration (flag, else environment, else default):
  --base-url   CALIBRATE_PANTHEON_URL     https://pantheon.stanford.edu/
  --index      CALIBRATE_ARCHIVE_INDEX    none (use the result page)
  --cache-dir  CALIBRATE_CACHE_DIR        $XDG_CACHE_HOME/calibrate (~/.cache/calibrate)
  --offline    CALIBRATE_OFFLINE=1        off
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from calibrate.errors import EnvironmentProblem, InputError, read_as_input
from calibrate.jsonfile import parse_json, read_json
from calibrate.targets.archive import DEFAULT_MAX_BYTES, is_archive_name, read_archive, sha256_file
from calibrate.targets.model import Target

DEFAULT_BASE_URL = "https://pantheon.stanford.edu/"
ENV_BASE_URL = "CALIBRATE_PANTHEON_URL"
ENV_INDEX = "CALIBRATE_ARCHIVE_INDEX"
ENV_CACHE_DIR = "CALIBRATE_CACHE_DIR"
ENV_OFFLINE = "CALIBRATE_OFFLINE"
ENV_MAX_EXTRACT = "CALIBRATE_MAX_EXTRACT_BYTES"
USER_AGENT = "calibrate (emulator calibration service)"
_MAX_PAGE_BYTES = 8 * 1024 * 1024
_CHUNK = 256 * 1024

_ID_RE = re.compile(r"^[Pp]?(\d{1,9})$")
_URL_ID_RE = re.compile(r"/result/(\d{1,9})/?$")


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "calibrate"


@dataclass(frozen=True)
class FetchOptions:
    base_url: str = DEFAULT_BASE_URL
    index: str | None = None  # path or URL of an archive index
    cache_dir: Path = field(default_factory=default_cache_dir)
    offline: bool = False
    max_extract_bytes: int = DEFAULT_MAX_BYTES
    timeout_s: float = 60.0
    progress: bool = True

    @classmethod
    def from_environment(cls, **flags: Any) -> FetchOptions:
        """Flags given (not None) win over the environment, which wins over the defaults."""
        env = os.environ
        values: dict[str, Any] = {}
        if env.get(ENV_BASE_URL):
            values["base_url"] = env[ENV_BASE_URL]
        if env.get(ENV_INDEX):
            values["index"] = env[ENV_INDEX]
        if env.get(ENV_CACHE_DIR):
            values["cache_dir"] = Path(env[ENV_CACHE_DIR])
        if env.get(ENV_OFFLINE, "").strip().lower() in ("1", "true", "yes", "on"):
            values["offline"] = True
        if env.get(ENV_MAX_EXTRACT):
            try:
                values["max_extract_bytes"] = int(env[ENV_MAX_EXTRACT])
            except ValueError:
                raise InputError(f"{ENV_MAX_EXTRACT}={env[ENV_MAX_EXTRACT]!r} is not a whole "
                                 "number of bytes") from None
        values.update({k: v for k, v in flags.items() if v is not None})
        if "cache_dir" in values:
            values["cache_dir"] = Path(values["cache_dir"]).expanduser()
        return cls(**values)


def looks_like_result_id(spec: str) -> bool:
    return bool(_ID_RE.match(spec.strip())) or bool(
        spec.startswith(("http://", "https://")) and _URL_ID_RE.search(urllib.parse.urlsplit(spec).path))


def parse_result_id(spec: str) -> tuple[int, str | None]:
    """(id, result page URL if the spec was one)."""
    spec = spec.strip()
    if m := _ID_RE.match(spec):
        return int(m.group(1)), None
    if spec.startswith(("http://", "https://")):
        if m := _URL_ID_RE.search(urllib.parse.urlsplit(spec).path):
            return int(m.group(1)), spec
    raise InputError(f"{spec!r} is not a Pantheon result ID; write P188, 188 or "
                     "https://pantheon.stanford.edu/result/188/")


@dataclass(frozen=True)
class ArchiveRef:
    url: str
    sha256: str | None = None
    size: int | None = None
    path_description: str | None = None
    date: str | None = None


def _http_get(url: str, options: FetchOptions, max_bytes: int) -> bytes:
    _check_scheme(url)
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(request, timeout=options.timeout_s) as response:
            data = response.read(max_bytes + 1)
    except urllib.error.HTTPError as error:
        raise InputError(f"{url}: the server answered {error.code} {error.reason}; check the "
                         f"result ID, --base-url ({ENV_BASE_URL}) or --index ({ENV_INDEX})") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
        reason = getattr(error, "reason", error)
        raise EnvironmentProblem(f"cannot reach {url} ({reason}); check the network, or use "
                                 "--offline with an archive already in the cache") from None
    if len(data) > max_bytes:
        raise InputError(f"{url}: answer larger than {max_bytes} bytes; not an index or a "
                         "result page")
    return data


def _check_scheme(url: str) -> None:
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise InputError(f"{url}: only http and https URLs are fetched")


def _load_index(options: FetchOptions) -> tuple[dict[str, Any], str]:
    assert options.index
    index = options.index
    if index.startswith(("http://", "https://")):
        cached = options.cache_dir / "index.json"
        if options.offline:
            if not cached.is_file():
                raise InputError(f"the archive index {index} is not cached in {cached} and "
                                 "offline mode forbids fetching it")
            data = read_json(cached, what="archive index")
        else:
            raw = _http_get(index, options, _MAX_PAGE_BYTES)
            data = parse_json(raw.decode("utf-8", "replace"), source=index, what="archive index")
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_bytes(raw)
        return data, index
    path = Path(index).expanduser()
    return read_json(path, what="archive index"), path.resolve().as_uri()


def _from_index(result_id: int, options: FetchOptions) -> ArchiveRef:
    data, location = _load_index(options)
    entries = data.get("results", data) if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        raise InputError(f"{options.index}: an archive index is an object "
                         '{"results": {"<id>": {"url": ..., "sha256": ...}}}')
    entry = entries.get(str(result_id))
    if entry is None:
        raise InputError(f"result P{result_id} is not in the archive index {options.index}; add "
                         "it, or download the archive yourself and pass its path")
    if isinstance(entry, str):
        entry = {"url": entry}
    if not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
        raise InputError(f"{options.index}: entry {result_id} needs a \"url\" string")
    sha = entry.get("sha256")
    if sha is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", str(sha)):
        raise InputError(f"{options.index}: entry {result_id} has sha256 {sha!r}, not 64 hex "
                         "digits")
    url = urllib.parse.urljoin(location, entry["url"])
    size = entry.get("size")
    return ArchiveRef(url, sha.lower() if sha else None, int(size) if size is not None else None,
                      entry.get("path"), entry.get("date"))


_HREF_RE = re.compile(r"""href\s*=\s*["']([^"'<>]+)["']""", re.I)


def _from_result_page(result_id: int, page_url: str | None, options: FetchOptions) -> ArchiveRef:
    url = page_url or urllib.parse.urljoin(options.base_url.rstrip("/") + "/",
                                           f"result/{result_id}/")
    html = _http_get(url, options, _MAX_PAGE_BYTES).decode("utf-8", "replace")
    links = [urllib.parse.urljoin(url, href) for href in _HREF_RE.findall(html)]
    archives = [link for link in links
                if is_archive_name(urllib.parse.urlsplit(link).path)
                and "uid-logs/" not in link and "-UID." not in link]
    if not archives:
        raise InputError(f"{url} links no data archive (.tar.gz/.tar.xz/.zip); pass the archive "
                         f"itself, or an archive index with --index ({ENV_INDEX})")
    return ArchiveRef(archives[0])


def _archive_name(url: str) -> str:
    name = os.path.basename(urllib.parse.unquote(urllib.parse.urlsplit(url).path))
    if not name or name in (".", "..") or "/" in name or "\\" in name:
        raise InputError(f"{url}: cannot name a local file after this URL")
    return name


def fetch_result_archive(result_id: int, options: FetchOptions, page_url: str | None = None
                         ) -> tuple[Path, dict[str, Any]]:
    """The cached archive of a result (downloading it if needed) and its recorded source."""
    folder = options.cache_dir / "results" / str(result_id)
    record_path = folder / "source.json"
    if record_path.is_file():
        record = read_json(record_path, what="cache record")
        cached = folder / str(record.get("file", ""))
        if record.get("file") and cached.is_file():
            if sha256_file(cached) == record.get("sha256"):
                return cached, record
            if options.offline:
                raise InputError(f"{cached} does not match the checksum recorded when it was "
                                 "downloaded; delete it, then fetch it again without --offline")
            cached.unlink()
    if options.offline:
        raise InputError(f"result P{result_id} is not in the cache {folder} and offline mode "
                         f"(--offline / {ENV_OFFLINE}) forbids downloading it; run once online")

    ref = _from_index(result_id, options) if options.index else \
        _from_result_page(result_id, page_url, options)
    name = _archive_name(ref.url)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / name
    part = folder / (name + ".part")
    download(ref.url, part, options, expected_size=ref.size)
    checksum = sha256_file(part)
    if ref.sha256 and checksum != ref.sha256:
        part.unlink()
        raise InputError(f"{ref.url}: checksum mismatch: the index says sha256 {ref.sha256}, the "
                         f"download has {checksum}; the partial file was deleted. The archive "
                         "changed upstream or the index is wrong; fix the index entry")
    os.replace(part, final)
    record = {"result_id": result_id, "url": ref.url, "file": name, "sha256": checksum,
              "checksum_source": "index" if ref.sha256 else "recorded at first download",
              "size": final.stat().st_size, "path_description": ref.path_description,
              "date": ref.date,
              "fetched_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    record_path.write_text(json.dumps(record, indent=2) + "\n")
    return final, record


def download(url: str, part: Path, options: FetchOptions, expected_size: int | None = None) -> None:
    """Download `url` into `part`, continuing a previous partial download with a Range request.
    An interrupted download keeps what arrived and says to run again."""
    _check_scheme(url)
    have = part.stat().st_size if part.exists() else 0
    if expected_size is not None and have == expected_size:
        return
    if expected_size is not None and have > expected_size:
        part.unlink()
        have = 0
    headers = {"User-Agent": USER_AGENT}
    if have:
        headers["Range"] = f"bytes={have}-"
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=options.timeout_s)
    except urllib.error.HTTPError as error:
        if error.code == 416 and have:  # our part already holds everything, or is stale
            if expected_size is None:
                return
            part.unlink()
            return download(url, part, options, expected_size)
        raise InputError(f"{url}: the server answered {error.code} {error.reason}; check the "
                         "archive URL in the index or on the result page") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
        raise EnvironmentProblem(f"cannot download {url} ({getattr(error, 'reason', error)}); "
                                 "check the network and run again (a partial download resumes)"
                                 ) from None
    with response:
        status = response.status
        length = response.headers.get("Content-Length")
        remaining = int(length) if length and length.isdigit() else None
        mode = "ab"
        if have and status == 206:
            content_range = response.headers.get("Content-Range", "")
            m = re.match(r"bytes (\d+)-", content_range)
            if not m or int(m.group(1)) != have:
                raise EnvironmentProblem(f"{url}: the server resumed at the wrong offset "
                                         f"({content_range!r}); delete {part} and run again")
        else:
            mode, have = "wb", 0  # the server ignored Range: start over
        total = have + remaining if remaining is not None else expected_size
        received = 0
        with open(part, mode) as out, _progress(options, part.name[:-5], total, have) as advance:
            try:
                while chunk := response.read(_CHUNK):
                    out.write(chunk)
                    received += len(chunk)
                    advance(len(chunk))
            except (TimeoutError, OSError, http.client.HTTPException) as error:
                raise EnvironmentProblem(
                    f"download of {url} interrupted after {have + received} bytes ({error}); "
                    "run the same command again to resume") from None
        if remaining is not None and received < remaining:
            raise EnvironmentProblem(f"download of {url} stopped after {have + received} of "
                                     f"{have + remaining} bytes; run the same command again to "
                                     "resume")


class _progress:
    """A rich progress bar on stderr (silent when disabled), used as `with ... as advance`."""

    def __init__(self, options: FetchOptions, name: str, total: int | None, done: int) -> None:
        self.enabled = options.progress
        self.args = (name, total, done)

    def __enter__(self):
        if not self.enabled:
            return lambda n: None
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        name, total, done = self.args
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                 TransferSpeedColumn(), TimeRemainingColumn(),
                                 console=Console(file=sys.stderr), transient=True)
        self.progress.start()
        task = self.progress.add_task(f"downloading {name}", total=total, completed=done)
        return lambda n: self.progress.advance(task, n)

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.progress.stop()


def read_result(spec: str, options: FetchOptions) -> Target:
    """A Pantheon result ID to a Target (downloading its archive once, then from the cache)."""
    result_id, page_url = parse_result_id(spec)
    archive, record = fetch_result_archive(result_id, options, page_url)
    with read_as_input(f"result P{result_id} ({archive})"):
        target = read_archive(archive, options.cache_dir, options.max_extract_bytes)
    prov = target.provenance
    notes = prov.notes
    if record.get("checksum_source") != "index":
        notes = notes + ("no published checksum; sha256 recorded at first download",)
    return replace(target, name=target.name or f"P{result_id}", provenance=replace(
        prov, kind="result", source=spec, result_id=result_id, url=record.get("url"),
        path_description=record.get("path_description") or prov.path_description,
        date=record.get("date") or prov.date, notes=notes))
