"""Result IDs resolved and downloaded from a local HTTP server on loopback."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from calibrate.errors import EnvironmentProblem, InputError
from calibrate.targets.load import load_target
from calibrate.targets.result_id import FetchOptions, looks_like_result_id, parse_result_id
from pantheon_fixtures import ERAS, tar_directory, write_data_dir

TITLE = "2019-02-03T04-05-Mexico-cellular-to-AWS-California-2-runs"
ARCHIVE_PATH = f"/real-world/Mexico/{TITLE}.tar.gz"


class _Server:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.cut_after: dict[str, int] = {}  # path -> bytes sent before dropping, once
        self.requests: list[tuple[str, str | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_GET(self):
                server.requests.append((self.path, self.headers.get("Range")))
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes=") and rng.endswith("-"):
                    start = int(rng[6:-1])
                    if start >= len(body):
                        self.send_response(416)
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                cut = server.cut_after.pop(self.path, None)
                if cut is not None:
                    self.wfile.write(body[start:start + cut])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body[start:])

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    s = _Server()
    yield s
    s.close()


@pytest.fixture
def archive_bytes(tmp_path) -> bytes:
    folder = tmp_path / "src" / TITLE
    write_data_dir(folder, ERAS["2018"], runs=2, labels=("cubic", "bbr"))
    # a little incompressible padding so the archive spans several download chunks
    (folder / "cubic_acklink_run1.log").write_bytes(hashlib.sha256(b"x").digest() * 40000)
    return tar_directory(folder, tmp_path / "a.tar.gz", TITLE).read_bytes()


def _index(tmp_path: Path, server: _Server, sha: str, size: int | None = None) -> Path:
    path = tmp_path / "index.json"
    entry = {"url": server.url + ARCHIVE_PATH, "sha256": sha, "path": "Mexico cellular -> AWS "
             "California", "date": "2019-02-03"}
    if size is not None:
        entry["size"] = size
    path.write_text(json.dumps({"results": {"196": entry}}))
    return path


def test_download_resumes_verifies_and_then_works_offline(tmp_path, server, archive_bytes):
    server.files[ARCHIVE_PATH] = archive_bytes
    server.cut_after[ARCHIVE_PATH] = len(archive_bytes) // 3
    sha = hashlib.sha256(archive_bytes).hexdigest()
    options = FetchOptions(index=str(_index(tmp_path, server, sha)), cache_dir=tmp_path / "cache",
                           progress=False)
    with pytest.raises(EnvironmentProblem, match="run the same command again to resume"):
        load_target("P196", fetch=options)
    part = tmp_path / "cache" / "results" / "196" / f"{TITLE}.tar.gz.part"
    assert part.stat().st_size == len(archive_bytes) // 3

    target = load_target("P196", fetch=options)
    assert server.requests[-1] == (ARCHIVE_PATH, f"bytes={len(archive_bytes) // 3}-")
    assert sorted(target.scheme_names) == ["bbr", "cubic"]
    prov = target.provenance
    assert (prov.kind, prov.result_id, prov.sha256) == ("result", 196, sha)
    assert prov.url == server.url + ARCHIVE_PATH
    assert prov.path_description == "Mexico cellular -> AWS California"
    assert not part.exists()

    server.close()  # from now on the network is gone
    offline = FetchOptions(index=options.index, cache_dir=options.cache_dir, offline=True)
    cached = load_target("196", fetch=offline)
    assert cached.schemes == target.schemes and cached.provenance.sha256 == sha
    online_but_cached = FetchOptions(index=options.index, cache_dir=options.cache_dir)
    assert load_target("P196", fetch=online_but_cached) == target  # no network needed


def test_checksum_mismatch_deletes_the_download(tmp_path, server, archive_bytes):
    server.files[ARCHIVE_PATH] = archive_bytes
    options = FetchOptions(index=str(_index(tmp_path, server, "0" * 64)),
                           cache_dir=tmp_path / "cache", progress=False)
    with pytest.raises(InputError, match="checksum mismatch.*partial file was deleted"):
        load_target("P196", fetch=options)
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_offline_without_cache_is_a_clear_error(tmp_path):
    options = FetchOptions(cache_dir=tmp_path / "cache", offline=True)
    with pytest.raises(InputError, match="P188 is not in the cache .* offline mode"):
        load_target("P188", fetch=options)


def test_result_page_link_and_url_form(tmp_path, server, archive_bytes):
    server.files[ARCHIVE_PATH] = archive_bytes
    server.files["/result/77/"] = (
        f'<html><a href="/uid-logs/{TITLE}-UID.tar.gz">raw</a>'
        f'<a href="{ARCHIVE_PATH}">data</a></html>').encode()
    options = FetchOptions(base_url=server.url + "/", cache_dir=tmp_path / "cache",
                           progress=False)
    target = load_target("P77", fetch=options)
    assert target.provenance.url == server.url + ARCHIVE_PATH
    assert any("sha256 recorded at first download" in n for n in target.provenance.notes)
    # the same result by its URL, now from the cache
    again = load_target(f"{server.url}/result/77/", fetch=options)
    assert again.provenance.result_id == 77
    assert [r for r in server.requests if r[0] == ARCHIVE_PATH] == [(ARCHIVE_PATH, None)]


def test_unknown_result_and_missing_index_entry(tmp_path, server):
    options = FetchOptions(base_url=server.url, cache_dir=tmp_path / "cache", progress=False)
    with pytest.raises(InputError, match="answered 404"):
        load_target("P5", fetch=options)
    index = tmp_path / "i.json"
    index.write_text('{"results": {}}')
    with pytest.raises(InputError, match="P5 is not in the archive index"):
        load_target("P5", fetch=FetchOptions(index=str(index), cache_dir=tmp_path / "c"))
    index.write_text('{"results": {"5": {"url": "x.tar.gz",\n "sha256": 3,}}}')
    with pytest.raises(InputError, match=r"i\.json:2:\d+: malformed"):
        load_target("P5", fetch=FetchOptions(index=str(index), cache_dir=tmp_path / "c"))


def test_environment_configures_and_flags_win(monkeypatch, tmp_path):
    monkeypatch.setenv("CALIBRATE_PANTHEON_URL", "http://example.invalid/")
    monkeypatch.setenv("CALIBRATE_CACHE_DIR", str(tmp_path / "envcache"))
    monkeypatch.setenv("CALIBRATE_OFFLINE", "1")
    options = FetchOptions.from_environment()
    assert options.base_url == "http://example.invalid/" and options.offline
    assert options.cache_dir == tmp_path / "envcache"
    flagged = FetchOptions.from_environment(base_url="http://other/", cache_dir=tmp_path / "f")
    assert flagged.base_url == "http://other/" and flagged.cache_dir == tmp_path / "f"


@pytest.mark.parametrize("spec, rid", [("P188", 188), ("188", 188), ("p7", 7),
                                       ("https://pantheon.stanford.edu/result/188/", 188)])
def test_result_id_forms(spec, rid):
    assert looks_like_result_id(spec) and parse_result_id(spec)[0] == rid


@pytest.mark.parametrize("spec", ["P", "P18x", "https://example.com/results/188", "nepal"])
def test_not_result_ids(spec):
    assert not looks_like_result_id(spec)
    with pytest.raises(InputError):
        parse_result_id(spec)
