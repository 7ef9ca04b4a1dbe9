"""Fault dossiers: an in-toto Statement v1 in a DSSE envelope, signed with Ed25519.

Sign bytes, not objects: the statement is canonicalised once with RFC 8785, the signature covers
the DSSE pre-authentication encoding of exactly those bytes, and verification works from the
stored bytes without re-serialising anything. Key ids follow securesystemslib's default (SHA-256
over the canonical JSON of keytype, scheme and keyval), so its verifier needs no configuration.
Signatures are base64, as the DSSE specification writes them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from service.core.decision.assurance import ArtifactAssurance, from_statement
from service.core.decision.gate import ReasonView, block_first
from service.core.decision.report import AssayReport, FaultResult
from service.core.errors import EvidenceUnsealable
from service.core.evidence.builds import assay_view, build_subjects
from service.core.evidence.figures import JSONObject
from service.core.signing.checks import (
    Check,
    artifact_subjects_match,
    assurance,
    chain,
    is_subject,
    subject,
    window,
)
from service.core.system.artifact import ArtifactSubject, subjects_of
from service.core.system.manifest import CODE, TRIGGER_DEFAULT, canonical

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://assaygate.dev/fault-dossier/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(t), t, len(payload), payload)


def public_hex(key: Ed25519PublicKey) -> str:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


def key_dict(public: str) -> JSONObject:
    return {"keytype": "ed25519", "scheme": "ed25519", "keyval": {"public": public}}


def keyid_of(public: str) -> str:
    return hashlib.sha256(canonical(key_dict(public))).hexdigest()


@dataclass(frozen=True)
class PublicKey:
    """A published key and its validity window: it vouches only for statements dated
    `not_before` <= issued_at <= `not_after` (ISO 8601; None: open on that side)."""

    keyid: str
    public: str  # raw Ed25519 public key, hex
    not_before: str | None = None
    not_after: str | None = None

    def view(self) -> dict[str, Any]:
        return {
            "keyid": self.keyid,
            **key_dict(self.public),
            "not_before": self.not_before,
            "not_after": self.not_after,
        }


class Signer:
    """An Ed25519 signing key held in memory; loading it from disk is the caller's I/O."""

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self._key = private
        self.public = public_hex(private.public_key())
        self.keyid = keyid_of(self.public)

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message)


def statement(
    subject_name: str, manifest_digest: str, predicate: Mapping[str, Any]
) -> dict[str, Any]:
    """The in-toto statement: the candidate's manifest first, then each artifact the predicate
    lists (`artifacts`: the code that ran, by digest, with its assurance). A predicate without
    artifacts (every dossier signed before them) gives the one-subject statement it always did."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {"name": subject_name, "digest": {"sha256": manifest_digest}},
            *subjects_of(predicate.get("artifacts")),
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": dict(predicate),
    }


def sealable(value: object, what: str) -> bytes:
    """`value`'s RFC 8785 bytes, or EvidenceUnsealable saying why it has none (`what`: whose)."""
    try:
        return canonical(value)
    except (rfc8785.CanonicalizationError, UnicodeError, TypeError, RecursionError) as exc:
        raise EvidenceUnsealable(f"no RFC 8785 form: {exc}", field=what) from None


def seal(stmt: Mapping[str, Any], signer: Signer) -> tuple[bytes, dict[str, Any]]:
    """Canonical payload bytes and the DSSE envelope signing them; EvidenceUnsealable if the
    statement has no canonical form."""
    payload = sealable(dict(stmt), "the dossier")
    sig = signer.sign(pae(PAYLOAD_TYPE, payload))
    envelope = {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [{"keyid": signer.keyid, "sig": base64.b64encode(sig).decode("ascii")}],
    }
    return payload, envelope


def payload_digest(payload: bytes) -> str:
    """The digest that chains one dossier version to the next."""
    return hashlib.sha256(payload).hexdigest()


@dataclass(frozen=True)
class Verification:
    checks: tuple[Check, ...]
    statement: dict[str, Any] | None
    digest: str | None
    # With `artifact`: its assurance and what the dossier's policy accepts.
    artifact: ArtifactAssurance | None = None

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def failed(self) -> Check | None:
        return next((c for c in self.checks if not c.ok), None)


def _decode_sig(sig: str) -> bytes | None:
    try:
        raw = base64.b64decode(sig, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == 64 else None


def verify(
    envelope: Mapping[str, Any],
    keys: Mapping[str, PublicKey],
    expected_digest: str | None = None,
    previous_digest: str | None = None,
    check_chain: bool = False,
    artifact: str | None = None,
) -> Verification:
    """Check payload type, signature, statement shape, the signing key's validity window
    against the statement's time, subject digest, the artifact subjects against the predicate
    (when there are any), chain link, and (`artifact`: a hex SHA-256) that this artifact is a
    subject whose assurance the dossier's organisation policy accepts (`executed`, unless the
    policy's `accept_assurance` names a weaker one).

    Every check is reported; the first failing one names what is wrong.
    """
    ptype = envelope.get("payloadType")
    checks = [
        Check(
            "payload_type",
            ptype == PAYLOAD_TYPE,
            f"payloadType is {ptype!r}, expected {PAYLOAD_TYPE!r}"
            if ptype != PAYLOAD_TYPE
            else PAYLOAD_TYPE,
        )
    ]
    try:
        payload = base64.b64decode(str(envelope.get("payload", "")), validate=True)
    except (binascii.Error, ValueError):
        checks.append(Check("payload", False, "payload is not valid base64"))
        return Verification(tuple(checks), None, None)
    signed, verified_by = _signature(envelope.get("signatures"), keys, pae(str(ptype), payload))
    checks.append(signed)
    digest = payload_digest(payload)
    try:
        stmt = json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError):
        checks.append(Check("statement", False, "payload is not JSON"))
        return Verification(tuple(checks), None, digest)
    shape_ok = _is_dossier(stmt)
    checks.append(
        Check(
            "statement",
            shape_ok,
            "in-toto Statement v1 with an Assaygate dossier"
            if shape_ok
            else "not an in-toto Statement v1 carrying a dossier",
        )
    )
    if not shape_ok:
        return Verification(tuple(checks), None, digest)
    predicate = stmt.get("predicate") or {}
    if verified_by is not None:
        checks.append(window(keys[verified_by], predicate.get("issued_at")))
    checks.append(subject(stmt, predicate, expected_digest))
    if len(stmt["subject"]) > 1 or predicate.get("artifacts"):
        checks.append(artifact_subjects_match(stmt, predicate))
    if check_chain or previous_digest is not None:
        checks.append(chain(predicate, previous_digest))
    found = None
    if artifact is not None:
        checks.append(is_subject(stmt, artifact))
        found = from_statement(stmt, artifact)
        if found.assurance is not None:
            checks.append(assurance(found))
    return Verification(tuple(checks), stmt, digest, found)


def _signature(
    sigs: object, keys: Mapping[str, PublicKey], message: bytes
) -> tuple[Check, str | None]:
    """The first signature a published key verifies, or every reason none did."""
    verified_by: str | None = None
    problems: list[str] = []
    for s in sigs if isinstance(sigs, list) else []:
        keyid = str(s.get("keyid", "")) if isinstance(s, dict) else ""
        key = keys.get(keyid)
        if key is None:
            problems.append(f"no published key has keyid {keyid[:16]}…")
            continue
        raw = _decode_sig(str(s.get("sig", "")))
        if raw is None:
            problems.append(f"signature by {keyid[:16]}… is not a base64 64-byte Ed25519 signature")
            continue
        try:
            Ed25519PublicKey.from_public_bytes(bytes.fromhex(key.public)).verify(raw, message)
        except InvalidSignature:
            problems.append(f"signature by {keyid[:16]}… does not match the payload")
            continue
        verified_by = keyid
        break
    if not sigs:
        problems.append("the envelope carries no signature")
    detail = f"verified by key {verified_by}" if verified_by else "; ".join(problems)
    return Check("signature", verified_by is not None, detail), verified_by


def _is_dossier(stmt: object) -> bool:
    return (
        isinstance(stmt, dict)
        and stmt.get("_type") == STATEMENT_TYPE
        and stmt.get("predicateType") == PREDICATE_TYPE
        and isinstance(stmt.get("subject"), list)
        and len(stmt["subject"]) >= 1
        and all(isinstance(x, dict) for x in stmt["subject"])
    )


@dataclass(frozen=True)
class CandidateRef:
    id: str
    system: str
    version: str
    source_revision: str | None = None
    # The submitting key's id, and who acted through it: {"key_id", "key_name",
    # "person", "kind", "minted_by"} (see docs/dossier.md).
    submitter: str | None = None
    submitted_by: Mapping[str, Any] | None = None

    def subject_name(self) -> str:
        return f"assaygate:candidate/{self.id}"


def _fault_run(f: FaultResult) -> JSONObject:
    sig = f.signature.to_dict()
    invariants = {k: v.to_dict() for k, v in f.invariants.items()}
    samples = list(f.samples)
    if f.first_violation and f.first_violation not in samples:
        samples.append(f.first_violation)
    return {
        "id": f.id,
        "coverage_key": f.coverage_key,
        "planned": f.planned,
        "exercised": f.exercised,
        "not_exercised": f.not_exercised,
        "target_errors": f.target_errors,
        "intervention": {
            "counts": sig["counts"],
            "intervals": sig["intervals"],
            "upper_bounds_95": sig["upper_bounds"],
        },
        "baseline": f.baseline.to_dict() if f.baseline else None,
        "transfer": f.transfer.to_dict() if f.transfer else None,
        "counterfactual": f.counterfactual.to_dict(),
        "storm": f.storm.to_dict() if f.storm else None,
        "diagnosis": f.diagnosis.to_dict() if f.diagnosis else None,
        "samples": samples[:2],  # the injections, ledger, evidence and claim the oracle read
        # Whether the workload reaches the fault (engine targets); the shared baseline it read.
        **({"applicability": f.applicability} if f.applicability is not None else {}),
        **({"baseline_run": dict(f.baseline_run)} if f.baseline_run is not None else {}),
        # Each floor the gate read: point estimate, 95 % interval, which it compared, met or not.
        **({"floors": [dict(c) for c in f.floors]} if f.floors else {}),
        # mcp targets: each invariant's severity and the graded trials it failed in.
        **({"invariants": invariants} if invariants else {}),
    }


def _mcp(report: AssayReport) -> JSONObject:
    """An mcp target's contract and invariant hashes and the invariants that failed, per fault;
    nothing for other targets (their dossiers are unchanged)."""
    faults = [f for f in report.faults if f.invariants]
    if not faults:
        return {}
    hashes = report.component_hashes
    return {
        "mcp": {
            "contract_sha256": hashes.get("tools"),
            "invariants_sha256": hashes.get("invariants"),
            "invariants_failed": {
                f.id: sorted(n for n, v in f.invariants.items() if v.failed) for f in faults
            },
        }
    }


def predicate_from_report(
    report: AssayReport | Mapping[str, object],
    candidate: CandidateRef,
    *,
    version: int,
    previous: str | None,
    issued_at: str,
    triggers: Mapping[str, Any],
    holds: list[dict[str, Any]] | None = None,
    waivers: list[dict[str, Any]] | None = None,
    stop_conditions: Mapping[str, Any] | None = None,
    decision: str | None = None,
    reasons: list[ReasonView] | None = None,
    change: str | None = None,
    artifacts: Sequence[ArtifactSubject] = (),
    policy: Mapping[str, Any] | None = None,
    attempts: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Everything docs/dossier.md lists for a dossier, from a merged assay report (typed, or its
    stored JSON). `artifacts`: the code the release ships, by digest, with its assurance; with
    the remote builds the report records (`builds.build_subjects`) they are the predicate's
    `artifacts` and the statement's subjects beside the manifest (none: no `artifacts`).
    `policy`: the organisation's policy the assay ran under (its digest, versions and document),
    signed as `organisation_policy` when there is one. `attempts`: every finished attempt of the
    release, oldest first and this one among them
    (`service.core.decision.release.Attempt.view`), signed as `attempts` only when there is more
    than one (a release's first dossier reads as it always did)."""
    r = report if isinstance(report, AssayReport) else AssayReport.from_dict(report)
    shipped = [*artifacts, *build_subjects(r.builds)]
    found = {
        "dossier_version": version,
        "previous": previous,
        "issued_at": issued_at,
        "change": change,
        "candidate": {
            "id": candidate.id,
            "system": candidate.system,
            "version": candidate.version,
            "source_revision": candidate.source_revision,
            "submitter": candidate.submitter,
            "submitted_by": dict(candidate.submitted_by) if candidate.submitted_by else None,
        },
        "manifest": {"digest": r.manifest_digest, "component_hashes": dict(r.component_hashes)},
        "catalogue_version": r.catalogue_version,
        "plan": r.plan,
        "fault_specs": [f.spec for f in r.faults],
        "runs": [_fault_run(f) for f in r.faults],
        "by_domain": {d: _without_intervals(s.to_dict()) for d, s in r.by_domain.items()},
        "overall": r.overall.to_dict(),
        "coverage": {"visited": list(r.visited), "not_visited": list(r.not_visited)},
        "stop_conditions": dict(stop_conditions or {"stopped": r.stopped}),
        "holds": holds or [],
        "waivers": waivers or [],
        "decision": decision or r.decision.value,
        "reasons": block_first(reasons) if reasons is not None else [x.view() for x in r.reasons],
        "change_triggers": dict(triggers),
        "interpretation": dict(r.interpretation),
        **_mcp(r),
        # The code by digest, then each remote endpoint's build (reported or only declared).
        **({"artifacts": [a.view() for a in shipped]} if shipped else {}),
        # Remote targets: per endpoint the declared build, those reported and the assurance.
        **({"builds": assay_view(r.builds)} if r.builds else {}),
        # What the runs cost, the team's agent apart from the gate's own (when it was metered).
        **({"spend": _spend(r.spend)} if r.spend else {}),
        # Tenant code: the sandbox layers that were in force (service/sandbox/layers.py).
        **({"sandbox": [dict(s) for s in r.sandbox]} if r.sandbox else {}),
        # Every attempt of the release (same system, code, manifest and policy), when re-run.
        **({"attempts": [dict(a) for a in attempts]} if len(attempts) > 1 else {}),
    }
    if policy is not None:
        found["organisation_policy"] = dict(policy)
    return found


def _spend(spend: JSONObject) -> JSONObject:
    """The report's spend as signed: the team's agent (`team`, what budgets count) apart from the
    gate's naive agent (`gate`), every run (`total`), runs past a stop (`past_stop`), per arm."""
    return {
        k: spend[k] for k in ("rule", "team", "gate", "total", "past_stop", "arms") if k in spend
    }


def _without_intervals(summary: JSONObject) -> JSONObject:
    return {k: v for k, v in summary.items() if k != "intervals"}


# ------------------------------------------------------------------ versions and change triggers

#: The components whose change reopens the gate unless a system names its own.
DEFAULT_TRIGGERS: tuple[str, ...] = tuple(sorted(TRIGGER_DEFAULT))


def release_hashes(component_hashes: Mapping[str, str], code: str | None) -> dict[str, str]:
    """A candidate's component hashes with, where it names a code artifact, that artifact's
    SHA-256 as the `code` component: what a production change and a trigger compare."""
    return {**component_hashes, CODE: code} if code is not None else dict(component_hashes)


def trigger_hashes(component_hashes: Mapping[str, str], triggers: Sequence[str]) -> dict[str, str]:
    return {c: component_hashes[c] for c in sorted(set(triggers)) if c in component_hashes}


def compare_triggers(
    hashes: Mapping[str, str],
    catalogue_version: str,
    allowed: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """This candidate's trigger hashes against those of the last allowed dossier.

    `allowed` is None when nothing was ever allowed, else {"digest", "candidate_id", "version",
    "hashes", "catalogue_version"}. Identical hashes and catalogue are reported as such.
    """
    if allowed is None:
        return {
            "compared_with": None,
            "changed": sorted(hashes),
            "identical": False,
            "catalogue_changed": None,
        }
    before: Mapping[str, str] = allowed["hashes"]
    changed = sorted(c for c in set(hashes) | set(before) if hashes.get(c) != before.get(c))
    catalogue_changed = catalogue_version != allowed["catalogue_version"]
    return {
        "compared_with": {
            "dossier_digest": allowed["digest"],
            "candidate_id": allowed["candidate_id"],
            "version": allowed["version"],
        },
        "changed": changed,
        "identical": not changed and not catalogue_changed,
        "catalogue_changed": catalogue_changed,
    }


def successor(
    predicate: Mapping[str, Any],
    *,
    version: int,
    previous: str,
    issued_at: str,
    change: str,
    decision: str,
    reasons: list[ReasonView],
    holds: list[dict[str, Any]] | None = None,
    waivers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The next version of a dossier whose evidence is unchanged (a waiver, a rejection, a
    reopened gate): the same runs, a new decision, and a link to the version before."""
    nxt = dict(predicate)
    nxt.update(
        dossier_version=version,
        previous=previous,
        issued_at=issued_at,
        change=change,
        decision=decision,
        reasons=block_first(reasons),
    )
    if holds is not None:
        nxt["holds"] = holds
    if waivers is not None:
        nxt["waivers"] = waivers
    return nxt
