"""A cached gate answer, served before routing.

Deploy pipelines poll `GET /v1/gate/{system}`, and a repeated read is a cached answer behind one
indexed statement (`service.db.hotreads`). Under load FastAPI's routing and dependency solving
cost that read more than its statement does, so this middleware answers exactly that case
itself: a bearer key the statement finds unrevoked, with a role the access table allows on the
gate route, in whose tenant the system exists, and an answer cached for the system's current
epoch. It reads the same statement, the same access table, the same text check and the same
cache as the route, and writes nothing.

Everything else goes to the route unchanged: no hot reads (SQLite, another event loop), no or
another kind of credential, a refused key or role, an unknown system, a cache miss, a database
outage, any query parameter but one valid `version`. The route then answers it, its refusals
included, as it always has; a refusal costs its statement twice, a read served here costs it
once.
"""

from __future__ import annotations

import re
import time
from urllib.parse import parse_qsl

from fastapi.security.utils import get_authorization_scheme_param
from starlette.types import ASGIApp, Receive, Scope, Send

from service.api.routes.gate import GATE_PATH, MAX_TEXT
from service.app.records import Unavailable, on_this_loop, utcnow
from service.core.system.text import TextInvalid, check_text
from service.http.access import roles_for

_PATH = re.compile(r"/v1/gate/([^/]+)")


class CachedGateRead:
    """ASGI middleware: a gate read whose answer is cached is answered here (see the module)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            body = await cached_answer(scope)
            if body is not None:
                await send(
                    {
                        "type": "http.response.start",
                        "status": 200,
                        "headers": [
                            (b"content-length", str(len(body)).encode()),
                            (b"content-type", b"application/json"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


async def cached_answer(scope: Scope) -> bytes | None:
    """The cached answer this request may be given without the route, else None."""
    found = _request(scope)
    if found is None:
        return None
    system, version, secret = found
    state = scope["app"].state
    reads = on_this_loop(state.hot_reads)
    allowed = roles_for("GET", GATE_PATH)
    if reads is None or not allowed:
        return None
    started = time.perf_counter()
    try:
        both = await reads.principal_and_system(secret, system)
    except Unavailable:
        return None
    principal = both.principal
    if principal is None or not principal.has_any(allowed) or both.system is None:
        return None
    body: bytes | None = state.gate_answers.get(both.system, version, utcnow())
    if body is not None:
        # Timed only when answered here: a miss is timed once, by the route.
        state.metrics.gate_check_seconds.observe(time.perf_counter() - started)
        state.metrics.gate_reads_before_routing.inc()
    return body


def _request(scope: Scope) -> tuple[str, str | None, str] | None:
    """(system, version, bearer secret) of a gate read the route would accept as valid input,
    parsed as Starlette and FastAPI parse it; None for anything else."""
    if scope.get("root_path"):
        return None
    match = _PATH.fullmatch(scope["path"])
    if match is None:
        return None
    system = match.group(1)
    pairs = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
    version: str | None = None
    if pairs:
        if len(pairs) != 1 or pairs[0][0] != "version":
            return None
        version = pairs[0][1]
        if not 1 <= len(version) <= MAX_TEXT:
            return None
    if len(system) > MAX_TEXT:
        return None
    try:
        check_text(system, "system", line=True)
        if version is not None:
            check_text(version, "version", line=True)
    except TextInvalid:
        return None
    authorization = next(
        (value.decode("latin-1") for name, value in scope["headers"] if name == b"authorization"),
        None,
    )
    scheme, secret = get_authorization_scheme_param(authorization)
    if not (authorization and scheme and secret) or scheme.lower() != "bearer":
        return None
    return system, version, secret
