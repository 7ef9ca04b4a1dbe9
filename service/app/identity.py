"""Who is calling: the principal of an API key, and of a dashboard session signed in with one.

A key is looked up afresh on every request and a revoked one is refused from the next request
on; a dashboard session is recorded on the server, so signing out, its expiry or revoking its
key ends it.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlmodel import Session

from service.db import websession
from service.db.apikey import Principal, authenticate, review_conflict


def of_key(session: Session, secret: str) -> Principal | None:
    """The principal of an API key that exists and is not revoked, else None."""
    return authenticate(session, secret)


def signed_in(session: Session, sid: str) -> Principal | None:
    """The key a dashboard session is signed in with, if the session is open and the key not
    revoked."""
    return websession.signed_in(session, sid)


def sign_in(session: Session, sid: str, key_id: uuid.UUID, expires_at: datetime) -> None:
    """Record a dashboard session signed in with `key_id`, until `expires_at`."""
    websession.open_session(session, sid, key_id, expires_at)
    session.commit()


def sign_out(session: Session, sid: str) -> None:
    """End a dashboard session on the server; nothing if it was not open."""
    if websession.end_session(session, sid):
        session.commit()


def review_refusal(session: Session, reviewer: Principal, submitter_key: str | None) -> str | None:
    """Why `reviewer` may not review what `submitter_key` submitted (separation of duties), or
    None."""
    return review_conflict(session, reviewer, submitter_key)
