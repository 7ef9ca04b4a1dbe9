"""The organisation's policy (docs/operations.md, "Organisation policy"): any role of a tenant
reads the bar it is held to; a tenant's admin may raise it, never lower it (lowering is an
operator's, on the command line: `assaygate policy set`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.api.admin_schemas import PolicyLayerPublic, PolicyPublic, PolicySetPublic
from service.api.errors import ERROR_RESPONSES
from service.app import changes, policies
from service.core.decision.policy import OrgPolicy
from service.core.system.text import SYSTEM_NAME_MAX, SYSTEM_NAME_PATTERN
from service.http.deps import PrincipalDep, SessionDep, SignerDep

router = APIRouter(prefix="/v1/policy", tags=["policy"])

SystemQuery = Annotated[
    str | None,
    Query(
        max_length=SYSTEM_NAME_MAX,
        pattern=SYSTEM_NAME_PATTERN,
        description="one system's policy (the tenant's combined with the system's); "
        "omitted: the tenant's own",
    ),
]


def policy_public(view: policies.PolicyView) -> PolicyPublic:
    force = view.force
    return PolicyPublic(
        tenant=force.tenant,
        system=force.system,
        digest=force.digest,
        versions=force.versions,
        policy=force.policy.document(),
        layers=[
            PolicyLayerPublic(
                system=layer.system,
                version=layer.version,
                digest=layer.digest,
                policy=layer.policy.document(),
                set_by=layer.set_by,
                set_at=layer.set_at,
            )
            for layer in view.layers
        ],
    )


@router.get("", response_model=PolicyPublic, responses={503: ERROR_RESPONSES[503]})
def get_policy(
    session: SessionDep, principal: PrincipalDep, system: SystemQuery = None
) -> PolicyPublic:
    """The policy the tenant (or one of its systems) is held to now."""
    return policy_public(policies.show(session, principal.tenant_id, principal.tenant, system))


@router.put(
    "",
    response_model=PolicySetPublic,
    responses={k: ERROR_RESPONSES[k] for k in (403, 409, 422, 503)},
)
def put_policy(
    body: OrgPolicy,
    session: SessionDep,
    signer: SignerDep,
    principal: PrincipalDep,
    system: SystemQuery = None,
) -> PolicySetPublic:
    """Raise the tenant's policy (or one system's) to `body`: a new version, audited, that
    reopens each standing dossier assayed under another policy. A field looser than the current
    version is `403 policy_lowered`: only an operator lowers the bar; one that leaves a system
    no plan rule its tenant's policy allows is `409`."""
    done = changes.raise_policy(
        session, signer, principal, system, body.model_dump(mode="json", exclude_none=True)
    )
    shown = policy_public(done.view)
    return PolicySetPublic(**shown.model_dump(), changed=done.changed, reopened=done.reopened)
