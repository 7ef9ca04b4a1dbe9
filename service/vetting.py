"""The one check of a code archive's entries, which the upload (`service.packing.check_archive`,
nothing written) and the worker's unpack (`service.packing.unpack`) both apply, entry by entry
and then as a whole: an archive the service stored is one a worker unpacks, and one a worker
would refuse is refused at the upload with the same words.

An entry is refused, named: an empty name, a NUL or a backslash; an absolute path; a `..`
component; a name part longer than the filesystem takes (255 bytes) or a path or link target
longer than 1024 bytes; a name the filesystem cannot encode; a duplicate; a path through a file
or through a link; a link whose target leaves the folder, alone or through a chain of the
archive's links as the kernel would follow them (or a chain longer than the kernel follows); a
hard link, a device or a fifo; more entries or more bytes than the limits.
"""

from __future__ import annotations

import os
import posixpath
import tarfile
from dataclasses import dataclass

from service.core.errors import ArtifactInvalid


@dataclass(frozen=True)
class UnpackLimits:
    max_bytes: int = 512 * 1024 * 1024
    max_entries: int = 20_000


def refuse(name: str, rule: str) -> ArtifactInvalid:
    return ArtifactInvalid(f"archive entry {name!r}: {rule}", field="code")


#: What a worker's filesystem takes (NAME_MAX), and a whole path or link target well inside
#: PATH_MAX once the cache folder is in front of it: longer is refused at upload, not at unpack.
MAX_NAME_PART = 255
MAX_PATH = 1024
#: The links a path may pass through before the kernel gives up (Linux's ELOOP is 40).
MAX_LINK_HOPS = 40


def _encoded(name: str, what: str) -> bytes:
    try:
        return os.fsencode(name)
    except UnicodeError:
        raise refuse(name, f"{what} the filesystem cannot encode") from None


def _safe_name(name: str) -> str:
    """The entry's path relative to the root, or refused."""
    if not name or "\x00" in name or "\\" in name:
        raise refuse(name, "an empty name, a NUL or a backslash")
    if name.startswith("/"):
        raise refuse(name, "an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts:
        raise refuse(name, "names the root itself")
    if ".." in parts:
        raise refuse(name, "a `..` component leaves the folder")
    if len(_encoded(name, "a name")) > MAX_PATH:
        raise refuse(name[:64] + "…", f"a path of more than {MAX_PATH} bytes")
    if any(len(_encoded(p, "a name")) > MAX_NAME_PART for p in parts):
        raise refuse(name[:64] + "…", f"a name of more than {MAX_NAME_PART} bytes")
    return "/".join(parts)


def _link_inside(name: str, target: str) -> bool:
    if not target or target.startswith("/"):
        return False
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    return joined != ".." and not joined.startswith("../") and not joined.startswith("/")


def _resolve(links: dict[str, str], name: str, hops: int = 0) -> list[str] | None:
    """Where the link `name` leads as the kernel would walk it, following every link of the
    archive on the way (a `..` after a link climbs from where the link led, not from where it
    lies): its parts under the root, or None where the walk leaves the root."""
    if hops > MAX_LINK_HOPS:
        raise refuse(name, f"a chain of more than {MAX_LINK_HOPS} links")
    target = links[name]
    if target.startswith("/"):
        return None
    at = name.split("/")[:-1]
    for part in target.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not at:
                return None
            at.pop()
            continue
        at.append(part)
        here = "/".join(at)
        if here in links:
            led = _resolve(links, here, hops + 1)
            if led is None:
                return None
            at = led
    return at


class Vetting:
    """Every rule an archive's entries must keep, entry by entry and then as a whole: the one
    check both the upload (`check_archive`, nothing written) and the worker's `unpack` apply,
    so an archive the service stored is one a worker unpacks."""

    def __init__(self, limits: UnpackLimits) -> None:
        self.limits = limits
        self.seen: set[str] = set()
        self.files: set[str] = set()
        self.links: list[tuple[str, str]] = []
        self.total = 0

    def admit(self, member: tarfile.TarInfo) -> str:
        """The entry's safe name, or refused; a symlink is kept for `finish` (made last)."""
        if len(self.seen) >= self.limits.max_entries:
            raise refuse(member.name, f"more than {self.limits.max_entries} entries")
        name = _safe_name(member.name)
        if name in self.seen:
            raise refuse(name, "a duplicate entry")
        self.seen.add(name)
        if member.issym():
            if len(_encoded(member.linkname, "a link target")) > MAX_PATH:
                raise refuse(name, f"a link target of more than {MAX_PATH} bytes")
            if not _link_inside(name, member.linkname):
                raise refuse(name, f"a link to {member.linkname!r} leaves the folder")
            self.links.append((name, member.linkname))
            return name
        if not (member.isdir() or member.isfile()):
            raise refuse(name, "a hard link, device or fifo (only files, folders, links)")
        parts = name.split("/")
        if any("/".join(parts[:i]) in self.files for i in range(1, len(parts))):
            raise refuse(name, "a path through a file")
        if member.isfile():
            self.files.add(name)
            # The header's size is what extraction writes: a bomb is refused before inflating.
            self.total += member.size
            if self.total > self.limits.max_bytes:
                raise refuse(name, f"more than {self.limits.max_bytes} bytes unpacked")
        return name

    def finish(self) -> list[tuple[str, str]]:
        """The links to make, once no entry lies through one or under a file."""
        linked = {n for n, _ in self.links}
        for name in sorted(self.seen):
            parts = name.split("/")
            prefixes = ("/".join(parts[:i]) for i in range(1, len(parts)))
            through = next((p for p in prefixes if p in linked), None)
            if through is not None:
                raise refuse(name, f"a path through the link {through!r}")
        # Each link alone stays inside (`admit`); a chain of them must too, as the kernel
        # follows it in the worker's cache.
        targets = dict(self.links)
        for name, target in self.links:
            if _resolve(targets, name) is None:
                raise refuse(name, f"a link to {target!r} leaves the folder through a link")
        return self.links
