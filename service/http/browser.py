"""Dashboard sessions, sign-in and cross-site request forgery tokens.

The browser holds a signed cookie (HMAC-SHA256 under a secret of the API's own,
`ASSAYGATE_SESSION_SECRET_FILE`, never in the signing-keys folder workers mount): a random
session id and an expiry, nothing else. Signing in records the session on the server with the
key it signed in with (`service.db.websession`); every request looks it up again, so signing out
or revoking the key ends it at once — a saved cookie is worth nothing afterwards. Every form
carries a token derived from the session id, so a page on another site cannot post on a
reviewer's behalf; the cookie is also `SameSite=Lax` and `HttpOnly`.

Who may sign in is decided in one place, `authenticate()`: an API key that is not revoked. What a
signed-in key may see and do is decided in `service.web.access`.
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

from service.app import identity
from service.app.records import Principal
from service.settings import LEGACY_SESSION_SECRET, Settings

COOKIE = "assaygate_session"
SESSION_SECONDS = 8 * 3600


class CsrfInvalid(Exception):
    """A form post without the token of its session."""


@dataclass(frozen=True)
class Identity:
    """Who the dashboard shows as signed in: the person behind the key, and the key."""

    name: str
    key_id: str = ""
    roles: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def of(cls, principal: Principal) -> Identity:
        return cls(
            name=principal.person,
            key_id=str(principal.key_id),
            roles=frozenset(r.value for r in principal.roles),
        )


@dataclass(frozen=True)
class WebSession:
    sid: str
    identity: Identity | None
    expires: int
    # True when this request created the session: the response must set the cookie.
    fresh: bool = False


def authenticate(session: Session, credential: str) -> Principal | None:
    """Exchange what the sign-in form received — an API key — for its principal, or None."""
    return identity.of_key(session, credential.strip())


# ------------------------------------------------------------------------------ the secret


def _load_secret(path: Path) -> bytes:
    try:
        return bytes.fromhex(path.read_text().strip())
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = secrets.token_bytes(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        # Another process wrote it first; use theirs so sessions work across processes.
        return bytes.fromhex(path.read_text().strip())
    with os.fdopen(fd, "w") as out:
        out.write(fresh.hex())
    return fresh


def load_secret(settings: Settings) -> bytes:
    """The API's session secret (created 0600 on first use). A secret an older version left in
    the signing-keys folder, which workers mount, is deleted: it signs nothing any more."""
    assert settings.session_secret_file is not None and settings.keys_dir is not None
    secret = _load_secret(settings.session_secret_file)
    (settings.keys_dir / LEGACY_SESSION_SECRET).unlink(missing_ok=True)
    return secret


def secret_of(request: Request) -> bytes:
    """Read once per app (at start-up, or on the first page request; never at import)."""
    cached: bytes | None = getattr(request.app.state, "web_secret", None)
    if cached is None:
        cached = load_secret(request.app.state.settings)
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
    """The cookie: the session id and its expiry, signed. Who is signed in lives on the server."""
    body: dict[str, object] = {"sid": ws.sid, "exp": ws.expires}
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
    return WebSession(sid=sid, identity=None, expires=expires)


def new_session(identity: Identity | None = None) -> WebSession:
    """A fresh session id (at first contact, and again at sign-in against session fixation)."""
    return WebSession(
        sid=secrets.token_urlsafe(24),
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
    """This browser's session id, or a fresh anonymous one (set on the response by the page).
    Whether it is signed in is looked up on the server by `service.web.access`."""
    cookie = request.cookies.get(COOKIE)
    found = decode_session(secret_of(request), cookie) if cookie else None
    return found or new_session()


WebSessionDep = Annotated[WebSession, Depends(get_web_session)]
