"""Pantheon result archives: their safe extraction, and reading one into a Target.

`read_archive` extracts an archive once into the cache (named by its sha256) and reads the data
directory inside it (`calibrate.targets.datadir`), with the archive's name, date and checksum as
provenance.

Safe extraction of archives that come from the internet:

An archive is read in one streaming pass and rejected as a whole, before anything outside a fresh
temporary directory is touched, if any member has an absolute path or a `..` component, a
control character in its name or more than `MAX_DEPTH` levels, is a link pointing outside the
archive, is a device file or FIFO, or if the members expand past a size or count limit.  A zip
member without file-type bits (Python's `zipfile.writestr` writes none) is a regular file.
Links inside the archive are not needed by any Pantheon reader and are skipped.  Only the members
the caller wants are written; the temporary directory is renamed into place
only once everything passed, so a rejected archive leaves nothing behind; and an archive whose
extraction is then refused by the reader (`read_archive`) has its extraction removed, so the
cache holds only archives that were read.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from calibrate.errors import InputError
from calibrate.targets.datadir import METADATA, PERF, parse_title, read_data_dir, wanted_member
from calibrate.targets.model import Provenance, Target

ARCHIVE_SUFFIXES = (".tar.xz", ".tar.gz", ".tar.bz2", ".tgz", ".txz", ".tar", ".zip")
#: the expanded size of an archive's members, all together: Pantheon's data archives (without
#: the raw tunnel logs, which are a separate archive) expand to a few hundred MB at most; past
#: 1 GiB an archive is more likely a decompression bomb than a result.  The CLI's
#: --max-extract-bytes and `calibrate serve --max-extract-bytes` change it.
DEFAULT_MAX_BYTES = 1024**3
DEFAULT_MAX_MEMBERS = 200_000
#: the most path components a member may have: a Pantheon archive holds one directory of files
MAX_DEPTH = 16
_CHUNK = 1024 * 1024


def is_archive_name(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


@dataclass(frozen=True)
class Limits:
    max_bytes: int = DEFAULT_MAX_BYTES  # total uncompressed size of all members
    max_members: int = DEFAULT_MAX_MEMBERS


@dataclass(frozen=True)
class Extracted:
    root: Path
    files: tuple[str, ...]  # members written, relative to root
    skipped_links: tuple[str, ...]  # in-archive links, not followed
    total_bytes: int  # uncompressed size of all members


class _Rejected(InputError):
    pass


def _reject(archive: Path, member: str, why: str) -> _Rejected:
    return _Rejected(f"{archive}: refusing to extract: member {member!r} {why}; the archive is "
                     "not a plain Pantheon result (nothing was extracted)")


def safe_member_path(name: str) -> str | None:
    """The normalized relative path of an archive member, or None if it must be refused."""
    if "\x00" in name:
        return None
    unified = name.replace("\\", "/")
    if unified.startswith("/") or (len(unified) > 1 and unified[1] == ":"):
        return None
    parts = [p for p in unified.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return None
    return "/".join(parts)


def _link_escapes(member_path: str, target: str, *, relative_to_member: bool) -> bool:
    """Whether a link target resolves outside the archive root."""
    target = target.replace("\\", "/")
    if target.startswith("/") or (len(target) > 1 and target[1] == ":"):
        return True
    base = posixpath.dirname(member_path) if relative_to_member else ""
    resolved = posixpath.normpath(posixpath.join("/root", base, target))
    return not (resolved == "/root" or resolved.startswith("/root/"))


def extract_archive(archive: Path, dest: Path, *, want: Callable[[str], bool] | None = None,
                    limits: Limits = Limits()) -> Extracted:
    """Extract the wanted members of `archive` into the new directory `dest` (which must not
    exist; its parent is where the temporary directory goes).  Raises InputError naming the
    first hostile member, or an unreadable archive."""
    archive = Path(archive)
    dest = Path(dest)
    if dest.exists():
        raise InputError(f"{dest} already exists; remove it to extract {archive.name} again")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".extract-", dir=dest.parent))
    try:
        if archive.name.lower().endswith(".zip"):
            result = _extract_zip(archive, tmp, want, limits)
        else:
            result = _extract_tar(archive, tmp, want, limits)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Extracted(dest, *result)


def _write_member(tmp: Path, rel: str, chunks, archive: Path, declared: int,
                  budget: int) -> int:
    target = tmp.joinpath(*rel.split("/"))
    target.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with open(target, "wb") as out:
        for chunk in chunks:
            written += len(chunk)
            if written > declared or written > budget:
                raise _reject(archive, rel, "holds more data than its header declares "
                                            "(or than the size limit)")
            out.write(chunk)
    return written


def _member_path(archive: Path, name: str) -> str:
    """The member's safe relative path; an absolute, climbing, too deep one, or one with a
    control character, rejects the archive."""
    shown = name if len(name) <= 200 else name[:200] + "..."
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise _reject(archive, shown, "has a control character in its name")
    rel = safe_member_path(name)
    if rel is None:
        raise _reject(archive, shown, "has an absolute path or a '..' component")
    if rel.count("/") >= MAX_DEPTH:
        raise _reject(archive, shown, f"is more than {MAX_DEPTH} directories deep")
    return rel


def _add_size(archive: Path, name: str, total: int, size: int, limits: Limits) -> int:
    """Bytes so far plus this member's; past the limit rejects the archive (a zip bomb)."""
    total += size
    if total > limits.max_bytes:
        raise _reject(archive, name, f"takes the archive past the size limit of "
                                     f"{limits.max_bytes} bytes")
    return total


def _iter_chunks(fileobj):
    while chunk := fileobj.read(_CHUNK):
        yield chunk


def _extract_tar(archive: Path, tmp: Path, want, limits: Limits):
    files: list[str] = []
    links: list[str] = []
    total = 0
    count = 0
    try:
        # "r|*": a stream, so a hostile archive cannot make us seek; any compression.
        with tarfile.open(archive, mode="r|*") as tar:
            for member in tar:
                count += 1
                if count > limits.max_members:
                    raise _reject(archive, member.name, f"is past the limit of "
                                                        f"{limits.max_members} members")
                rel = _member_path(archive, member.name)
                if member.issym() or member.islnk():
                    if _link_escapes(rel, member.linkname, relative_to_member=member.issym()):
                        raise _reject(archive, member.name, f"is a link to {member.linkname!r}, "
                                                            "outside the archive")
                    links.append(rel)
                    continue
                if member.isdir():
                    continue
                if not member.isreg():
                    raise _reject(archive, member.name, "is a device file, FIFO or other special "
                                                        "file")
                total = _add_size(archive, member.name, total, member.size, limits)
                if rel and (want is None or want(rel)):
                    src = tar.extractfile(member)
                    assert src is not None
                    _write_member(tmp, rel, _iter_chunks(src), archive, member.size,
                                  limits.max_bytes)
                    files.append(rel)
    except (tarfile.TarError, EOFError, OSError, ValueError) as error:
        if isinstance(error, InputError):
            raise
        raise InputError(f"{archive}: not a readable tar archive ({error}); the download may "
                         "be incomplete: delete it and fetch it again") from None
    return tuple(files), tuple(links), total


def _extract_zip(archive: Path, tmp: Path, want, limits: Limits):
    files: list[str] = []
    links: list[str] = []
    total = 0
    try:
        with zipfile.ZipFile(archive) as zf:
            infos = zf.infolist()
            if len(infos) > limits.max_members:
                raise _reject(archive, infos[limits.max_members].filename,
                              f"is past the limit of {limits.max_members} members")
            for info in infos:  # check every header before writing anything
                rel = _member_path(archive, info.filename)
                total = _add_size(archive, info.filename, total, info.file_size, limits)
                mode = info.external_attr >> 16
                if stat.S_ISLNK(mode):
                    target = zf.read(info)[:4096].decode("utf-8", "replace")
                    if _link_escapes(rel, target, relative_to_member=True):
                        raise _reject(archive, info.filename, f"is a link to {target!r}, "
                                                              "outside the archive")
                elif stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                    raise _reject(archive, info.filename, "is a device file, FIFO or other "
                                                          "special file")
            for info in infos:
                rel = safe_member_path(info.filename) or ""
                if stat.S_ISLNK(info.external_attr >> 16):
                    links.append(rel)
                    continue
                if info.is_dir() or not rel or (want is not None and not want(rel)):
                    continue
                with zf.open(info) as src:
                    _write_member(tmp, rel, _iter_chunks(src), archive, info.file_size,
                                  limits.max_bytes)
                files.append(rel)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError,
            NotImplementedError) as error:
        if isinstance(error, InputError):
            raise
        raise InputError(f"{archive}: not a readable zip archive ({error}); the download may be "
                         "incomplete: delete it and fetch it again") from None
    return tuple(files), tuple(links), total


# ----------------------------------------------------------------------------------------------
# Reading an archive


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def read_archive(path: Path | str, cache_dir: Path, max_extract_bytes: int = DEFAULT_MAX_BYTES
                 ) -> Target:
    """Extract (once, into `cache_dir`/extracted) and read a Pantheon result archive of any era;
    refused whole if it expands past `max_extract_bytes` (`extract_archive`)."""
    path = Path(path)
    checksum = sha256_file(path)
    dest = Path(cache_dir) / "extracted" / checksum[:32]
    if not dest.is_dir():
        try:
            extract_archive(path, dest, want=wanted_member,
                            limits=Limits(max_bytes=max_extract_bytes))
        except OSError as error:
            if not dest.is_dir():  # else another process extracted it first: use theirs
                raise InputError(f"cannot extract {path.name} into {dest.parent}: "
                                 f"{error.strerror or error}; check the cache directory "
                                 "(--cache-dir)") from None
    title = parse_title(path.name)
    prov = Provenance(kind="archive", source=str(path), name=title.name, date=title.date,
                      path_description=title.path_description, archive_name=path.name,
                      sha256=checksum)
    try:
        return read_data_dir(_find_data_dir(dest, path), provenance=prov)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)  # the cache keeps only archives that were read
        raise


def _find_data_dir(root: Path, archive: Path) -> Path:
    candidates = sorted({p.parent for p in root.rglob("*") if p.is_file()})
    if not candidates:
        raise InputError(f"{archive}: no Pantheon results inside (no {PERF}, {METADATA}, "
                         "datalink or stats logs); is it the data archive and not the UID "
                         "(raw tunnel log) archive?")
    if len(candidates) > 1:
        shown = ", ".join(str(c.relative_to(root)) or "." for c in candidates[:5])
        raise InputError(f"{archive}: holds several result directories ({shown}); extract it and "
                         "pass the one you mean")
    return candidates[0]
