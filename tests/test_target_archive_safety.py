"""Hostile archives are refused whole, with a clear message, and nothing lands outside the cache."""

from __future__ import annotations

import os
import stat
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calibrate.cli import main
from calibrate.errors import InputError
from calibrate.service.settings import ServiceSettings
from calibrate.targets.archive import DEFAULT_MAX_BYTES, Limits, extract_archive, safe_member_path
from calibrate.targets.load import load_target
from calibrate.targets.result_id import FetchOptions
from pantheon_fixtures import ERAS, add_tar_member, write_data_dir

LIMIT = 64 * 1024
_name = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=12)


@st.composite
def hostile_member(draw):
    """(kind, member name, tar attributes, data) of one member an archive must not contain."""
    token = draw(_name)
    kind = draw(st.sampled_from(["absolute", "dotdot", "symlink", "hardlink", "device", "huge",
                                 "many"]))
    if kind == "absolute":
        return kind, "/tmp/calibrate-escape-" + token, {}, b"owned"
    if kind == "dotdot":
        prefix = draw(st.sampled_from(["../", "../../", "a/../../", "./../", "exp/../../../"]))
        return kind, prefix + "escape-" + token, {}, b"owned"
    if kind == "symlink":
        target = draw(st.sampled_from(["/etc/passwd", "../../outside-" + token,
                                       "../" * 6 + "tmp", "a/../../../x"]))
        return kind, "exp/link-" + token, {"type": tarfile.SYMTYPE, "linkname": target}, b""
    if kind == "hardlink":
        target = draw(st.sampled_from(["/etc/passwd", "../outside-" + token]))
        return kind, "exp/hard-" + token, {"type": tarfile.LNKTYPE, "linkname": target}, b""
    if kind == "device":
        kind_type = draw(st.sampled_from([tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE]))
        return kind, "exp/dev-" + token, {"type": kind_type, "devmajor": 1, "devminor": 3}, b""
    if kind == "huge":
        return kind, "exp/big_datalink_run1.log", {}, b"\0" * (LIMIT + 1)
    return kind, "exp/many", {}, b""


def _files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() or p.is_symlink()}


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hostile=hostile_member(), compression=st.sampled_from(["w:gz", "w:xz", "w"]),
       benign_first=st.booleans())
def test_hostile_tar_is_refused_and_nothing_written(tmp_path, hostile, compression, benign_first):
    kind, name, attrs, data = hostile
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    suffix = {"w:gz": ".tar.gz", "w:xz": ".tar.xz", "w": ".tar"}[compression]
    archive = work / "in" / f"2019-01-01T00-00-A-to-B-1-run{suffix}"
    archive.parent.mkdir()
    with tarfile.open(archive, compression) as tar:
        if benign_first:
            add_tar_member(tar, "exp/pantheon_metadata.json", b'{"cc_schemes": ["cubic"]}')
        if kind == "many":
            for i in range(5):
                add_tar_member(tar, f"exp/cubic_datalink_run{i}.log", b"1" * (LIMIT // 3))
        else:
            add_tar_member(tar, name, data, **attrs)
    before = _files_under(work)
    cache = work / "cache"
    with pytest.raises(InputError) as error:
        load_target(str(archive), fetch=FetchOptions(cache_dir=cache, max_extract_bytes=LIMIT))
    message = str(error.value)
    assert "refusing to extract" in message and "nothing was extracted" in message
    assert "\n" not in message
    if kind != "many":
        assert repr(name) in message
    assert _files_under(work) == before  # nothing in the cache, nothing beside it
    # nor where an escaping member would have landed
    root = cache / "extracted" / "x"
    if kind in ("absolute", "dotdot"):
        assert not os.path.lexists(os.path.normpath(os.path.join(root, name)))


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["absolute", "dotdot", "symlink", "device", "huge"]), token=_name)
def test_hostile_zip_is_refused(tmp_path, kind, token):
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    archive = work / "r.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("exp/pantheon_metadata.json", '{"cc_schemes": []}')
        if kind == "absolute":
            info, data = zipfile.ZipInfo("/tmp/zip-escape-" + token), b"x"
        elif kind == "dotdot":
            info, data = zipfile.ZipInfo("exp/../../zip-escape-" + token), b"x"
        elif kind == "symlink":
            info, data = zipfile.ZipInfo("exp/link-" + token), b"../../../etc/passwd"
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
        elif kind == "device":
            info, data = zipfile.ZipInfo("exp/dev-" + token), b""
            info.external_attr = (stat.S_IFCHR | 0o600) << 16
        else:
            info, data = zipfile.ZipInfo("exp/huge-" + token), b"\0" * (LIMIT + 1)
        zf.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    before = _files_under(work)
    with pytest.raises(InputError, match="refusing to extract"):
        load_target(str(archive), fetch=FetchOptions(cache_dir=work / "cache",
                                                     max_extract_bytes=LIMIT))
    assert _files_under(work) == before


def test_member_lying_about_its_size_is_refused(tmp_path):
    archive = tmp_path / "lie.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("exp/cubic_datalink_run1.log", b"0 + 1500 1\n" * 1000)
    data = bytearray(archive.read_bytes())
    # shrink the declared size in the central directory (offset 24 of the 'PK\1\2' record)
    central = data.rfind(b"PK\x01\x02")
    data[central + 24:central + 28] = (10).to_bytes(4, "little")
    archive.write_bytes(bytes(data))
    with pytest.raises(InputError):
        extract_archive(archive, tmp_path / "out", limits=Limits(max_bytes=LIMIT))
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["lie.zip"]


def test_internal_links_are_skipped_not_followed(tmp_path):
    folder = tmp_path / "src" / "exp"
    write_data_dir(folder, ERAS["2018"], runs=1, labels=("cubic",))
    archive = tmp_path / "ok.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="exp")
        add_tar_member(tar, "exp/alias_datalink_run1.log", b"", type=tarfile.SYMTYPE,
                       linkname="cubic_datalink_run1.log")
    result = extract_archive(archive, tmp_path / "out")
    assert result.skipped_links == ("exp/alias_datalink_run1.log",)
    assert not any(p.is_symlink() for p in (tmp_path / "out").rglob("*"))
    target = load_target(str(archive), fetch=FetchOptions(cache_dir=tmp_path / "cache"))
    assert target.scheme_names == ["cubic"]


def test_truncated_archive_says_to_fetch_again(tmp_path):
    folder = tmp_path / "src"
    write_data_dir(folder, ERAS["2018"], runs=1)
    archive = tmp_path / "t.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="exp")
    archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    with pytest.raises(InputError, match="not a readable tar archive.*fetch it again"):
        load_target(str(archive), fetch=FetchOptions(cache_dir=tmp_path / "cache"))
    assert not list((tmp_path / "cache").rglob("*_run1.log"))


@pytest.mark.parametrize("name, safe", [
    ("a/b.log", "a/b.log"), ("./a//b.log", "a/b.log"), ("/etc/passwd", None), ("../x", None),
    ("a/../../x", None), ("a\\..\\x", None), ("C:\\x", None), ("a\x00b", None),
])
def test_safe_member_path(name, safe):
    assert safe_member_path(name) == safe


# ----------------------------------------------------------------------------------------------
# Nothing of a refused archive stays; every refusal is one line

#: the expansion limit of the tests below (the default, `DEFAULT_MAX_BYTES`, is 1 GiB)
SMALL_LIMIT = 10 * 1024**2


def _tar_gz(path: Path, members: list[tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members:
            add_tar_member(tar, name, data)
    return path


def _refusal(archive: Path, cache: Path, limit: int = SMALL_LIMIT) -> str:
    with pytest.raises(InputError) as error:
        load_target(str(archive), fetch=FetchOptions(cache_dir=cache, max_extract_bytes=limit))
    message = str(error.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize("bomb", ["one member past the limit", "members adding up past the limit",
                                  "extracted, then refused by the reader"])
def test_a_refused_archive_leaves_nothing_in_the_cache(tmp_path, bomb):
    """Small archives that expand past the limit (refused while extracting), or within it but
    holding no result (refused after extracting): the cache keeps no file of either."""
    archive = tmp_path / "2019-01-01T00-00-A-to-B-1-run.tar.gz"
    if bomb == "one member past the limit":  # ~20 kB that declares 2x the limit
        _tar_gz(archive, [("exp/cubic_datalink_run1.log", b"\0" * (2 * SMALL_LIMIT))])
    elif bomb == "members adding up past the limit":  # two members are written before the third
        _tar_gz(archive, [(f"exp/cubic_datalink_run{i}.log", b"\0" * (SMALL_LIMIT // 3 + 1))
                          for i in (1, 2, 3)])
    else:
        _tar_gz(archive, [("exp/cubic_datalink_run1.log", b"not a datalink line\n" * 200_000)])
    assert archive.stat().st_size < 1024**2
    cache = tmp_path / "cache"
    message = _refusal(archive, cache)
    if bomb == "extracted, then refused by the reader":
        assert "no valid run of any scheme" in message
    else:
        assert f"past the size limit of {SMALL_LIMIT} bytes" in message
    assert [p for p in cache.rglob("*") if not p.is_dir()] == []
    assert [p.name for p in cache.rglob("*")] in ([], ["extracted"])


def test_a_member_1000_directories_deep_is_refused_in_one_line(tmp_path):
    archive = _tar_gz(tmp_path / "deep.tar.gz", [("a/" * 1000 + "pantheon_perf.json", b"{}")])
    message = _refusal(archive, tmp_path / "cache")
    assert "is more than 16 directories deep" in message and len(message) < 600


def test_a_newline_in_a_member_name_is_one_line_in_the_cli(tmp_path, capsys):
    archive = _tar_gz(tmp_path / "nl.tar.gz", [("exp\nline/pantheon_perf.json", b"{")])
    assert "member 'exp\\nline/pantheon_perf.json' has a control character in its name" in \
        _refusal(archive, tmp_path / "cache")
    assert main(["target", "show", str(archive), "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "control character" in err, err


def test_zip_members_without_file_type_bits_are_regular_files(tmp_path):
    """Python's zipfile.writestr(name, data) writes no file-type bits: a regular file."""
    folder = tmp_path / "src"
    write_data_dir(folder, ERAS["2018"], runs=1, labels=("cubic",))
    archive = tmp_path / "plain.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.iterdir()):
            zf.writestr(f"exp/{path.name}", path.read_bytes())
    assert all(stat.S_IFMT(info.external_attr >> 16) == 0 for info in zipfile.ZipFile(archive).infolist())
    assert load_target(str(archive), fetch=FetchOptions(cache_dir=tmp_path / "cache")).scheme_names == ["cubic"]


def test_the_expansion_limit_is_what_a_pantheon_archive_needs():
    assert DEFAULT_MAX_BYTES == 1024**3
    assert FetchOptions().max_extract_bytes == ServiceSettings().max_extract_bytes == DEFAULT_MAX_BYTES
