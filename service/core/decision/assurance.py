"""Assurance gates the answer: an `allow` for an artifact the gate never ran is no allow
(docs/evidence.md, "An allow names the code that ran").

A deploy asks about the bytes it ships (`GET /v1/gate/{system}?artifact=`, `assaygate gate
--artifact`, offline `assaygate verify --artifact`). The dossier names those bytes with an
assurance: `executed` (the gate ran them), `reported` (a remote endpoint said it runs them) or
`declared` (the candidate names them; nothing the gate ran vouches for them). The answer for an
artifact is `allow` only when the dossier allows and the artifact's assurance is `executed`, or a
weaker one the organisation's policy the dossier was signed under explicitly accepts
(`accept_assurance`); otherwise a dossier's `allow` reads `hold`, reason `assurance`, naming the
artifact's assurance and what the policy requires. An allow that rests on an accepted weaker
assurance says so (`ArtifactAssurance.accepted`). Pure: the callers read the subjects and the
policy (the service from its rows, `verify` from the signed statement) and apply the same rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.core.decision.gate import Decision, Reason, ReasonView
from service.core.system.artifact import Assurance, written

#: Strongest first: what the gate knows about an artifact's bytes.
ORDER: tuple[Assurance, ...] = (Assurance.EXECUTED, Assurance.REPORTED, Assurance.DECLARED)
#: The reason code of an answer held for its artifact's assurance.
CODE = "assurance"
#: The policy field that accepts a weaker assurance than `executed`.
FIELD = "accept_assurance"


def rank(assurance: Assurance) -> int:
    """0 for `executed`, larger for weaker."""
    return ORDER.index(assurance)


def strongest(found: Iterable[Assurance]) -> Assurance | None:
    return min(found, key=rank, default=None)


def weakest(found: Iterable[Assurance]) -> Assurance | None:
    return max(found, key=rank, default=None)


def accepted_by(policy: Mapping[str, Any] | None) -> Assurance:
    """The weakest assurance a policy document accepts for an artifact's allow: its
    `accept_assurance`, else `executed` (a dossier signed before policies were recorded, or
    under a policy that says nothing, accepts nothing weaker)."""
    value = (policy or {}).get(FIELD)
    try:
        return Assurance(str(value)) if value is not None else Assurance.EXECUTED
    except ValueError:
        return Assurance.EXECUTED  # a value this version does not know accepts nothing weaker


@dataclass(frozen=True)
class ArtifactAssurance:
    """What the answer for one artifact rests on: its assurance in the dossier (the strongest
    any subject with its digest has; None: no subject names it yet), the weakest assurance the
    dossier's policy accepts, and that policy's digest."""

    sha256: str
    assurance: Assurance | None
    required: Assurance = Assurance.EXECUTED
    policy: str | None = None

    @property
    def met(self) -> bool:
        return self.assurance is not None and rank(self.assurance) <= rank(self.required)

    @property
    def accepted(self) -> bool:
        """Met only because the policy accepts an assurance weaker than `executed`."""
        return self.met and self.assurance is not Assurance.EXECUTED

    def view(self) -> dict[str, Any]:
        """As the gate's answer and `verify --json` carry it (`artifact_assurance`)."""
        return {
            "digest": written(self.sha256),
            "assurance": self.assurance.value if self.assurance is not None else None,
            "required": self.required.value,
            "met": self.met,
            "accepted_by_policy": self.accepted,
            "policy": self.policy,
        }

    def reason(self) -> Reason:
        """The hold's reason: the artifact's assurance and what the policy requires."""
        have = self.assurance.value if self.assurance is not None else "none recorded"
        accepts = (
            "executed only (the default; `accept_assurance` unset)"
            if self.required is Assurance.EXECUTED
            else f"`accept_assurance: {self.required.value}`"
        )
        return Reason(
            CODE,
            f"{written(self.sha256)} is {have} in this dossier; the organisation's policy "
            f"accepts {accepts}: an allow names code the gate ran (`executed`), unless the "
            "policy explicitly accepts a weaker assurance",
        )

    def note(self) -> str:
        """How an allow on an accepted weaker assurance says so, in one phrase."""
        have = self.assurance.value if self.assurance is not None else "none"
        return f"artifact {have}, not executed: accepted by the organisation's policy"


def assurance_of(subjects: Iterable[tuple[str, Assurance]], sha256: str) -> Assurance | None:
    """The strongest assurance the subjects (hex digest, assurance) give this digest."""
    return strongest(a for digest, a in subjects if digest == sha256)


def from_statement(statement: Mapping[str, Any], sha256: str) -> ArtifactAssurance:
    """The same reading from a signed statement (`verify --artifact`): the artifact subjects'
    `annotations.assurance` for this digest, and the predicate's `organisation_policy`."""
    found: list[tuple[str, Assurance]] = []
    for subject in list(statement.get("subject") or [])[1:]:
        if not isinstance(subject, dict):
            continue
        digest = (subject.get("digest") or {}).get("sha256")
        said = (subject.get("annotations") or {}).get("assurance")
        if digest == sha256 and said in {a.value for a in ORDER}:
            found.append((sha256, Assurance(said)))
    signed = (statement.get("predicate") or {}).get("organisation_policy")
    signed = signed if isinstance(signed, dict) else {}
    policy = signed.get("policy")
    return ArtifactAssurance(
        sha256,
        assurance_of(found, sha256),
        accepted_by(policy if isinstance(policy, dict) else None),
        str(signed["digest"]) if signed.get("digest") is not None else None,
    )


@dataclass(frozen=True)
class ArtifactAnswer:
    """The decision and reasons for an artifact: the dossier's, with the assurance rule laid
    over them."""

    decision: str
    reasons: tuple[ReasonView, ...]
    held: bool  # the rule turned an allow into a hold


def gated(decision: str, reasons: Sequence[ReasonView], found: ArtifactAssurance) -> ArtifactAnswer:
    """An allow whose artifact's assurance the policy does not accept is `hold`, reason
    `assurance` first; any other word stands, the reason added so a reader sees it too. A met
    assurance changes nothing."""
    if found.met:
        return ArtifactAnswer(decision, tuple(reasons), False)
    reason = found.reason().view()
    if decision == Decision.ALLOW.value:
        return ArtifactAnswer(Decision.HOLD.value, (reason, *reasons), True)
    return ArtifactAnswer(decision, (*reasons, reason), False)
