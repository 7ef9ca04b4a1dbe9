"""Code artifacts on the command line: `pack` a folder (and print its digest), and what `submit
--code`, `gate --artifact` and `verify --artifact` share: the digest of a folder, a packed file
or a digest as written, and the upload.

A folder packs as the service's workers and `assaygate pack` pack it (`service.packing`: `HEAD`
of a git work tree, else every file but `.git`); a file is taken as the packed bytes it holds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import httpx

from service.cli.errors import UsageError
from service.core.errors import ArtifactInvalid
from service.core.system.artifact import parse_digest, written
from service.packing import SUFFIX, Packed, UnpackLimits, check_archive, pack


def register(sub: Any) -> None:
    """Add `pack` to the top-level parser."""
    p = sub.add_parser(
        "pack",
        help="pack a folder deterministically and print its digest (what `submit --code` uploads)",
        description="Pack a folder as `submit --code` does: the files of HEAD inside a git work "
        "tree, else every file but .git; sorted, with fixed times, owners and modes, as tar.gz. "
        "Prints the digest (sha256:…) the service will compute for it; the same files give "
        "the same digest.",
    )
    p.add_argument("folder", type=Path)
    p.add_argument(
        "--out", type=Path, default=None, metavar="FILE", help=f"also write the bytes (*{SUFFIX})"
    )
    p.add_argument("--json", action="store_true", help="digest, size, entries, source, dirty")
    p.set_defaults(func=cmd_pack)


def packed(path: Path, flag: str) -> Packed:
    """The folder packed (a refusal names `flag`), with a note on stderr when the work tree
    has changes the artifact does not hold."""
    if not path.is_dir():
        raise UsageError(f"{flag}: {path} is not a folder")
    try:
        found = pack(path)
    except ArtifactInvalid as exc:
        raise UsageError(f"{flag}: {exc.message}") from None
    if found.dirty:
        print(
            f"assaygate: note: {path} has uncommitted changes; the artifact holds HEAD "
            f"({written(found.sha256)}), not them",
            file=sys.stderr,
        )
    return found


def unpackable(data: bytes, flag: str) -> bytes:
    """The bytes, if a worker would unpack them (the check `POST /v1/artifacts` applies, at
    the default caps): a bad archive is one line naming the flag, the entry and the rule,
    before anything is uploaded."""
    try:
        check_archive(data, UnpackLimits())
    except ArtifactInvalid as exc:
        raise UsageError(f"{flag}: {exc.message}") from None
    return data


def code_bytes(path: Path, flag: str) -> bytes:
    """What `--code PATH` uploads: a folder packed, or a packed file's bytes."""
    if path.is_dir():
        return unpackable(packed(path, flag).data, flag)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{flag}: cannot read {path}: {exc.strerror}") from None
    return unpackable(data, flag)


def digest_of(value: str, flag: str) -> str:
    """The hex digest `value` names: `sha256:…` as written, or the digest of a file's bytes or
    a folder's packing. Anything else is one line naming the flag and the rule."""
    if value.startswith("sha256:"):
        try:
            return parse_digest(value, flag)
        except ArtifactInvalid as exc:
            raise UsageError(f"{flag}: {exc.message}") from None
    path = Path(value)
    if path.is_dir():
        return packed(path, flag).sha256
    if path.is_file():
        return hashlib.sha256(code_bytes(path, flag)).hexdigest()
    raise UsageError(
        f"{flag}: {value!r} is neither a digest (sha256:<64 lowercase hex digits>) nor a file "
        "or folder"
    )


def upload(client: httpx.Client, data: bytes) -> tuple[httpx.Response, str]:
    """Upload packed bytes, claiming the digest computed here (the service refuses bytes that
    arrive hashing to anything else); the response and that digest."""
    claimed = written(hashlib.sha256(data).hexdigest())
    response = client.post(
        "/v1/artifacts",
        params={"digest": claimed},
        content=data,
        headers={"Content-Type": "application/gzip"},
    )
    return response, claimed


def cmd_pack(args: argparse.Namespace) -> int:
    found = packed(args.folder, "folder")
    unpackable(found.data, "folder")
    if args.out is not None:
        try:
            args.out.write_bytes(found.data)
        except OSError as exc:
            raise UsageError(f"--out: cannot write {args.out}: {exc.strerror}") from None
    digest = written(found.sha256)
    if args.json:
        print(
            json.dumps(
                {
                    "digest": digest,
                    "size": len(found.data),
                    "entries": found.entries,
                    "source": found.source,
                    "dirty": found.dirty,
                    **({"out": str(args.out)} if args.out is not None else {}),
                }
            )
        )
    else:
        print(digest)
    return 0
