"""The service's Ed25519 signing keys on disk: created on first start, rotated, all published.

A key directory holds the active key's PEM file and `keys.json`, the index of every key with its
validity window. Rotation retires the active key — its `not_after` is set to the moment of
rotation plus `ROTATION_GRACE_S`, so a dossier being signed while the key rotates still verifies
— and deletes its private key from the directory: a retired key never signs again, and the
public half in the index is all that verifying needs. Verification refuses a statement a key
signed outside its window (`service.core.signing.dossier.verify`), so even a copy of a retired
private key taken before rotation cannot vouch for anything dated after its retirement.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)

from service.core.signing.dossier import PublicKey, Signer
from service.core.system.secret import KEY_BYTES, SecretsKey

INDEX = "keys.json"
# How long after a rotation the retired key's window stays open: long enough for a dossier whose
# signer was loaded just before the rotation to be sealed inside it.
ROTATION_GRACE_S = 60


def _now(*, plus_s: int = 0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=plus_s)).isoformat(timespec="seconds")


@dataclass
class KeyRing:
    directory: Path
    # Where a copy of the public index is kept for processes that must verify but never sign
    # (workers verifying injector credentials mount only this directory).
    public_dir: Path | None = None

    def _index(self) -> list[dict[str, str | None]]:
        path = self.directory / INDEX
        if not path.exists():
            return []
        data: list[dict[str, str | None]] = json.loads(path.read_text())
        return data

    def _write_index(self, entries: list[dict[str, str | None]]) -> None:
        for directory in (self.directory, self.public_dir):
            if directory is None:
                continue
            directory.mkdir(parents=True, exist_ok=True)
            tmp = directory / (INDEX + ".tmp")
            tmp.write_text(json.dumps(entries, indent=2))
            os.replace(tmp, directory / INDEX)  # atomic: readers never see half an index

    def _create(self, entries: list[dict[str, str | None]]) -> Signer:
        private = Ed25519PrivateKey.generate()
        signer = Signer(private)
        pem = private.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        path = self.directory / f"{signer.keyid}.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(pem)
        entries.append(
            {
                "keyid": signer.keyid,
                "public": signer.public,
                "not_before": _now(),
                "not_after": None,
            }
        )
        self._write_index(entries)
        return signer

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """One writer at a time: the API and a worker starting together must not both create a
        first key (the second index write would drop the first key, and what it signed)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with (self.directory / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def load_or_create(self) -> Signer:
        """The active signing key, creating the first one if the directory has none."""
        with self._locked():
            entries = self._index()
            active = [e for e in entries if e["not_after"] is None]
            if not active:
                return self._create(entries)
            return self._load(str(active[-1]["keyid"]))

    def _load(self, keyid: str) -> Signer:
        pem = (self.directory / f"{keyid}.pem").read_bytes()
        private = load_pem_private_key(pem, password=None)
        if not isinstance(private, Ed25519PrivateKey):
            raise ValueError(f"key {keyid} is not an Ed25519 key")
        return Signer(private)

    def rotate(self) -> Signer:
        """Retire the active key (it stays published, its window closed) and make a new one
        active; the retired private key is deleted once the new index is written."""
        with self._locked():
            entries = self._index()
            closes = _now(plus_s=ROTATION_GRACE_S)
            retired = [str(e["keyid"]) for e in entries if e["not_after"] is None]
            for e in entries:
                if e["not_after"] is None:
                    e["not_after"] = closes
            signer = self._create(entries)
            for keyid in retired:
                (self.directory / f"{keyid}.pem").unlink(missing_ok=True)
            return signer

    def published(self) -> list[PublicKey]:
        return [
            PublicKey(str(e["keyid"]), str(e["public"]), e["not_before"], e["not_after"])
            for e in self._index()
        ]


@dataclass
class ActiveKey:
    """The active signer of a key ring, re-read when the index changes (after `keys rotate`), so a
    long-running process signs with the new key without a restart."""

    ring: KeyRing
    _stamp: tuple[int, int] | None = field(default=None, init=False)
    _signer: Signer | None = field(default=None, init=False)

    def current(self) -> Signer:
        stamp = self._index_stamp()
        if self._signer is None or stamp != self._stamp or stamp is None:
            self._signer = self.ring.load_or_create()
            self._stamp = self._index_stamp()
        return self._signer

    def _index_stamp(self) -> tuple[int, int] | None:
        try:
            st = (self.ring.directory / INDEX).stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_ino)


class SecretsKeyMissing(Exception):
    """A process that only reads tenants' secrets (a tenant's worker) found no secrets key."""


def load_secrets_key(path: Path, *, create: bool = False) -> SecretsKey:
    """The operator's key for tenants' secrets: 32 random bytes, hex, in a 0600 file. The API
    (and `serve`) creates it on first use (`create=True`); a worker only loads it, and one
    without it raises SecretsKeyMissing naming the file."""
    try:
        return SecretsKey(bytes.fromhex(path.read_text().strip()))
    except FileNotFoundError:
        if not create:
            raise SecretsKeyMissing(
                f"no secrets key at {path}: the API creates it on first start; mount it "
                "(ASSAYGATE_SECRETS_KEY_FILE) on the tenant's workers"
            ) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = os.urandom(KEY_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        # Another process wrote it first: use theirs, or one process's secrets would not decrypt
        # in the other.
        return SecretsKey(bytes.fromhex(path.read_text().strip()))
    with os.fdopen(fd, "w") as out:
        out.write(fresh.hex())
    return SecretsKey(fresh)
