"""Artifacts: what a release ships, named by content (docs/dossier.md, "Subjects: the
artifacts, with their assurance").

A candidate's code reaches the gate as an artifact, a deterministic `tar.gz` of the team's
folder named by the SHA-256 of its bytes (`sha256:<64 lowercase hex>`, the only form a digest is
written in). A dossier's in-toto subjects are these artifacts beside the manifest, each with its
**assurance**: how much the gate knows about those bytes. Pure: it parses digests and says what a
subject is; hashing files, storing and unpacking are the callers' I/O.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from service.core.errors import ArtifactInvalid

PREFIX = "sha256:"
#: A digest as it is written everywhere (API, CLI, dossiers): the algorithm and 64 lowercase hex.
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
_DIGEST = re.compile(DIGEST_PATTERN)
_HEX = re.compile(r"[0-9a-f]{64}")

#: The name a candidate's code artifact goes by in a dossier (its subject and `artifacts`).
CODE = "code"


class Assurance(StrEnum):
    """What the gate knows about a subject's bytes; the wire form is the value."""

    # The gate ran these bytes: a worker fetched them by digest, hashed them again, and the
    # sandbox ran what it unpacked (or an operator's folder, packed and hashed by the worker).
    EXECUTED = "executed"
    # A remote endpoint said it runs this build (its own word, read per trial).
    REPORTED = "reported"
    # The candidate names it; nothing the gate ran or read vouches for it.
    DECLARED = "declared"


class Source(StrEnum):
    """Where executed code came from."""

    ARTIFACT = "artifact"  # uploaded (`POST /v1/artifacts`) and named by the candidate
    OPERATOR_DIR = "operator_dir"  # a tenant worker's ASSAYGATE_TENANT_CODE_DIR


def parse_digest(text: object, field: str) -> str:
    """`sha256:<hex>` → the hex. Anything else — another algorithm, upper case, a path, a
    name that merely contains a digest — is refused naming `field`."""
    if not isinstance(text, str) or not _DIGEST.fullmatch(text):
        raise ArtifactInvalid(
            "must be a digest written sha256:<64 lowercase hex digits>, nothing before or after",
            field=field,
        )
    return text[len(PREFIX) :]


def written(sha256: str) -> str:
    """The hex of a digest, as it is written (`sha256:<hex>`)."""
    assert _HEX.fullmatch(sha256), sha256
    return PREFIX + sha256


def digest_of(data: bytes) -> str:
    """The hex SHA-256 of bytes already in memory."""
    return hashlib.sha256(data).hexdigest()


def build_digest(build: str) -> str:
    """The hex digest a remote endpoint's build is a subject by: the digest itself when the
    build is written as one (`sha256:<hex>`, an image or artifact digest), else the SHA-256 of
    the build's text as written (UTF-8), which names that text and nothing more."""
    if _DIGEST.fullmatch(build):
        return build[len(PREFIX) :]
    return hashlib.sha256(build.encode()).hexdigest()


#: The name the tenant worker's image goes by among a dossier's subjects.
TENANT_IMAGE = "tenant_image"
#: An image reference pinned by digest, as ASSAYGATE_TENANT_IMAGE takes it.
IMAGE_PATTERN = r"^[^\s@]{1,200}@sha256:[0-9a-f]{64}$"


def image_digest(ref: str) -> str:
    """The hex digest an image reference (`name@sha256:<hex>`) is pinned to."""
    return ref.rsplit("@" + PREFIX, 1)[1]


def check_bytes(data: bytes, sha256: str) -> None:
    """Refuse bytes that do not hash to the digest they were fetched by."""
    found = digest_of(data)
    if found != sha256:
        raise ArtifactInvalid(
            f"the stored bytes hash to {written(found)}, not to {written(sha256)} they are "
            "stored under: refused, nothing of it runs",
            field="code",
        )


@dataclass(frozen=True)
class ArtifactSubject:
    """One subject of a dossier beside the manifest."""

    name: str
    sha256: str
    assurance: Assurance
    source: Source | None = None
    # What the digest stands for, as it was written: a remote endpoint's build (reported or
    # declared), or the tenant worker's image reference (`ref@sha256:…`).
    ref: str | None = None

    def view(self) -> dict[str, Any]:
        """As the predicate's `artifacts` lists it."""
        return {
            "name": self.name,
            "digest": {"sha256": self.sha256},
            "assurance": self.assurance.value,
            **({"source": self.source.value} if self.source is not None else {}),
            **({"ref": self.ref} if self.ref is not None else {}),
        }

    def subject(self) -> dict[str, Any]:
        """As the in-toto statement's subject (a ResourceDescriptor with annotations)."""
        annotations: dict[str, Any] = {"assurance": self.assurance.value}
        if self.source is not None:
            annotations["source"] = self.source.value
        if self.ref is not None:
            annotations["ref"] = self.ref
        return {
            "name": f"assaygate:{self.name}",
            "digest": {"sha256": self.sha256},
            "annotations": annotations,
        }

    @classmethod
    def from_view(cls, view: dict[str, Any]) -> ArtifactSubject:
        source, ref = view.get("source"), view.get("ref")
        return cls(
            str(view["name"]),
            str(view["digest"]["sha256"]),
            Assurance(view["assurance"]),
            Source(source) if source is not None else None,
            str(ref) if ref is not None else None,
        )


def subjects_of(artifacts: object) -> list[dict[str, Any]]:
    """The statement's artifact subjects from a predicate's `artifacts` (none in dossiers signed
    before artifacts existed: their statement keeps its one subject)."""
    if not isinstance(artifacts, list):
        return []
    return [ArtifactSubject.from_view(a).subject() for a in artifacts]
