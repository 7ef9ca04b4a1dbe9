"""The checks `verify` reports, one function each: what a dossier's statement must say about its
subjects, its chain and its signing key's window. Pure; `service.core.signing.dossier` runs them
in order over a statement it has decoded."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from service.core.decision.assurance import ArtifactAssurance
from service.core.evidence.figures import JSONObject
from service.core.system.artifact import subjects_of, written


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def view(self) -> JSONObject:
        return {"check": self.name, "ok": self.ok, "detail": self.detail}


def subject(
    stmt: Mapping[str, Any], predicate: Mapping[str, Any], expected_digest: str | None
) -> Check:
    """The statement's subject is the manifest it claims (or the one the caller expects)."""
    subject_digest = stmt["subject"][0].get("digest", {}).get("sha256")
    want = expected_digest or (predicate.get("manifest") or {}).get("digest")
    return Check(
        "subject_digest",
        subject_digest == want and subject_digest is not None,
        f"subject digest {subject_digest} matches the manifest"
        if subject_digest == want
        else f"subject digest {subject_digest} differs from the manifest digest {want}",
    )


def artifact_subjects_match(stmt: Mapping[str, Any], predicate: Mapping[str, Any]) -> Check:
    """The subjects after the manifest are exactly the artifacts the predicate lists: a subject
    no evidence speaks of (or an assurance raised in one place only) is refused."""
    try:
        expected = subjects_of(predicate.get("artifacts"))
    except (KeyError, TypeError, ValueError):
        return Check("artifact_subjects", False, "the predicate's artifacts are malformed")
    found = list(stmt["subject"][1:])
    if found != expected:
        return Check(
            "artifact_subjects",
            False,
            f"{len(found)} artifact subject(s) differ from the {len(expected)} artifact(s) the "
            "predicate lists",
        )
    return Check("artifact_subjects", True, f"{len(found)} artifact subject(s), as listed")


def artifact_subjects(stmt: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The statement's artifact subjects: every subject after the manifest."""
    return [s for s in stmt.get("subject", [])[1:] if isinstance(s, dict)]


def is_subject(stmt: Mapping[str, Any], sha256: str) -> Check:
    """The artifact (by its hex SHA-256) is one of the statement's artifact subjects; the
    manifest's own digest is not an artifact and never matches."""
    for subject in artifact_subjects(stmt):
        if (subject.get("digest") or {}).get("sha256") == sha256:
            assurance = (subject.get("annotations") or {}).get("assurance", "unstated")
            return Check(
                "artifact",
                True,
                f"{written(sha256)} is subject {subject.get('name')} ({assurance})",
            )
    return Check(
        "artifact",
        False,
        f"{written(sha256)} is not a subject of this dossier "
        f"({len(artifact_subjects(stmt))} artifact subject(s))",
    )


def assurance(found: ArtifactAssurance) -> Check:
    """The artifact's assurance is one the organisation's policy the dossier was signed under
    accepts: `executed`, or a weaker one its `accept_assurance` names (an allow for these bytes
    needs it; the online gate holds without it)."""
    have = found.assurance.value if found.assurance is not None else "not a subject"
    policy = f"policy {found.policy[:12]}" if found.policy else "no policy recorded"
    if not found.met:
        return Check(
            "assurance",
            False,
            f"{have}; the organisation's policy ({policy}) accepts {found.required.value} or "
            "stronger: an allow for these bytes is held (reason assurance)",
        )
    if found.accepted:
        return Check(
            "assurance",
            True,
            f"{have}, not executed: accepted by the organisation's policy ({policy}, "
            f"accept_assurance: {found.required.value})",
        )
    return Check("assurance", True, f"{have}: the gate ran these bytes")


def chain(predicate: Mapping[str, Any], previous_digest: str | None) -> Check:
    prev = predicate.get("previous")
    ok = prev == previous_digest
    return Check(
        "chain",
        ok,
        f"links to {prev}"
        if ok
        else f"links to {prev}, but the previous version's digest is {previous_digest}",
    )


def instant(text: object) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class Windowed(Protocol):
    """A published key as the window check reads it (`dossier.PublicKey`)."""

    @property
    def keyid(self) -> str: ...

    @property
    def not_before(self) -> str | None: ...

    @property
    def not_after(self) -> str | None: ...


def window(key: Windowed, issued_at: object) -> Check:
    """A key vouches only for statements dated inside its window: a retired key's signature on
    a statement dated after its retirement is refused, as is one dated before it existed."""
    if key.not_before is None and key.not_after is None:
        return Check("key_window", True, f"key {key.keyid[:16]}… has no validity window")
    when = instant(issued_at)
    if when is None:
        return Check(
            "key_window", False, "the statement carries no issued_at to hold against the key"
        )
    start, end = instant(key.not_before), instant(key.not_after)
    if start is not None and when < start:
        return Check(
            "key_window",
            False,
            f"issued at {issued_at}, before key {key.keyid[:16]}… became valid ({key.not_before})",
        )
    if end is not None and when > end:
        return Check(
            "key_window",
            False,
            f"issued at {issued_at}, after key {key.keyid[:16]}… was retired ({key.not_after})",
        )
    return Check("key_window", True, f"issued at {issued_at}, inside the key's window")
