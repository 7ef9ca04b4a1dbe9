"""Packing is deterministic (the same files give the same digest wherever they are packed), and
unpacking refuses every archive that would write outside its folder or past its limits."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from service.core.errors import ArtifactInvalid
from service.packing import (
    Entry,
    UnpackLimits,
    archive,
    check_archive,
    materialise,
    pack,
    pack_folder,
    remove_tree,
    unpack,
)


def tree(root: Path) -> Path:
    (root / "agent" / "deep").mkdir(parents=True)
    (root / "agent" / "__init__.py").write_text("")
    (root / "agent" / "run.py").write_text("def run(task, tools):\n    pass\n")
    (root / "agent" / "deep" / "tool.sh").write_text("#!/bin/sh\n")
    (root / "agent" / "deep" / "tool.sh").chmod(0o700)
    (root / "README").write_text("hello\n")
    return root


def git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=ci@example.com", "-c", "user.name=ci", *args],
        cwd=root,
        check=True,
        capture_output=True,
    )


def test_the_same_files_pack_to_the_same_bytes_whatever_their_times_owners_and_order(
    tmp_path: Path,
) -> None:
    first = pack(tree(tmp_path / "one")).data
    second_root = tree(tmp_path / "two")
    os.utime(second_root / "README", (1, 1))
    (second_root / "agent" / "deep" / "tool.sh").chmod(0o755)  # another exec bit: same class
    (second_root / "agent" / "run.py").chmod(0o600)
    assert pack(second_root).data == first
    with tarfile.open(fileobj=io.BytesIO(first), mode="r:gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    modes = {m.name: m.mode for m in members}
    assert modes["agent/deep/tool.sh"] == 0o755 and modes["agent/run.py"] == 0o644
    assert first[4:8] == b"\0\0\0\0" and not first[3] & 0x08  # gzip: time 0, no file name


def test_a_changed_byte_changes_the_digest(tmp_path: Path) -> None:
    root = tree(tmp_path / "code")
    before = pack(root).sha256
    (root / "agent" / "run.py").write_text("def run(task, tools):\n    pass \n")
    assert pack(root).sha256 != before


def test_inside_a_git_work_tree_the_artifact_is_head_not_what_is_lying_around(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    code = tree(repo / "service")
    (repo / "elsewhere.txt").write_text("not under the folder\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "one")
    committed = pack(code)
    assert committed.source == "git" and not committed.dirty
    # A git archive of HEAD packs exactly as the same folder outside git does.
    assert committed.sha256 == pack_folder(tree(tmp_path / "plain")).sha256
    (code / "untracked.py").write_text("print('not committed')\n")
    (code / "README").write_text("edited, not committed\n")
    again = pack(code)
    assert again.sha256 == committed.sha256 and again.dirty


def symlink_entries(target: str, name: str = "link") -> list[Entry]:
    return [Entry("a", "dir"), Entry(f"a/{name}", "symlink", target=target)]


def raw_archive(add: Callable[[tarfile.TarFile], None]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        add(tar)
    return gzip.compress(raw.getvalue())


def file_member(tar: tarfile.TarFile, name: str, data: bytes = b"x") -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def hard_link(tar: tarfile.TarFile) -> None:
    file_member(tar, "a")
    info = tarfile.TarInfo("b")
    info.type, info.linkname = tarfile.LNKTYPE, "a"
    tar.addfile(info)


def fifo(tar: tarfile.TarFile) -> None:
    info = tarfile.TarInfo("pipe")
    info.type = tarfile.FIFOTYPE
    tar.addfile(info)


def duplicate(tar: tarfile.TarFile) -> None:
    file_member(tar, "a", b"first")
    file_member(tar, "./a", b"second")


def through_link(tar: tarfile.TarFile) -> None:
    info = tarfile.TarInfo("up")
    info.type, info.linkname = tarfile.SYMTYPE, "."
    tar.addfile(info)
    file_member(tar, "up/x")


ATTACKS: dict[str, tuple[bytes, str]] = {
    "absolute path": (raw_archive(lambda t: file_member(t, "/etc/evil")), "absolute path"),
    "dot-dot": (raw_archive(lambda t: file_member(t, "a/../../evil")), "`..` component"),
    "absolute link": (archive(symlink_entries("/etc/passwd")), "leaves the folder"),
    "escaping link": (archive(symlink_entries("../../outside")), "leaves the folder"),
    "hard link": (raw_archive(hard_link), "hard link"),
    "fifo": (raw_archive(fifo), "fifo"),
    "duplicate": (raw_archive(duplicate), "duplicate"),
    "path through a link": (raw_archive(through_link), "through the link"),
    "not an archive": (b"this is not gzip", "not a tar.gz"),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_an_archive_that_would_escape_its_folder_is_refused_and_leaves_nothing(
    tmp_path: Path, attack: str
) -> None:
    data, rule = ATTACKS[attack]
    with pytest.raises(ArtifactInvalid, match=rule):
        check_archive(data, UnpackLimits())  # what the upload checks, writing nothing
    with pytest.raises(ArtifactInvalid, match=rule) as refused:
        unpack(data, tmp_path / "out", UnpackLimits())
    assert refused.value.field == "code"
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_entry_and_size_caps_hold(tmp_path: Path) -> None:
    many = archive([Entry(f"f{i}", "file", b"x") for i in range(5)])
    with pytest.raises(ArtifactInvalid, match="more than 4 entries"):
        unpack(many, tmp_path / "a", UnpackLimits(max_entries=4))
    big = archive([Entry("big", "file", b"x" * 2000)])
    with pytest.raises(ArtifactInvalid, match="more than 1000 bytes"):
        unpack(big, tmp_path / "b", UnpackLimits(max_bytes=1000))


def test_an_unpacked_artifact_is_read_only_and_cached_once_per_digest(tmp_path: Path) -> None:
    packed = pack(tree(tmp_path / "code"))
    cache = tmp_path / "cache"
    first = materialise(packed.data, packed.sha256, cache, UnpackLimits())
    assert first == cache / packed.sha256
    assert (first / "agent" / "run.py").read_text().startswith("def run")
    assert (first / "agent" / "run.py").stat().st_mode & 0o777 == 0o444
    assert (first / "agent" / "deep" / "tool.sh").stat().st_mode & 0o777 == 0o555
    assert (first / "agent").stat().st_mode & 0o777 == 0o555
    assert materialise(packed.data, packed.sha256, cache, UnpackLimits()) == first
    assert [p.name for p in cache.iterdir()] == [packed.sha256]  # no staging left behind
    with pytest.raises(ArtifactInvalid, match="not a hex SHA-256"):
        materialise(packed.data, "../" + packed.sha256[3:], cache, UnpackLimits())
    remove_tree(first)
    assert not first.exists()


def test_a_link_inside_the_folder_is_kept(tmp_path: Path) -> None:
    data = archive([*symlink_entries("../b"), Entry("b", "file", b"data")])
    unpack(data, tmp_path / "out", UnpackLimits())
    assert (tmp_path / "out" / "a" / "link").read_bytes() == b"data"
