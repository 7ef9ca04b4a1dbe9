"""Admission: every check a submission passes, in one pass over one reading of it.

The manifest is read once (`service.core.system.typed.read`: its contract, invariants, parts,
URLs, builds, named secrets and the artifact the candidate names). Then, in order, and before
anything is written:

1. naming — the system and version, from the body or the manifest;
2. expressions — an mcp manifest's CEL invariants are priced and compile;
3. egress — every URL it names may be reached under the egress policy;
4. execution — code parts only for a tenant an operator allowed to run code;
5. artifact — the code artifact it names is the tenant's own, stored;
6. secrets — every secret it names is stored for the tenant;
7. plan — the plan parses and, as submitted, stays within the trial limits;
8. policy — the envelope and plan, raised to the organisation's policy (a looser field is
   refused), and the shards of the effective plan within the limits again.

What comes out (`Admission`) is what the submission records and the assay runs. The first
check that fails raises the app's error naming its field; nothing is half-admitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from sqlmodel import Session

from service.app import policies
from service.app.artifacts import check_named as check_artifact
from service.app.errors import CodeNotAllowed, FieldInvalid
from service.app.secrets import check_named as check_secrets
from service.app.shapes import CandidateCreate
from service.app.tenants import allow_hint, queue_for
from service.core.errors import ArtifactInvalid
from service.core.evidence.promise import raised_to_resolve, refuse_unresolvable
from service.core.faults.contract_catalogue import plan_data_for
from service.core.faults.plan import AssayPlan, parse_plan
from service.core.shards.assay import ShardSpec, plan_shards
from service.core.system.manifest import parse_manifest
from service.core.system.typed import TypedManifest, read, typed
from service.db import queries
from service.db import tenant as tenants
from service.db.apikey import Principal
from service.db.models import ManifestRow
from service.db.queries import CandidateRow
from service.mcp.cel import compile_invariants
from service.net.egress import EgressPolicy, EgressRefused
from service.settings import Settings


@dataclass(frozen=True)
class Admission:
    """An admitted submission: its reading, its names, the effective plan (raised to the policy)
    with its shards, the policy it is held to, and the queue its shards go to."""

    typed: TypedManifest
    system: str
    version: str
    plan: AssayPlan
    shards: list[ShardSpec]
    policy: policies.InForce
    queue: str


def shard_size(plan: AssayPlan, settings: Settings) -> int:
    """The configured shard size, grown just enough to keep the shard count under the cap."""
    faults = 1 if plan.paper else len(plan.faults())
    shards_per_fault = max(1, settings.max_shards_per_assay // faults)
    return max(settings.trials_per_shard, -(-plan.trials // shards_per_fault))


def check_trial_limits(shards: list[ShardSpec], settings: Settings) -> None:
    """Refuse a plan over the configured trial limits before anything is written."""
    per_fault: dict[str | None, int] = {}
    for s in shards:
        per_fault[s.fault_id] = per_fault.get(s.fault_id, 0) + (s.stop - s.start)
    most = max(per_fault.values(), default=0)
    if most > settings.max_trials_per_fault:
        raise FieldInvalid(
            f"{most} trials for one fault; the limit is {settings.max_trials_per_fault}",
            field="plan.trials",
        )
    total = sum(per_fault.values())
    if total > settings.max_trials_per_assay:
        raise FieldInvalid(
            f"{total} trials in the assay; the limit is {settings.max_trials_per_assay}",
            field="plan.trials",
        )


def reading_of(body: CandidateCreate) -> TypedManifest:
    """The submission's manifest and artifact digest, read once: a body that cannot be read is
    refused before anything else looks at it, an idempotency key's replay included."""
    try:
        return read(body.manifest, body.code)
    except ArtifactInvalid as exc:
        raise FieldInvalid(exc.message, field=exc.field) from None


def admit(
    session: Session,
    principal: Principal,
    body: CandidateCreate,
    settings: Settings,
    reading: TypedManifest | None = None,
) -> Admission:
    """The submission checked whole, in the order the module names (reads only); `reading`:
    the body's, when the caller has read it already (`reading_of`)."""
    reading = reading if reading is not None else reading_of(body)
    manifest = reading.manifest
    system = body.system or manifest.system
    version = body.version or manifest.version
    if system is None:
        raise FieldInvalid("name the system in the body or in the manifest", field="system")
    if version is None:
        raise FieldInvalid("name the version in the body or in the manifest", field="version")
    if reading.invariants is not None:
        # Bounded by the source's length: each predicate is priced in Python before the Rust
        # compile (which holds the GIL), and nothing is evaluated (service/mcp/cel.py). The
        # routes that submit are sync, so this runs in the threadpool, never on the event loop.
        compile_invariants(reading.invariants)
    _egress(reading, settings, principal.tenant)
    _execution(session, principal, reading)
    check_artifact(session, principal.tenant_id, principal.tenant, body.code)
    check_secrets(session, principal.tenant_id, reading.secrets, "manifest.target.secrets", system)
    said = parse_plan(
        plan_data_for(manifest, body.plan.model_dump(exclude_none=True) if body.plan else {})
    )
    # Within the limits as submitted, before the policy is read (the policy may raise them).
    check_trial_limits(
        plan_shards(manifest, said, trials_per_shard=shard_size(said, settings)), settings
    )
    force = policies.in_force(session, principal.tenant_id, principal.tenant, system)
    plan = policies.admit(force, manifest, said).plan
    # A tolerance or lower-bound floor the cap cannot resolve could only hold: refused here.
    # Read after the policy tightened it (a policy only tightens); the error says so when the
    # tolerance is the policy's, not the submission's.
    refuse_unresolvable(plan, plan.envelope_for(manifest), (said, manifest.envelope))
    shards = plan_shards(manifest, plan, trials_per_shard=shard_size(plan, settings))
    check_trial_limits(shards, settings)
    queue = queue_for(settings, principal.tenant, manifest)
    return Admission(reading, system, version, plan, shards, force, queue)


def readmit(
    session: Session,
    row: CandidateRow,
    overrides: Mapping[str, Any],
    settings: Settings,
    tenant: str,
) -> Admission:
    """A re-run of a recorded candidate, through the same checks: its manifest read once, its
    secrets, code and egress checked again (a secret deleted, a tenant's code revoked or an
    egress rule tightened since is refused here, not at the worker), and its plan — the last
    assay's, with `overrides` — raised to the policy in force now (the overrides refused where
    they are looser)."""
    document = session.get(ManifestRow, row.candidate.manifest_digest)
    assert document is not None
    reading = typed(parse_manifest(document.document), row.candidate.code_sha256)
    tenant_id = row.system.tenant_id
    _egress(reading, settings, tenant)
    if reading.code_parts and not tenants.code_allowed(session, tenant_id):
        _refuse_code(reading, tenant)
    check_secrets(session, tenant_id, reading.secrets, "manifest.target.secrets", row.system.name)
    previous = queries.assay(session, row.assay.id)
    assert previous is not None
    # The envelope is the manifest's again, raised to the policy in force (not the last one's).
    base = {k: v for k, v in previous.plan.items() if k != "envelope"}
    force = policies.in_force(session, tenant_id, tenant, row.system.name)
    manifest = reading.manifest
    plan = policies.admit_rerun(
        force, manifest, parse_plan({**base, **overrides}), list(overrides)
    ).plan
    # A re-run is raised, never refused, for a policy that rose since: to the trials its
    # tolerance and floors need (within the trial limits checked below).
    plan = raised_to_resolve(plan, plan.envelope_for(manifest))
    shards = plan_shards(manifest, plan, trials_per_shard=shard_size(plan, settings))
    check_trial_limits(shards, settings)
    queue = queue_for(settings, tenant, manifest)
    return Admission(reading, row.system.name, row.candidate.version, plan, shards, force, queue)


def _egress(reading: TypedManifest, settings: Settings, tenant: str) -> None:
    if not reading.urls:
        return
    try:
        EgressPolicy.from_settings(settings, tenant=tenant).check_urls(reading.urls)
    except EgressRefused as exc:
        raise FieldInvalid(f"egress refused: {exc.message}", field=exc.field) from None


def _execution(session: Session, principal: Principal, reading: TypedManifest) -> None:
    """Refuse code parts for a tenant not allowed to run code, naming the first code field and
    its kind. Reads the tenant afresh: a revocation refuses the next submission."""
    if reading.code_parts and not tenants.code_allowed(session, principal.tenant_id):
        _refuse_code(reading, principal.tenant)


def _refuse_code(reading: TypedManifest, tenant: str) -> NoReturn:
    first = reading.code_parts[0]
    raise CodeNotAllowed(
        # The field is the error's own (`field`): named once, never again in the message.
        f"this is {first.kind} code, and tenant {tenant} may not run code on this service; "
        f"use a remote kind (an URL the gate calls), or {allow_hint(tenant)}",
        field=first.field,
    )
