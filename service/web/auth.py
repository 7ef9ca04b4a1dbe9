"""Dashboard sessions, sign-in and cross-site request forgery tokens.

A session is a signed cookie (HMAC-SHA256 under a secret kept next to the signing keys): a
random session id, the signed-in identity if any, and an expiry. Every form carries a token
derived from the session id, so a page on another site cannot post on a reviewer's behalf; the
cookie is also `SameSite=Lax` and `HttpOnly`.

Who may sign in is decided in one place, `authenticate()`: an API key, exchanged for its id and
roles. What a signed-in key may see and do is decided in `service.web.access`, which looks the key
up again on every request (for its tenant, and so that a revoked key stops working at once).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Request
from sqlmodel import Session

from service.db.apikey import authenticate as authenticate_key
from service.settings import Settings

COOKIE = "assaygate_session"
SESSION_SECONDS = 8 * 3600
SECRET_FILE = "web-session.secret"


class CsrfInvalid(Exception):
    """A form post without the token of its session."""


@dataclass(frozen=True)
class Identity:
    name: str
    roles: frozenset[str] = field(default_factory=frozenset)

    @property
    def reviewer(self) -> bool:
        return "reviewer" in self.roles


@dataclass(frozen=True)
class WebSession:
    sid: str
    identity: Identity | None
    expires: int
    # True when this request created the session: the response must set the cookie.
    fresh: bool = False


def authenticate(session: Session, credential: str) -> Identity | None:
    """Exchange what the sign-in form received — an API key — for an identity, or None.

    The identity's name is the key's id (never the key): each review or submission made through
    the dashboard looks that key up again, so a revoked key stops working at once. Its roles are
    the key's roles.
    """
    principal = authenticate_key(session, credential.strip())
    if principal is None:
        return None
    return Identity(name=principal.actor, roles=frozenset(r.value for r in principal.roles))


# ------------------------------------------------------------------------------ the secret


def _load_secret(directory: Path) -> bytes:
    path = directory / SECRET_FILE
    try:
        return bytes.fromhex(path.read_text().strip())
    except FileNotFoundError:
        pass
    directory.mkdir(parents=True, exist_ok=True)
    fresh = secrets.token_bytes(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        # Another process wrote it first; use theirs so sessions work across processes.
        return bytes.fromhex(path.read_text().strip())
    with os.fdopen(fd, "w") as out:
        out.write(fresh.hex())
    return fresh


def secret_of(request: Request) -> bytes:
    """Read once per app (on the first page request, never at import)."""
    cached: bytes | None = getattr(request.app.state, "web_secret", None)
    if cached is None:
        settings: Settings = request.app.state.settings
        assert settings.keys_dir is not None
        cached = _load_secret(settings.keys_dir)
        request.app.state.web_secret = cached
    return cached


# ----------------------------------------------------------------------------- the cookie


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(secret: bytes, purpose: str, message: bytes) -> bytes:
    return hmac.new(secret, purpose.encode() + b"\0" + message, hashlib.sha256).digest()


def encode_session(secret: bytes, ws: WebSession) -> str:
    body: dict[str, object] = {"sid": ws.sid, "exp": ws.expires}
    if ws.identity is not None:
        body["who"] = ws.identity.name
        body["roles"] = sorted(ws.identity.roles)
    raw = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    return f"{_b64(raw)}.{_b64(_mac(secret, 'session', raw))}"


def decode_session(secret: bytes, cookie: str, *, now: float | None = None) -> WebSession | None:
    try:
        raw_b64, mac_b64 = cookie.split(".", 1)
        raw, mac = _unb64(raw_b64), _unb64(mac_b64)
    except (ValueError, UnicodeEncodeError):
        return None
    if not hmac.compare_digest(mac, _mac(secret, "session", raw)):
        return None
    try:
        body = json.loads(raw)
        sid, expires = str(body["sid"]), int(body["exp"])
    except (ValueError, KeyError, TypeError):
        return None
    if expires < (now if now is not None else time.time()):
        return None
    who = body.get("who")
    identity = (
        Identity(str(who), frozenset(str(r) for r in body.get("roles", [])))
        if isinstance(who, str)
        else None
    )
    return WebSession(sid=sid, identity=identity, expires=expires)


def new_session(identity: Identity | None = None) -> WebSession:
    return WebSession(
        sid=secrets.token_urlsafe(18),
        identity=identity,
        expires=int(time.time()) + SESSION_SECONDS,
        fresh=True,
    )


def csrf_token(secret: bytes, ws: WebSession) -> str:
    return _b64(_mac(secret, "csrf", ws.sid.encode()))


def check_csrf(secret: bytes, ws: WebSession, token: str | None) -> None:
    if not token or not hmac.compare_digest(token, csrf_token(secret, ws)):
        raise CsrfInvalid("the form's token does not match this session; reload the page")


# ---------------------------------------------------------------------------- dependencies


def get_web_session(request: Request) -> WebSession:
    """This browser's session, or a fresh anonymous one (set on the response by the page)."""
    cookie = request.cookies.get(COOKIE)
    found = decode_session(secret_of(request), cookie) if cookie else None
    return found or new_session()


WebSessionDep = Annotated[WebSession, Depends(get_web_session)]
