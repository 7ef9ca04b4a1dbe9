"""A repeated gate read is one indexed lookup of the key with its tenant's system and epoch:
the answer is cached per epoch of its system, and a write that can change it is read at once,
whoever makes it — the API, a worker, another process or the database itself."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

from service.asgi import create_app
from service.db import apikey
from service.db.hotreads import HotReads
from service.db.models import ConfigChange, Hold
from service.db.session import make_engine
from service.keys import KeyRing
from service.settings import Settings
from tests.support.keys import KeyBook
from tests.support.service import ApiServer
from tests.web.seed import seed_candidate

pytestmark = pytest.mark.integration


@dataclass
class Counted:
    client: httpx.Client
    statements: list[str]
    hot: HotReads

    def sent(self) -> list[str]:
        """What the API sent since the last `clear`: its sessions' statements, then one
        `hot:<read>` per hot read (`service.db.hotreads`)."""
        hot = [f"hot:{read}" for read, n in self.hot.sent.items() for _ in range(n)]
        return [*self.statements, *hot]

    def clear(self) -> None:
        self.statements.clear()
        self.hot.sent = dict.fromkeys(self.hot.sent, 0)


@pytest.fixture
def counted(settings: Settings, keys: KeyBook) -> Iterator[Counted]:
    """An API of its own over the suite's database, every statement it sends recorded."""
    engine = make_engine(settings)
    seen: list[str] = []

    def record(*args: Any) -> None:
        seen.append(str(args[2]))

    sa.event.listen(engine, "before_cursor_execute", record)
    app = create_app(settings, engine=engine)
    with (
        ApiServer(app) as server,
        httpx.Client(base_url=server.url, timeout=30.0, headers=keys.headers("ci")) as client,
    ):
        yield Counted(client, seen, app.state.hot_reads)
    engine.dispose()


@dataclass(frozen=True)
class Held:
    system: str
    system_id: uuid.UUID
    hold: uuid.UUID


def held_system(engine: sa.Engine, settings: Settings) -> Held:
    """A system of tenant acme whose one candidate is held."""
    assert settings.keys_dir is not None
    signer = KeyRing(settings.keys_dir).load_or_create()
    name = f"reads-{uuid.uuid4().hex[:8]}"
    with Session(engine) as session:
        recorded = seed_candidate(session, system=name, version="1", signer=signer)
        hold = session.exec(select(Hold).where(Hold.candidate_id == recorded.candidate.id)).one()
        session.commit()
        return Held(name, recorded.candidate.system_id, hold.id)


def read(counted: Counted, system: str) -> tuple[dict[str, Any], list[str]]:
    counted.clear()
    response = counted.client.get(f"/v1/gate/{system}")
    assert response.status_code == 200, response.text
    return response.json(), counted.sent()


def test_a_repeated_read_is_one_lookup_of_the_key_with_its_system(
    counted: Counted, engine: sa.Engine, settings: Settings
) -> None:
    held = held_system(engine, settings)
    first, computed = read(counted, held.system)
    again, repeated = read(counted, held.system)
    assert again == first and first["decision"] == "hold"
    assert len(computed) > 2
    # One statement from the event loop, no session (and so no thread, no pre-ping) at all.
    assert repeated == ["hot:principal+system"], repeated


def test_a_hot_read_whose_connection_the_database_dropped_is_sent_again(
    counted: Counted, engine: sa.Engine, settings: Settings
) -> None:
    held = held_system(engine, settings)
    first, _ = read(counted, held.system)
    with engine.connect() as connection:
        ended = connection.execute(
            sa.text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = 'assaygate-hot-reads' AND datname = current_database()"
            )
        ).scalar_one()
    assert ended >= 1
    again, sent = read(counted, held.system)
    assert again == first
    assert sent.count("hot:principal+system") == 2, "the dropped connection's read was sent again"


def waive(counted: Counted, held: Held, expires: datetime) -> None:
    body = {"reason": "pilot", "expires_at": expires.isoformat()}
    waived = counted.client.post(f"/v1/holds/{held.hold}/waive", json=body)
    assert waived.status_code == 200, waived.text


def test_a_waiver_through_the_api_is_read_at_once(
    counted: Counted, engine: sa.Engine, settings: Settings
) -> None:
    held = held_system(engine, settings)
    assert read(counted, held.system)[0]["decision"] == "hold"
    waive(counted, held, datetime.now(UTC) + timedelta(days=1))
    assert read(counted, held.system)[0]["decision"] == "allow"


def test_a_change_written_straight_to_the_database_is_read_at_once(
    counted: Counted, engine: sa.Engine, settings: Settings
) -> None:
    held = held_system(engine, settings)
    before, _ = read(counted, held.system)
    # What another process's write looks like to this one: no call reached this API.
    with Session(engine) as session:
        change = ConfigChange(
            system_id=held.system_id, component="tools", sha256="f" * 64, trigger=True
        )
        session.add(change)
        session.commit()
    after, statements = read(counted, held.system)
    assert len(statements) > 2, "the answer was computed again"
    assert (before["decision"], after["decision"]) == ("hold", "reopened")


def test_a_waiver_served_from_the_cache_lapses_on_time(
    counted: Counted, engine: sa.Engine, settings: Settings
) -> None:
    held = held_system(engine, settings)
    expires = datetime.now(UTC) + timedelta(seconds=2)
    waive(counted, held, expires)
    assert read(counted, held.system)[0]["decision"] == "allow"
    cached, statements = read(counted, held.system)
    assert cached["decision"] == "allow" and statements == ["hot:principal+system"]
    time.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()) + 0.1)
    # No write happened since: the clock alone ends the waiver, as it does uncached.
    assert read(counted, held.system)[0]["decision"] == "hold"


def test_a_cached_answer_reaches_no_other_tenant_and_no_revoked_key(
    counted: Counted, engine: sa.Engine, settings: Settings, keys: KeyBook
) -> None:
    held = held_system(engine, settings)
    assert read(counted, held.system)[0]["decision"] == "hold"
    assert read(counted, held.system)[1] == ["hot:principal+system"], "the answer is cached now"
    url = f"/v1/gate/{held.system}"
    outsider = keys.key("gate-reader", tenant=f"other-{uuid.uuid4().hex[:6]}")
    foreign = counted.client.get(url, headers=outsider.headers)
    assert foreign.status_code == 404 and foreign.json()["error"]["field"] == "system"
    reader = keys.key(f"gate-reader-{uuid.uuid4().hex[:6]}")
    assert counted.client.get(url, headers=reader.headers).status_code == 200
    with Session(engine) as session:
        row = apikey.get_key(session, reader.id, None)
        assert row is not None and apikey.revoke(session, row)
        session.commit()
    assert counted.client.get(url, headers=reader.headers).status_code == 401
