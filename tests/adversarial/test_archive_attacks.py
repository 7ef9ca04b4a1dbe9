"""Attacks through the code a team ships: each archive attack is refused at the upload's check
and by the worker's unpack with the same words (one check serves both), and nothing is written
(tests/api/test_artifacts.py sends each through the API's upload too); an operator's folder is
known by its content."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from service.core.errors import ArtifactInvalid
from service.packing import Entry, UnpackLimits, archive, check_archive, unpack
from worker.code import operator_digest

#: What a bomb inflates to, and the caps the tests hold it to (a worker's default is 512 MiB).
BOMB_BYTES = 32 * 1024 * 1024
LIMITS = UnpackLimits(max_bytes=16 * 1024 * 1024, max_entries=100)


def tar_gz(build: Callable[[tarfile.TarFile], None], level: int = 1) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        build(tar)
    return gzip.compress(raw.getvalue(), compresslevel=level)


def member(tar: tarfile.TarFile, name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    info.size = 1 if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(b"x") if kind == tarfile.REGTYPE else None)


def zeros(tar: tarfile.TarFile) -> None:
    info = tarfile.TarInfo("agent/weights.bin")
    info.size = BOMB_BYTES
    tar.addfile(info, io.BytesIO(bytes(BOMB_BYTES)))


def pax_bomb() -> bytes:
    """A pax header claiming 64 MiB: tarfile would read it whole into memory, and no file's
    size counts it."""
    header = tarfile.TarInfo("././@PaxHeader")
    header.type, header.size = tarfile.XHDTYPE, 64 * 1024 * 1024
    raw = header.tobuf(tarfile.USTAR_FORMAT) + bytes(header.size) + bytes(2 * tarfile.BLOCKSIZE)
    return gzip.compress(raw, compresslevel=9)


def link_chain(tar: tarfile.TarFile) -> None:
    """Each link alone stays inside (`d/up` is the root, `out` names `d`); followed, `out` is
    the root's parent: the worker's whole cache of other tenants' code."""
    member(tar, "d", tarfile.DIRTYPE)
    member(tar, "d/up", tarfile.SYMTYPE, "..")
    member(tar, "out", tarfile.SYMTYPE, "d/up/..")


def many(tar: tarfile.TarFile) -> None:
    for i in range(LIMITS.max_entries + 1):
        member(tar, f"f{i}")


#: Each attack, and the rule its refusal names.
ATTACKS: dict[str, tuple[Callable[[], bytes], str]] = {
    "a path up and out": (lambda: tar_gz(lambda t: member(t, "../x")), "`..` component"),
    "an absolute path": (lambda: tar_gz(lambda t: member(t, "/etc/cron.d/x")), "absolute path"),
    "a symlink to /etc": (
        lambda: tar_gz(lambda t: member(t, "etc", tarfile.SYMTYPE, "/etc")),
        "leaves the folder",
    ),
    "a symlink chain out": (lambda: tar_gz(link_chain), "leaves the folder through a link"),
    "a 300-byte entry name": (
        lambda: tar_gz(lambda t: member(t, "agent/" + "a" * 300)),
        "a name of more than 255 bytes",
    ),
    "a hard link out": (
        lambda: tar_gz(lambda t: member(t, "passwd", tarfile.LNKTYPE, "../../etc/passwd")),
        "hard link",
    ),
    "a device node": (
        lambda: tar_gz(lambda t: member(t, "disk", tarfile.BLKTYPE)),
        "device",
    ),
    "a gzip bomb": (lambda: tar_gz(zeros, level=9), f"more than {LIMITS.max_bytes} bytes"),
    "too many entries": (lambda: tar_gz(many), f"more than {LIMITS.max_entries} entries"),
    "a bomb in a pax header": (pax_bomb, "a header of more than"),
    "not an archive": (lambda: b"\x1f\x8b but not gzip", "not a tar.gz"),
}


@pytest.fixture(scope="module")
def archives() -> dict[str, bytes]:
    return {name: build() for name, (build, _) in ATTACKS.items()}


def test_a_gzip_bomb_is_small_on_the_wire(archives: dict[str, bytes]) -> None:
    assert len(archives["a gzip bomb"]) * 500 < BOMB_BYTES


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_each_attack_is_refused_before_upload_and_at_unpack_with_the_same_words(
    archives: dict[str, bytes], attack: str, tmp_path: Path
) -> None:
    rule = ATTACKS[attack][1]
    with pytest.raises(ArtifactInvalid, match=rule) as checked:
        check_archive(archives[attack], LIMITS)
    with pytest.raises(ArtifactInvalid, match=rule) as unpacked:
        unpack(archives[attack], tmp_path / "out", LIMITS)
    assert checked.value.message == unpacked.value.message
    assert list(tmp_path.iterdir()) == []


def test_an_archive_a_worker_unpacks_passes_the_check_with_its_entry_count(tmp_path: Path) -> None:
    good = tar_gz(lambda t: member(t, "agent.py"))
    assert check_archive(good, LIMITS) == 1 == unpack(good, tmp_path / "out", LIMITS)


def test_links_that_chain_but_stay_inside_unpack(tmp_path: Path) -> None:
    def inside(tar: tarfile.TarFile) -> None:
        member(tar, "agent.py")
        member(tar, "d", tarfile.DIRTYPE)
        member(tar, "d/up", tarfile.SYMTYPE, "..")
        member(tar, "again", tarfile.SYMTYPE, "d/up/d/up/agent.py")

    good = tar_gz(inside)
    assert check_archive(good, LIMITS) == 4 == unpack(good, tmp_path / "out", LIMITS)
    assert (tmp_path / "out" / "again").read_bytes() == b"x"


def test_a_loop_of_links_is_refused_before_upload(tmp_path: Path) -> None:
    def loop(tar: tarfile.TarFile) -> None:
        member(tar, "a", tarfile.SYMTYPE, "b/x")
        member(tar, "b", tarfile.SYMTYPE, "a/y")

    with pytest.raises(ArtifactInvalid, match="a chain of more than 40 links"):
        check_archive(tar_gz(loop), LIMITS)


def test_an_operator_folder_rewritten_to_the_same_size_with_its_mtime_put_back_is_a_new_digest(
    tmp_path: Path,
) -> None:
    """The folder a tenant worker runs when a candidate names no artifact: the dossier signs its
    digest as `executed`, so new code must never pass under the old one."""
    agent = tmp_path / "agent.py"
    agent.write_text("AMOUNT = 10\n")
    before = operator_digest(tmp_path)
    stat = agent.stat()
    agent.write_text("AMOUNT = 99\n")
    os.utime(agent, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert agent.stat().st_size == stat.st_size
    assert operator_digest(tmp_path) != before == pack_folder_digest(tmp_path, "AMOUNT = 10\n")


def pack_folder_digest(folder: Path, agent: str) -> str:
    """The digest `assaygate pack` gives a folder holding only this agent."""
    return hashlib.sha256(archive([Entry("agent.py", "file", agent.encode())])).hexdigest()
