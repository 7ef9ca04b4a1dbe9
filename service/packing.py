"""Code artifacts as bytes: packing a folder deterministically, and unpacking one safely.

**Packing** (`assaygate submit --code`, `assaygate pack`, a tenant worker hashing its operator's
folder) gives the same bytes for the same files wherever it runs: a `tar` (POSIX pax format) of
the entries sorted by path, every one owned by uid/gid 0 with no user or group name, modified at
time 0, mode 0644 or 0755 for files (executable or not) and 0755 for folders, then gzip at level
1 (code is small; a worker hashing its operator's folder should not wait on compression) with
no file name and time 0 in its header. Inside a git work tree the files are those of
`HEAD` (`git archive`, so untracked and uncommitted files are not in it), re-packed the same way;
elsewhere every file under the folder, skipping only `.git`. The digest is the SHA-256 of those
bytes. (The same zlib gives the same bytes: carry the digest `submit` printed to the deploy job,
or re-pack on the same image.)

**Unpacking** (a tenant worker, after it hashed the bytes again) writes into a new folder and
refuses, naming the entry, what `service.vetting` refuses (an absolute path, a `..` component, a
name too long, a duplicate, a link whose target leaves the folder alone or through a chain of
links, a hard link, a device or a fifo, more entries or more bytes than the limits). The
upload (`POST /v1/artifacts`) and `submit --code` apply the same check without writing
(`check_archive`), so the service never stores an archive its workers would refuse. Files are
0444 and folders 0555: the sandbox binds the folder read-only anyway, and a worker's cache of
unpacked artifacts (one folder per digest) is never written twice.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import shutil
import stat
import subprocess
import tarfile
import uuid
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from service.core.errors import ArtifactInvalid
from service.vetting import UnpackLimits, Vetting, refuse

__all__ = ["UnpackLimits", "Vetting", "check_archive", "unpack"]

#: The file name of a packed artifact (what `assaygate pack --out` writes by default).
SUFFIX = ".tar.gz"
_SKIPPED = frozenset({".git"})


@dataclass(frozen=True)
class Entry:
    """One entry of an archive before packing: a path relative to the root (`/`-separated).
    A file's bytes are `data`, or read from `source` as it is written (a folder of any size
    packs without holding it in memory)."""

    path: str
    kind: str  # "file", "dir" or "symlink"
    data: bytes = b""
    executable: bool = False
    target: str = ""  # a symlink's target
    source: Path | None = None
    size: int = 0


@dataclass(frozen=True)
class Packed:
    data: bytes
    sha256: str
    # "git" (HEAD of a work tree) or "folder" (every file under it).
    source: str
    entries: int
    # Only for "git": whether the work tree under the folder differs from HEAD (what is not
    # committed is not in the artifact).
    dirty: bool = False


# ---------------------------------------------------------------------------------- packing


def archive(entries: Iterable[Entry]) -> bytes:
    """The deterministic `tar.gz` of these entries (see the module)."""
    out = io.BytesIO()
    write_archive(entries, out)
    return out.getvalue()


class _Hashing(io.RawIOBase):
    """A sink that only hashes (and counts) what is written to it."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.hash.update(data)
        return len(data)


def write_archive(entries: Iterable[Entry], sink: IO[bytes] | io.RawIOBase) -> None:
    """Write the deterministic `tar.gz` of these entries to `sink`, file by file."""
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=sink, compresslevel=1, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for entry in sorted(entries, key=lambda e: e.path):
            info = tarfile.TarInfo(entry.path)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if entry.kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif entry.kind == "symlink":
                info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, entry.target
                tar.addfile(info)
            elif entry.source is not None:
                info.mode = 0o755 if entry.executable else 0o644
                info.size = entry.size
                with entry.source.open("rb") as data:
                    tar.addfile(info, data)
            else:
                info.mode = 0o755 if entry.executable else 0o644
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))


def folder_digest(root: Path) -> tuple[str, int]:
    """The digest `pack_folder` would give, streamed (nothing held in memory), and the entries:
    how a worker records its operator's folder."""
    sink = _Hashing()
    entries = list(folder_entries(root, lazy=True))
    write_archive(entries, sink)
    return sink.hash.hexdigest(), len(entries)


def folder_entries(root: Path, *, lazy: bool = False) -> Iterator[Entry]:
    """Every file, folder and symlink under `root` (not `.git`), never following a link;
    `lazy`: files are read when they are written into the archive, not now."""
    for here, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED)
        base = Path(here)
        for name in dirs:
            path = base / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                yield Entry(rel, "symlink", target=os.readlink(path))
            else:
                yield Entry(rel, "dir")
        for name in sorted(files):
            path = base / name
            rel = path.relative_to(root).as_posix()
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                yield Entry(rel, "symlink", target=os.readlink(path))
            elif stat.S_ISREG(mode) and lazy:
                size = path.lstat().st_size
                yield Entry(rel, "file", executable=bool(mode & 0o111), source=path, size=size)
            elif stat.S_ISREG(mode):
                yield Entry(rel, "file", path.read_bytes(), bool(mode & 0o111))


def _git(folder: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", "-C", str(folder), *args], capture_output=True, timeout=300, check=False
    )


def git_prefix(folder: Path) -> str | None:
    """The folder's path inside its git work tree (`""` at the top), or None outside one (or
    without git, or in a repository without a commit)."""
    try:
        inside = _git(folder, "rev-parse", "--is-inside-work-tree", "--show-prefix")
        head = _git(folder, "rev-parse", "--verify", "-q", "HEAD")
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = inside.stdout.decode().splitlines()
    if inside.returncode != 0 or head.returncode != 0 or not lines or lines[0] != "true":
        return None
    return lines[1] if len(lines) > 1 else ""


def git_entries(folder: Path) -> list[Entry]:
    """The entries of `HEAD` under the folder (`git archive`, run in the folder, names them
    relative to it)."""
    done = _git(folder, "archive", "--format=tar", "HEAD", "--", ".")
    if done.returncode != 0:
        raise ArtifactInvalid(
            f"git archive failed: {done.stderr.decode(errors='replace').strip()[:300]}",
            field="code",
        )
    entries: list[Entry] = []
    with tarfile.open(fileobj=io.BytesIO(done.stdout), mode="r:") as tar:
        for member in tar:
            name = member.name.rstrip("/")
            if not name or member.type == tarfile.XGLTYPE:
                continue
            if member.isdir():
                entries.append(Entry(name, "dir"))
            elif member.issym():
                entries.append(Entry(name, "symlink", target=member.linkname))
            elif member.isfile():
                extracted = tar.extractfile(member)
                data = extracted.read() if extracted is not None else b""
                entries.append(Entry(name, "file", data, bool(member.mode & 0o111)))
    return entries


def pack(folder: Path) -> Packed:
    """Pack a folder: `HEAD` of its git work tree when it is in one, else every file in it."""
    if not folder.is_dir():
        raise ArtifactInvalid(f"{folder} is not a folder", field="code")
    if git_prefix(folder) is None:
        entries = list(folder_entries(folder))
        data = archive(entries)
        return Packed(data, hashlib.sha256(data).hexdigest(), "folder", len(entries))
    entries = git_entries(folder)
    if not entries:
        raise ArtifactInvalid(
            f"HEAD has no committed file under {folder}: commit the code, or pack a folder "
            "outside a git work tree",
            field="code",
        )
    status = _git(folder, "status", "--porcelain", "--", ".")
    data = archive(entries)
    return Packed(
        data, hashlib.sha256(data).hexdigest(), "git", len(entries), bool(status.stdout.strip())
    )


def pack_folder(folder: Path) -> Packed:
    """Every file under the folder, git or not (a worker's operator folder: what runs is what is
    there, not what a commit says)."""
    entries = list(folder_entries(folder))
    data = archive(entries)
    return Packed(data, hashlib.sha256(data).hexdigest(), "folder", len(entries))


# -------------------------------------------------------------------------------- unpacking


_MAX_READ = 16 * 1024 * 1024


class _Inflated:
    """The archive's tar stream, inflated as tarfile reads (or seeks past) it, refused once it
    is longer than the files the limits allow could make it: a bomb hidden where no file size
    counts it (a pax or long-name header tarfile reads whole into memory, padding) stops
    there, before it is inflated."""

    def __init__(self, data: bytes, limits: UnpackLimits) -> None:
        self._gz = gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb")
        # Every file's bytes, a header block and a pax record per entry, and the end blocks.
        self._cap = limits.max_bytes + 2 * tarfile.RECORDSIZE * (limits.max_entries + 1)

    def _check(self) -> None:
        if self._gz.tell() > self._cap:
            raise refuse("(the tar stream)", f"more than {self._cap} bytes inflated")

    def read(self, size: int = -1) -> bytes:
        # tarfile reads a file's bytes in small chunks and a header whole: one large read is a
        # header claiming a size no real one has, refused before it is inflated into memory.
        if size < 0 or size > _MAX_READ:
            raise refuse("(the tar stream)", f"a header of more than {_MAX_READ} bytes")
        out = self._gz.read(size)
        self._check()
        return out

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET and offset > self._cap:
            raise refuse("(the tar stream)", f"more than {self._cap} bytes inflated")
        at = self._gz.seek(offset, whence)
        self._check()
        return at

    def tell(self) -> int:
        return self._gz.tell()

    def close(self) -> None:
        self._gz.close()


@contextlib.contextmanager
def _reading(data: bytes, limits: UnpackLimits) -> Iterator[tarfile.TarFile]:
    stream = _Inflated(data, limits)
    try:
        with tarfile.open(fileobj=stream, mode="r:") as tar:  # type: ignore[call-overload]
            yield tar
    finally:
        stream.close()


def _not_an_archive(exc: BaseException) -> ArtifactInvalid:
    return ArtifactInvalid(f"not a tar.gz archive that unpacks: {exc}", field="code")


def check_archive(data: bytes, limits: UnpackLimits) -> int:
    """Whether `unpack` would take these bytes, read through without writing anything: the
    entries, or `ArtifactInvalid` naming the entry and the rule (what `POST /v1/artifacts` and
    `assaygate submit --code` check before the bytes are stored)."""
    vetting = Vetting(limits)
    try:
        with _reading(data, limits) as tar:
            for member in tar:
                vetting.admit(member)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise _not_an_archive(exc) from None
    vetting.finish()
    return len(vetting.seen)


def unpack(data: bytes, dest: Path, limits: UnpackLimits) -> int:
    """Unpack a `tar.gz` into `dest` (which must not exist), read-only; the entries written.
    On any refusal nothing is left at `dest`."""
    dest.mkdir(mode=0o700)
    try:
        count = _unpack_into(data, dest, limits)
    except BaseException:
        remove_tree(dest)
        raise
    _seal(dest)
    return count


def _unpack_into(data: bytes, dest: Path, limits: UnpackLimits) -> int:
    vetting = Vetting(limits)
    try:
        with _reading(data, limits) as tar:
            for member in tar:
                name = vetting.admit(member)
                if member.issym():
                    continue
                path = dest / name
                # Parents come first in a packed archive; made here for one that omits them,
                # never through a link (links are made last).
                _make_parents(dest, name)
                if member.isdir():
                    path.mkdir(mode=0o700)
                    continue
                source = tar.extractfile(member)
                assert source is not None
                with path.open("xb") as out:
                    shutil.copyfileobj(source, out)
                path.chmod(0o555 if member.mode & 0o111 else 0o444)
    except FileExistsError as exc:
        raise refuse(str(exc.filename), "collides with another entry") from None
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise _not_an_archive(exc) from None
    # Links last, so nothing is ever written through one, and nothing is under one.
    for name, target in vetting.finish():
        if (dest / name).exists():
            raise refuse(name, "collides with another entry")
        _make_parents(dest, name)
        os.symlink(target, dest / name)
    return len(vetting.seen)


def _make_parents(dest: Path, name: str) -> None:
    here = dest
    for part in name.split("/")[:-1]:
        here = here / part
        if not here.exists():
            here.mkdir(mode=0o700)
        elif not here.is_dir():
            raise refuse(name, "a path through a file")


def _seal(root: Path) -> None:
    """Folders read-only (0555), bottom up; files were sealed as they were written."""
    for here, dirs, _files in os.walk(root, topdown=False):
        for name in dirs:
            path = Path(here) / name
            if not path.is_symlink():
                path.chmod(0o555)
    root.chmod(0o555)


def remove_tree(root: Path) -> None:
    """Remove an unpacked (read-only) folder."""
    if not root.exists() and not root.is_symlink():
        return
    for here, dirs, _files in os.walk(root):
        for name in dirs:
            path = Path(here) / name
            if not path.is_symlink():
                with contextlib.suppress(OSError):
                    path.chmod(0o700)
    with contextlib.suppress(OSError):
        root.chmod(0o700)
    shutil.rmtree(root, ignore_errors=True)


def materialise(data: bytes, sha256: str, cache: Path, limits: UnpackLimits) -> Path:
    """The folder `cache/<sha256>` holding the unpacked artifact, unpacked once per digest. The
    caller has checked that `data` hashes to `sha256` (a 64-hex name: never a path)."""
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise ArtifactInvalid(f"{sha256!r} is not a hex SHA-256", field="code")
    cache.mkdir(parents=True, exist_ok=True, mode=0o755)
    final = cache / sha256
    if final.is_dir() and not final.is_symlink():
        return final
    staging = cache / f".unpacking-{sha256[:16]}-{uuid.uuid4().hex[:8]}"
    unpack(data, staging, limits)
    try:
        os.rename(staging, final)
    except OSError:
        # Another process of this worker unpacked the same digest first: keep theirs.
        remove_tree(staging)
        if not final.is_dir():
            raise
    return final
