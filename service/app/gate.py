"""What the gate says now: one read model for the deploy gate, the API, the CLI and every page.

The word is the standing dossier version's — the newest signed version of the candidate's
evidence: the assay's own decision, a waiver (`allow`), a rejection (`block`), a lapsed review
(`hold` again) or a reopened gate — with every reported production change the candidate does not
carry laid over it, so no page can show `allow` while `GET /v1/gate` answers `reopened`. Before a
candidate has a dossier the word is `reopened` when its trigger hashes differ from the last
allowed dossier's, else `hold` (its assay is pending, or failed). Missing evidence is never
`allow`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session

from service.app import changes, reviews
from service.app.artifacts import asked, subjects_of
from service.app.dossiers import config_changed_reason, unmet
from service.app.errors import NotFound
from service.app.gate_cache import AnswerCache as AnswerCache
from service.core.decision.assurance import ArtifactAssurance, accepted_by, assurance_of, gated
from service.core.decision.gate import Reason, ReasonView, block_first, reason_view
from service.core.signing.dossier import compare_triggers, trigger_hashes
from service.core.system.artifact import ArtifactSubject
from service.db import artifact as artifact_rows
from service.db import dossier as dossiers
from service.db import queries
from service.db.apikey import Principal
from service.db.models import Candidate, Dossier, Hold, HoldStatus, System, utcnow
from service.db.session import snapshot


class Word(StrEnum):
    """The gate's answer; the wire form is the value."""

    ALLOW = "allow"
    HOLD = "hold"
    BLOCK = "block"
    REOPENED = "reopened"


class Basis(StrEnum):
    """What the word rests on."""

    ASSAY = "assay"  # the assay's own decision, as first signed
    WAIVED = "waived"  # held reasons waived by a reviewer, until an expiry
    REJECTED = "rejected"  # refused by a reviewer
    EXPIRED = "expired"  # a waiver or rejection lapsed: the hold is open again
    CONFIG_CHANGED = "config_changed"  # production changed a trigger this candidate lacks
    POLICY_CHANGED = "policy_changed"  # the organisation's policy changed since the assay
    TRIGGER_CHANGED = "trigger_changed"  # no dossier yet; triggers differ from the last allowed
    PENDING = "pending"  # no dossier yet; the assay has not finished
    FAILED = "failed"  # no dossier; the assay failed
    # Asked by artifact: the dossier allows, but the artifact's assurance is weaker than the
    # policy it was signed under accepts (`executed` unless it says otherwise).
    ASSURANCE = "assurance"


@dataclass(frozen=True)
class Standing:
    """What the gate says now about one candidate, and what that rests on."""

    candidate_id: uuid.UUID
    decision: Word
    basis: Basis
    reasons: list[ReasonView]
    # The signed version the answer rests on (None before the first one).
    dossier: Dossier | None
    # The open hold a reviewer may act on, if any.
    hold_id: uuid.UUID | None = None
    # When the waiver (or rejection) the answer rests on lapses.
    until: datetime | None = None
    # The assay's own decision, when it differs from the standing word.
    assay_decision: str | None = None
    # When the answer changes by the clock alone (a review lapses), if it can.
    changes_at: datetime | None = None
    # Under a waiver in force: the held reasons it lifted (the signed version names only the
    # waiver), so a report of the allow still says what it stands over.
    waived: list[ReasonView] = field(default_factory=list)


@dataclass(frozen=True)
class Answer:
    """The deploy gate's answer for one candidate: its standing and the trigger comparison."""

    system: str
    candidate: Candidate
    standing: Standing
    triggers: dict[str, Any] = field(default_factory=dict)
    # What the candidate ships, by digest, with its assurance (its dossier's subjects).
    artifacts: Sequence[ArtifactSubject] = ()
    # Asked by artifact: its assurance, what the dossier's policy accepts, and whether the answer
    # rests on an accepted weaker one (None: asked by version).
    assurance: ArtifactAssurance | None = None


def standing(
    session: Session, row: queries.CandidateRow, *, now: datetime | None = None
) -> Standing:
    return standings(session, [row], now=now)[row.candidate.id]


def standings(
    session: Session, rows: Sequence[queries.CandidateRow], *, now: datetime | None = None
) -> dict[uuid.UUID, Standing]:
    """The gate's word for each candidate of a page, in a handful of queries whatever its size.
    Reads only: a waiver or rejection lapsed by `now` reads as lapsed before the reconciler
    signs the version that records it."""
    now = now or utcnow()
    if not rows:
        return {}
    ids = [r.candidate.id for r in rows]
    latest = dossiers.latest_of(session, ids)
    hashes = queries.release_hashes_of(session, ids)
    system_ids = sorted({r.system.id for r in rows})
    open_changes = dossiers.open_config_changes(session, system_ids)
    undecided = [r for r in rows if r.candidate.id not in latest]
    allowed = dossiers.last_allowed_per_system(session, sorted({r.system.id for r in undecided}))
    holds: dict[uuid.UUID, list[Hold]] = {}
    for hold in dossiers.reviews_of(
        session, [r.candidate.id for r in rows if latest.get(r.candidate.id)]
    ):
        holds.setdefault(hold.candidate_id, []).append(hold)
    found: dict[uuid.UUID, Standing] = {}
    for row in rows:
        cid = row.candidate.id
        own = hashes.get(cid, {})
        dossier = latest.get(cid)
        if dossier is not None:
            base = _from_dossier(row, dossier, holds.get(cid, []), now)
        else:
            base = _before_dossier(session, row, own, allowed.get(row.system.id))
        found[cid] = _block_first(
            _with_open_changes(base, own, open_changes.get(row.system.id, []))
        )
    return found


def answer(
    session: Session,
    system: System,
    candidate: Candidate,
    *,
    now: datetime | None = None,
    artifact: str | None = None,
) -> Answer:
    """The deploy gate for one candidate: its standing, and its trigger hashes compared with
    the last allowed dossier of another candidate of the system. Asked by `artifact` (hex), the
    standing is for those bytes: an allow needs their assurance to be one the dossier's policy
    accepts (`service.core.decision.assurance`)."""
    row = queries.candidate(session, candidate.id)
    assert row is not None
    found = standing(session, row, now=now)
    subjects = subjects_of(session, candidate.id)
    assured = None
    if artifact is not None:
        assured = artifact_assurance(found.dossier, subjects, artifact)
        found = _assured(found, assured)
    components = dossiers.system_triggers(system)
    hashes = trigger_hashes(queries.release_hashes_one(session, candidate), components)
    since = since_allowed(session, row)
    allowed = dossiers.allowed_view(session, since.allowed)
    triggers = {
        "components": list(components),
        "hashes": hashes,
        "catalogue_version": row.assay.catalogue,
        **compare_triggers(hashes, row.assay.catalogue, allowed),
        # Every component whose hash differs (the pages' "changed since last allow"), triggers
        # or not: `changed` names only the trigger components.
        "components_changed": since.components,
    }
    return Answer(system.name, candidate, found, triggers, subjects, assured)


def artifact_assurance(
    dossier: Dossier | None, subjects: Sequence[ArtifactSubject], sha256: str
) -> ArtifactAssurance:
    """The artifact's assurance among the candidate's subjects, and what the organisation's
    policy its dossier was signed under accepts (before a dossier: `executed` only). The same
    reading `assaygate verify --artifact` makes of the signed statement."""
    signed = dossiers.predicate_of(dossier).get("organisation_policy") if dossier else None
    signed = signed if isinstance(signed, dict) else {}
    policy = signed.get("policy")
    return ArtifactAssurance(
        sha256,
        assurance_of(((s.sha256, s.assurance) for s in subjects), sha256),
        accepted_by(policy if isinstance(policy, dict) else None),
        str(signed["digest"]) if signed.get("digest") is not None else None,
    )


def _assured(found: Standing, assured: ArtifactAssurance) -> Standing:
    """The standing for an artifact: an allow on an assurance the policy does not accept is a
    hold (basis `assurance`); before a dossier the word stands (it is no allow) and no reason
    is added, for the assurance is not yet known."""
    if found.dossier is None:
        return found
    ruled = gated(found.decision.value, found.reasons, assured)
    if not ruled.held and ruled.reasons == tuple(found.reasons):
        return found
    return _block_first(
        replace(
            found,
            decision=Word(ruled.decision),
            basis=Basis.ASSURANCE if ruled.held else found.basis,
            reasons=list(ruled.reasons),
            assay_decision=found.assay_decision or (found.dossier.decision if ruled.held else None),
        )
    )


def read(
    engine: Engine,
    principal: Principal,
    system: str,
    version: str | None,
    answers: AnswerCache,
    render: Callable[[Answer], bytes],
    artifact: str | None = None,
) -> bytes:
    """The gate's answer for `version` of the tenant's `system` (default: its newest candidate),
    or for the newest candidate that ships `artifact` (`sha256:…`: a subject of its dossier, or
    the code it names while its assay runs), as `render` writes it, cached for the system's
    epoch. One snapshot for the whole answer: its epoch, the dossier and the holds it rests on
    agree."""
    sha256 = asked(artifact)
    with snapshot(engine) as session:
        # First, and alone: the epoch the answer is cached under is read before the answer.
        row = changes.system_of(session, principal, system)
        now = utcnow()
        cached = answers.get(row, version, now, artifact=sha256)
        if cached is not None:
            return cached
        if sha256 is not None:
            candidate = artifact_rows.candidate_shipping(session, row, sha256, version)
            if candidate is None:
                of = f"system {system}" + (f" with version {version}" if version else "")
                raise NotFound(
                    f"no candidate of {of} ships {artifact}: it is not a subject of any of its "
                    "dossiers, nor the code any of its candidates names",
                    field="artifact",
                )
        else:
            candidate = dossiers.gate_candidate(session, row, version)
        if candidate is None:
            raise NotFound(
                f"system {system} has no candidate"
                + (f" with version {version}" if version else ""),
                field="version" if version else "system",
            )
        found = answer(session, row, candidate, now=now, artifact=sha256)
        body = render(found)
        answers.put(row, version, found.standing, body, artifact=sha256)
        return body


@dataclass(frozen=True)
class Change:
    """One manifest component whose hash differs from the last allowed candidate's."""

    component: str
    # One of the system's trigger components: a change to it reopens the gate.
    trigger: bool
    before: str | None
    after: str | None


@dataclass(frozen=True)
class SinceAllowed:
    """What changed since the last allow, the one answer the pages and `GET /v1/gate` give.

    The candidate is compared with the last allowed dossier of *another* candidate of its system
    (the newest dossier version that still allows — a waiver's version counts, it allows): the
    question is what this candidate changes against the last one allowed to ship, so an allowed
    candidate is never compared with itself. `allowed` is None when no other candidate was ever
    allowed."""

    allowed: Dossier | None
    allowed_version: str | None
    changes: tuple[Change, ...] = ()

    @property
    def components(self) -> list[str]:
        return [c.component for c in self.changes]

    @property
    def triggers(self) -> list[str]:
        return [c.component for c in self.changes if c.trigger]


def since_allowed(session: Session, row: queries.CandidateRow) -> SinceAllowed:
    return since_allowed_of(session, [row])[row.candidate.id]


def since_allowed_of(
    session: Session, rows: Sequence[queries.CandidateRow]
) -> dict[uuid.UUID, SinceAllowed]:
    """`SinceAllowed` for each candidate of a page: one query for each system's last allowed
    dossier, one more only for a candidate that is itself that dossier's."""
    if not rows:
        return {}
    newest = dossiers.last_allowed_per_system(session, sorted({r.system.id for r in rows}))
    allowed: dict[uuid.UUID, Dossier | None] = {}
    for row in rows:
        last = newest.get(row.system.id)
        if last is not None and last.candidate_id == row.candidate.id:
            last = dossiers.last_allowed(session, row.system.id, excluding=row.candidate.id)
        allowed[row.candidate.id] = last
    digests = queries.manifest_digests(
        session, [d.candidate_id for d in allowed.values() if d is not None]
    )
    versions = queries.candidate_versions(session, list(digests))
    hashes = queries.release_hashes_of(session, [*(r.candidate.id for r in rows), *digests])
    found: dict[uuid.UUID, SinceAllowed] = {}
    for row in rows:
        last = allowed[row.candidate.id]
        if last is None:
            found[row.candidate.id] = SinceAllowed(None, None)
            continue
        now = hashes.get(row.candidate.id, {})
        then = hashes.get(last.candidate_id, {})
        triggers = dossiers.system_triggers(row.system)
        found[row.candidate.id] = SinceAllowed(
            last,
            versions.get(last.candidate_id),
            tuple(
                Change(c, c in triggers, then.get(c), now.get(c))
                for c in sorted(set(now) | set(then))
                if now.get(c) != then.get(c)
            ),
        )
    return found


# ------------------------------------------------------------------------------ the rules


def _basis_of(dossier: Dossier) -> Basis:
    codes = {str(r.get("code")) for r in dossier.reasons}
    if "config_changed" in codes:
        return Basis.CONFIG_CHANGED
    if "policy_changed" in codes:
        return Basis.POLICY_CHANGED
    if any(c.endswith("_expired") for c in codes):
        return Basis.EXPIRED
    if "rejected" in codes:
        return Basis.REJECTED
    if "waived" in codes:
        return Basis.WAIVED
    return Basis.ASSAY


def _from_dossier(
    row: queries.CandidateRow, dossier: Dossier, holds: Sequence[Hold], now: datetime
) -> Standing:
    basis = _basis_of(dossier)
    open_hold = next((h for h in holds if h.status == HoldStatus.OPEN.value), None)
    until = None
    if basis in (Basis.WAIVED, Basis.REJECTED):
        status = HoldStatus.WAIVED if basis is Basis.WAIVED else HoldStatus.REJECTED
        reviewed = [h for h in holds if h.status == status.value]
        if reviewed and reviews.lapsed(reviewed[-1], now):
            return _lapsed(row, dossier, reviewed[-1])
        if not reviewed and open_hold is not None:
            # The review this version records is no longer in force: its hold is open again (a
            # read outside one snapshot can meet the reopened hold before the lapse's version).
            return _lapsed(row, dossier, open_hold, status.value)
        until = reviewed[-1].expires_at if reviewed else None
    assay_decision = row.assay.decision if row.assay.decision != dossier.decision else None
    lifted = [h for h in holds if h.status == HoldStatus.WAIVED.value]
    return Standing(
        row.candidate.id,
        Word(dossier.decision),
        basis,
        [reason_view(r) for r in dossier.reasons],
        dossier,
        open_hold.id if open_hold is not None else None,
        until,
        assay_decision,
        until,
        reviews.held_reasons(lifted[-1]) if basis is Basis.WAIVED and lifted else [],
    )


def _lapsed(
    row: queries.CandidateRow, dossier: Dossier, hold: Hold, status: str | None = None
) -> Standing:
    """A lapsed review reads as the version the reconciler will sign for it: the hold is open
    again, on the reviewed version until that one exists."""
    found = reviews.lapse(hold, status)
    return Standing(
        row.candidate.id,
        Word(found.decision),
        Basis.EXPIRED,
        found.reasons,
        dossier,
        hold.id,
        None,
        row.assay.decision if row.assay.decision != found.decision else None,
    )


def _before_dossier(
    session: Session,
    row: queries.CandidateRow,
    own: Mapping[str, str],
    allowed: Dossier | None,
) -> Standing:
    cid = row.candidate.id
    if row.assay.status == "failed":
        return Standing(
            cid,
            Word.HOLD,
            Basis.FAILED,
            [_reason("assay_failed", "the assay failed; there is no evidence to stand on")],
            None,
        )
    if allowed is not None:
        hashes = trigger_hashes(own, dossiers.system_triggers(row.system))
        compared = compare_triggers(
            hashes, row.assay.catalogue, dossiers.allowed_view(session, allowed)
        )
        if compared["changed"] or compared["catalogue_changed"]:
            what = ", ".join(compared["changed"]) or "the fault catalogue"
            version = (compared["compared_with"] or {}).get("version")
            return Standing(
                cid,
                Word.REOPENED,
                Basis.TRIGGER_CHANGED,
                [
                    _reason(
                        "trigger_changed",
                        f"{what} changed since the last allowed dossier "
                        f"{allowed.digest[:12]} (version {version}); the gate stays reopened "
                        "until this candidate's assay passes",
                    )
                ],
                None,
            )
    return Standing(
        cid,
        Word.HOLD,
        Basis.PENDING,
        [_reason("assay_pending", "the candidate's assay has not finished")],
        None,
    )


def _with_open_changes(
    base: Standing, own: Mapping[str, str], changes: Sequence[dossiers.OpenChange]
) -> Standing:
    """A production change this candidate does not carry reopens whatever did not block. (The
    signed chain records it too; this covers a change reported while the assay finished.)"""
    pending = unmet(own, changes)
    if not pending or base.decision is Word.BLOCK or base.basis is Basis.CONFIG_CHANGED:
        return base
    return Standing(
        base.candidate_id,
        Word.REOPENED,
        Basis.CONFIG_CHANGED,
        [config_changed_reason(c, own.get(c.component)) for c in pending],
        base.dossier,
        None,
        None,
        base.assay_decision or (base.dossier.decision if base.dossier is not None else None),
        base.changes_at,
    )


def _block_first(found: Standing) -> Standing:
    """The standing with its reasons in the one order every reader shows (dossiers signed before
    that order, and reasons laid over by reviews, are reordered on the way out)."""
    return replace(found, reasons=block_first(found.reasons))


def _reason(code: str, message: str) -> ReasonView:
    return Reason(code, message).view()
