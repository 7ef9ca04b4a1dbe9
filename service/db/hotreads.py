"""The two reads every gate request makes, without a thread: the key's principal and the
system's gate epoch, each one indexed `SELECT` on a pooled psycopg async connection (PostgreSQL).

A SQLAlchemy session costs a hop to a worker thread, a pool checkout with its pre-ping and about
a millisecond of Python per read; the gate answers a repeated read from its per-epoch cache
(`service.app.gate.AnswerCache`), so these lookups are all the database work such a read does.
They are plain autocommit reads (psycopg prepares them on the server after a few uses) that
return exactly what the session path returns: `apikey.authenticate`'s principal, and the
system's id and epoch.

A pool belongs to the event loop that opened it (the server's, in the app's lifespan); a request
served on any other loop, or on SQLite, takes the session path instead (`serves_this_loop`).
A connection found broken (the database restarted) is dropped by the pool and the read tried
again, on the next pooled connection or a fresh one: a restart breaks every idle connection at
once, so a read may meet as many broken ones as the pool holds before a live one. When the pool
has no connection to give within `WAIT_S` (the database is down, or every connection is busy) a
read raises `Unavailable` and the caller takes the session path, which tries a connection of its
own and fails at once in an outage (503), as every other route does: no request waits out the
pool's timeout.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from sqlalchemy.engine import Engine

from service.db.apikey import Principal, hash_key, plausible_secret, roles_of

#: How long a hot read waits for a pooled connection before the session path takes over. A read
#: holds its connection for well under a millisecond, so only an outage waits this long.
WAIT_S = 0.2


class Unavailable(Exception):
    """No pooled connection came in time: take the session path for this read."""


_PRINCIPAL = """
SELECT k.id, k.roles, k.prefix, k.created_by, k.revoked_at,
       t.id, t.name, p.id, p.name, p.kind
FROM api_key k
JOIN tenant t ON t.id = k.tenant_id
JOIN person p ON p.id = k.person_id
WHERE k.key_sha256 = %s
"""

# The same, with the key's tenant's system of a name and its epoch (NULLs when it has none):
# a gate read's whole database work in one round trip.
_PRINCIPAL_AND_SYSTEM = """
SELECT k.id, k.roles, k.prefix, k.created_by, k.revoked_at,
       t.id, t.name, p.id, p.name, p.kind, s.id, s.gate_epoch
FROM api_key k
JOIN tenant t ON t.id = k.tenant_id
JOIN person p ON p.id = k.person_id
LEFT JOIN system s ON s.tenant_id = k.tenant_id AND s.name = %s
WHERE k.key_sha256 = %s
"""

_SYSTEM = "SELECT id, gate_epoch FROM system WHERE tenant_id = %s AND name = %s"


@dataclass(frozen=True)
class SystemEpoch:
    """A system's id and the gate epoch the database holds for it now."""

    id: uuid.UUID
    gate_epoch: int


@dataclass(frozen=True)
class KeyAndSystem:
    """A key's principal (None: unknown or revoked) and its tenant's system of the name asked
    for (None: the tenant has none)."""

    principal: Principal | None
    system: SystemEpoch | None


class HotReads:
    """The hot reads over one connection pool, bound to the loop that opened it."""

    def __init__(self, conninfo: str, *, size: int, timeout: float) -> None:
        self._pool = AsyncConnectionPool(
            conninfo,
            min_size=1,
            max_size=size,
            timeout=timeout,
            kwargs={
                "autocommit": True,
                "connect_timeout": max(1, int(timeout / 2)),
                # So an operator (and a test) can tell these connections in pg_stat_activity.
                "application_name": "assaygate-hot-reads",
            },
            open=False,
            name="assaygate-hot-reads",
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Statements sent, by read: the operator's (and the tests') view of the hot path.
        self.sent: dict[str, int] = {"principal": 0, "system": 0, "principal+system": 0}

    @classmethod
    def for_engine(cls, engine: Engine, *, size: int, timeout: float) -> HotReads | None:
        """Hot reads on the engine's PostgreSQL database; None for SQLite (the session path
        serves the embedded default, where a read is a function call, not a round trip)."""
        if engine.url.get_backend_name() != "postgresql":
            return None
        url = engine.url.set(drivername="postgresql")
        return cls(url.render_as_string(hide_password=False), size=size, timeout=timeout)

    async def open(self) -> None:
        """Bind to the running loop. Does not wait for the database: a service started during
        an outage serves 503s until it is back, like the session path."""
        self._loop = asyncio.get_running_loop()
        await self._pool.open(wait=False)

    async def close(self) -> None:
        self._loop = None
        await self._pool.close()

    def serves_this_loop(self) -> bool:
        return self._loop is not None and self._loop is asyncio.get_running_loop()

    async def principal(self, secret: str) -> Principal | None:
        """`apikey.authenticate` in one round trip: a key that exists and is not revoked."""
        if not plausible_secret(secret):
            return None
        row = await self._one("principal", _PRINCIPAL, (hash_key(secret),))
        return None if row is None else _principal(row)

    async def principal_and_system(self, secret: str, name: str) -> KeyAndSystem:
        """`principal` and `system` in one round trip: the system is looked up in the key's own
        tenant, and only a valid key's lookup is ever returned."""
        if not plausible_secret(secret):
            return KeyAndSystem(None, None)
        query, params = _PRINCIPAL_AND_SYSTEM, (name, hash_key(secret))
        row = await self._one("principal+system", query, params)
        principal = None if row is None else _principal(row)
        if principal is None or row is None or row[10] is None:
            return KeyAndSystem(principal, None)
        return KeyAndSystem(principal, SystemEpoch(row[10], int(row[11])))

    async def system(self, tenant_id: uuid.UUID, name: str) -> SystemEpoch | None:
        """The tenant's system of this name and its epoch (the unique index on both)."""
        row = await self._one("system", _SYSTEM, (tenant_id, name))
        return None if row is None else SystemEpoch(row[0], int(row[1]))

    async def _one(self, read: str, query: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        # Each broken connection met is dropped, so at most max_size of them precede a fresh one.
        attempts = self._pool.max_size + 1
        for attempt in range(1, attempts + 1):
            try:
                async with self._pool.connection(timeout=WAIT_S) as conn:
                    self.sent[read] += 1
                    cursor = await conn.execute(query, params)
                    return await cursor.fetchone()
            except PoolTimeout:
                raise Unavailable(read) from None
            except psycopg.OperationalError:
                # The pool has dropped the broken connection; a read is safe to send again.
                if attempt == attempts:
                    raise
        raise AssertionError("unreachable")


def _principal(row: tuple[Any, ...]) -> Principal | None:
    key_id, roles, prefix, created_by, revoked_at, tenant_id, tenant, person_id = row[:8]
    person, kind = row[8:10]
    if revoked_at is not None:
        return None
    return Principal(
        key_id=key_id,
        tenant_id=tenant_id,
        tenant=tenant,
        roles=roles_of(roles),
        prefix=prefix,
        person_id=person_id,
        person=person,
        person_kind=kind,
        minted_by=created_by,
    )


def on_this_loop(reads: HotReads | None) -> HotReads | None:
    """`reads` when they serve the loop this code runs on, else None (take the session path)."""
    return reads if reads is not None and reads.serves_this_loop() else None
