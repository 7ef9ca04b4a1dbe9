"""Who may call what: one table from (method, route path) to the roles allowed, read by the one
dependency every API route runs. A route missing from the table is refused (fail closed), and a
test iterates the table against the app's routes.

Reads are open to every role of the tenant; writes name their role. Roles do not nest: an admin
key manages keys, systems and triggers, but submits or reviews only with those roles too (so a
reviewer cannot waive a hold with the key that submitted the candidate).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.engine import Engine
from sqlmodel import Session

from service.app import identity
from service.app.records import KeyRole, Principal, SystemEpoch, Unavailable, on_this_loop
from service.http import browser as web_auth
from service.http.errors import Forbidden, Unauthenticated

SUBMITTER, REVIEWER, ADMIN = KeyRole.SUBMITTER, KeyRole.REVIEWER, KeyRole.ADMIN
ANY_ROLE: frozenset[KeyRole] = frozenset(KeyRole)

#: Routes anyone may call, without a key.
PUBLIC: frozenset[tuple[str, str]] = frozenset(
    {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/v1/keys")}
)

#: Every authenticated route and the roles that may call it.
ROUTE_ROLES: dict[tuple[str, str], frozenset[KeyRole]] = {
    ("POST", "/v1/candidates"): frozenset({SUBMITTER}),
    ("POST", "/v1/artifacts"): frozenset({SUBMITTER}),
    ("GET", "/v1/artifacts/{digest}"): ANY_ROLE,
    ("GET", "/v1/candidates"): ANY_ROLE,
    ("GET", "/v1/candidates/{candidate_id}"): ANY_ROLE,
    ("GET", "/v1/candidates/{candidate_id}/dossier"): ANY_ROLE,
    ("GET", "/v1/candidates/{candidate_id}/dossiers"): ANY_ROLE,
    ("POST", "/v1/candidates/{candidate_id}/rerun"): frozenset({REVIEWER}),
    ("GET", "/v1/assays/{assay_id}"): ANY_ROLE,
    ("POST", "/v1/assays/{assay_id}/abort"): frozenset({REVIEWER}),
    ("GET", "/v1/dossiers/{dossier_id}"): ANY_ROLE,
    ("GET", "/v1/dossiers/{dossier_id}/envelope"): ANY_ROLE,
    ("GET", "/v1/dossiers/{dossier_id}/payload"): ANY_ROLE,
    ("GET", "/v1/gate/{system}"): ANY_ROLE,
    ("GET", "/v1/gate"): ANY_ROLE,
    ("GET", "/v1/holds"): ANY_ROLE,
    ("GET", "/v1/holds/{hold_id}"): ANY_ROLE,
    ("POST", "/v1/holds/{hold_id}/waive"): frozenset({REVIEWER}),
    ("POST", "/v1/holds/{hold_id}/reject"): frozenset({REVIEWER}),
    ("GET", "/v1/systems"): ANY_ROLE,
    ("GET", "/v1/systems/{system}/triggers"): ANY_ROLE,
    ("PUT", "/v1/systems/{system}/triggers"): frozenset({ADMIN}),
    # Reporting a production change only ever reopens a gate, so CI may do it too.
    ("POST", "/v1/systems/{system}/config-changes"): frozenset({SUBMITTER, ADMIN}),
    ("GET", "/v1/events"): ANY_ROLE,
    ("GET", "/v1/api-keys"): frozenset({ADMIN}),
    ("POST", "/v1/api-keys"): frozenset({ADMIN}),
    ("DELETE", "/v1/api-keys/{key_id}"): frozenset({ADMIN}),
    # A tenant's secrets: its admins only; even their names are not for submitters or reviewers.
    ("GET", "/v1/secrets"): frozenset({ADMIN}),
    ("PUT", "/v1/secrets/{name}"): frozenset({ADMIN}),
    ("DELETE", "/v1/secrets/{name}"): frozenset({ADMIN}),
    ("GET", "/v1/tenant"): ANY_ROLE,
    # The bar a tenant is held to is no secret: a submission it refuses names it anyway. Its
    # admins may raise it (never lower it: that is an operator's, `assaygate policy set`).
    ("GET", "/v1/policy"): ANY_ROLE,
    ("PUT", "/v1/policy"): frozenset({ADMIN}),
    # Counts across every tenant: operators only.
    ("GET", "/metrics"): frozenset({ADMIN}),
}

#: Routes whose key lookup also reads the key's tenant's system named in the path, with its gate
#: epoch: a cached gate read is then one round trip (`system_looked_up`).
WITH_SYSTEM: frozenset[tuple[str, str]] = frozenset({("GET", "/v1/gate/{system}")})


@dataclass(frozen=True)
class SystemLookup:
    """What the key's lookup found of the path's system (None: the tenant has none)."""

    found: SystemEpoch | None


def system_looked_up(request: Request) -> SystemLookup | None:
    """The path's system as `authorize` read it with the key; None if it did not."""
    lookup: SystemLookup | None = getattr(request.state, "system_lookup", None)
    return lookup


bearer = HTTPBearer(
    auto_error=False,
    description="An API key (`ag_…`) from `assaygate keys create` or `POST /v1/api-keys`.",
)


def roles_for(method: str, path: str) -> frozenset[KeyRole] | None:
    """The roles allowed on a route; None for a public route; empty for an unknown one."""
    if (method, path) in PUBLIC:
        return None
    return ROUTE_ROLES.get((method, path), frozenset())


async def authorize(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal | None:
    """Authenticate the bearer key (read afresh: a revoked key fails at once) and check the
    route's roles. None only on a public route. A coroutine: a key's lookup is a hot read on
    the event loop where the app has one (`service.db.hotreads`), else a session on a thread."""
    route = request.scope.get("route")
    path = getattr(route, "path", request.url.path)
    allowed = roles_for(request.method, path)
    if allowed is None:
        return None
    engine: Engine = request.app.state.engine
    if credentials is None or not credentials.credentials:
        principal = await run_in_threadpool(_signed_in, request, engine)
        if principal is None:
            raise Unauthenticated("send an API key as `Authorization: Bearer <key>`")
    else:
        with_system = (request.method, path) in WITH_SYSTEM
        system = request.path_params.get("system") if with_system else None
        principal = await _authenticate(request, engine, credentials.credentials, system)
    if principal is None:
        raise Unauthenticated("the API key is unknown or revoked")
    if not principal.has_any(allowed):
        need = ", ".join(sorted(r.value for r in allowed)) or "a route in the access table"
        raise Forbidden(f"this key may not do this (needs: {need})")
    request.state.principal = principal
    return principal


async def _authenticate(
    request: Request, engine: Engine, secret: str, system: str | None
) -> Principal | None:
    reads = on_this_loop(request.app.state.hot_reads)
    if reads is not None:
        with contextlib.suppress(Unavailable):
            if system is None:
                return await reads.principal(secret)
            both = await reads.principal_and_system(secret, system)
            request.state.system_lookup = SystemLookup(both.system)
            return both.principal
    return await run_in_threadpool(_authenticate_in_session, engine, secret)


def _authenticate_in_session(engine: Engine, secret: str) -> Principal | None:
    with Session(engine) as session:
        return identity.of_key(session, secret)


def _signed_in(request: Request, engine: Engine) -> Principal | None:
    """A read from a dashboard page (its progress poll, an envelope download): the signed-in
    session's key, looked up on the server so a signed-out session or a revoked key stops
    working. Reads only: a write from a
    browser goes through the dashboard's own forms, which carry a CSRF token."""
    if request.method not in ("GET", "HEAD"):
        return None
    cookie = request.cookies.get(web_auth.COOKIE)
    ws = web_auth.decode_session(web_auth.secret_of(request), cookie) if cookie else None
    if ws is None:
        return None
    with Session(engine) as session:
        return identity.signed_in(session, ws.sid)


async def require_principal(
    principal: Annotated[Principal | None, Depends(authorize)],
) -> Principal:
    if principal is None:  # a public route declared a principal: a programming error
        raise Unauthenticated("this route needs an API key")
    return principal
