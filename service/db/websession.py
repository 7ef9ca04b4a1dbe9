"""Signed-in dashboard sessions, kept on the server so that they can be ended.

The browser holds a random session id (in a signed cookie); the database holds only its SHA-256,
the key it signed in with and when it expires. Every request looks the session up again: a
session that was signed out, has expired, or whose key was revoked is not signed in any more.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlmodel import Session, col

from service.db.apikey import Principal, principal_by_id
from service.db.models import BrowserSession, as_utc, utcnow

# Rows this long past their expiry are deleted when a new session starts.
KEEP_EXPIRED = timedelta(days=1)


def _digest(sid: str) -> str:
    return hashlib.sha256(sid.encode()).hexdigest()


def open_session(
    session: Session,
    sid: str,
    key_id: uuid.UUID,
    expires_at: datetime,
    *,
    now: datetime | None = None,
) -> None:
    """Record a signed-in session (the caller commits)."""
    now = now or utcnow()
    session.execute(
        sa.delete(BrowserSession).where(col(BrowserSession.expires_at) < now - KEEP_EXPIRED)
    )
    session.add(
        BrowserSession(id=_digest(sid), key_id=key_id, created_at=now, expires_at=expires_at)
    )
    session.flush()


def signed_in(session: Session, sid: str, *, now: datetime | None = None) -> Principal | None:
    """The key a session is signed in with, if the session is open and the key not revoked."""
    row = session.get(BrowserSession, _digest(sid))
    if row is None or row.ended_at is not None:
        return None
    if as_utc(row.expires_at) <= (now or utcnow()):
        return None
    return principal_by_id(session, row.key_id)


def end_session(session: Session, sid: str, *, now: datetime | None = None) -> bool:
    """Sign a session out (the caller commits); False if it was not open."""
    row = session.get(BrowserSession, _digest(sid))
    if row is None or row.ended_at is not None:
        return False
    row.ended_at = now or utcnow()
    session.add(row)
    session.flush()
    return True
