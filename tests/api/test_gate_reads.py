"""A repeated gate read is one indexed lookup of the key with its tenant's system and epoch:
the answer is cached per epoch of its system, and a write that can change it is read at once,
whoever makes it — the API, a worker, another process or the database itself."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

from service.app import reviews
from service.app.gate import AnswerCache, Basis, Standing, Word
from service.asgi import create_app
from service.db import apikey
from service.db.hotreads import HotReads, SystemEpoch
from service.db.models import ConfigChange, Hold, System
from service.db.session import make_engine
from service.http.metrics import Metrics
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
    metrics: Metrics
    answers: AnswerCache
    #: The API's own engine (the suite's `engine` fixture is another one, over the same database).
    engine: sa.Engine

    def sent(self) -> list[str]:
        """What the API sent since the last `clear`: its sessions' statements, then one
        `hot:<read>` per hot read (`service.db.hotreads`)."""
        hot = [f"hot:{read}" for read, n in self.hot.sent.items() for _ in range(n)]
        return [*self.statements, *hot]

    def before_routing(self) -> float:
        """Gate reads this API answered from the cache before routing (service/api/cached_gate)."""
        value = self.metrics.registry.get_sample_value("assaygate_gate_reads_before_routing_total")
        assert value is not None
        return value

    def clear(self) -> None:
        self.statements.clear()
        self.hot.sent = dict.fromkeys(self.hot.sent, 0)


@pytest.fixture
def counted(settings: Settings, keys: KeyBook) -> Iterator[Counted]:
    """An API of its own over the suite's database, every statement it sends recorded; its
    pools as a production API's (the suite's keep one idle connection each)."""
    settings = settings.model_copy(update={"db_pool_size": 3, "db_pool_overflow": None})
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
        yield Counted(
            client, seen, app.state.hot_reads, app.state.metrics, app.state.gate_answers, engine
        )
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


def test_a_hot_read_after_the_database_dropped_every_pooled_connection_is_answered(
    counted: Counted, engine: sa.Engine, settings: Settings
) -> None:
    # A restart breaks every idle connection at once. Retrying once was not enough when the pool
    # held several: the shared API answered 503 database_unavailable to the next tests.
    held = held_system(engine, settings)
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda _: read(counted, held.system)[0], range(32)))
    assert {a["decision"] for a in answers} == {"hold"}
    with engine.connect() as connection:
        ended = connection.execute(
            sa.text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = 'assaygate-hot-reads' AND datname = current_database()"
            )
        ).scalar_one()
    assert ended >= 3, "the pool held several connections to break"
    for _ in range(3):
        response = counted.client.get(f"/v1/gate/{held.system}")
        assert response.status_code == 200, response.text
        assert response.json()["decision"] == "hold"


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
    # The two reads that see the waiver in force must both land inside its window, however slow
    # the machine: a window they missed is tried again, four times as long, on a new system.
    for window in (2.0, 8.0, 32.0):
        held = held_system(engine, settings)
        expires = datetime.now(UTC) + timedelta(seconds=window)
        waive(counted, held, expires)
        first = read(counted, held.system)[0]["decision"]
        cached, statements = read(counted, held.system)
        if datetime.now(UTC) < expires:
            break
    else:
        pytest.fail("no window was long enough for two reads")
    assert first == "allow"
    assert cached["decision"] == "allow" and statements == ["hot:principal+system"]
    time.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()) + 0.1)
    # No write happened since: the clock alone ends the waiver, as it does uncached.
    assert read(counted, held.system)[0]["decision"] == "hold"


def test_a_read_that_meets_a_review_reopened_meanwhile_answers_from_one_snapshot(
    counted: Counted, engine: sa.Engine, settings: Settings
) -> None:
    # A reconciler signs a lapse while the API is between two statements of its answer: the
    # waiver's dossier was read, the hold is read next. Read apart, they pair the waiver's
    # `allow` with a hold already reopened, and the answer is cached with no expiry to end it.
    # The waiver runs for an hour, so no other reconciler on this database lapses it: this one
    # is told the hour has passed.
    held = held_system(engine, settings)
    expires = datetime.now(UTC) + timedelta(hours=1)
    waive(counted, held, expires)
    with Session(engine) as session:
        system = session.get(System, held.system_id)
        assert system is not None
        epoch = SystemEpoch(system.id, system.gate_epoch)
    assert settings.keys_dir is not None
    signer = KeyRing(settings.keys_dir).load_or_create()
    signed: list[int] = []

    def lapse_meanwhile(*args: Any) -> None:
        if signed or " dossier" not in str(args[2]):
            return
        with Session(engine) as session:
            signed.append(reviews.expire_lapsed(session, signer, now=expires))
            session.commit()

    sa.event.listen(counted.engine, "after_cursor_execute", lapse_meanwhile)
    try:
        answer, _ = read(counted, held.system)
    finally:
        sa.event.remove(counted.engine, "after_cursor_execute", lapse_meanwhile)
    assert signed == [1], "the lapse was signed between two statements of the answer"
    # The answer is the one snapshot's: the waiver in force until its expiry, and cached so.
    assert (answer["decision"], answer["basis"]) == ("allow", "waived")
    assert counted.answers.get(epoch, None, expires - timedelta(seconds=1)) is not None
    assert counted.answers.get(epoch, None, expires) is None, "cached past the waiver's expiry"
    # The next read is of the lapse's version.
    again, _ = read(counted, held.system)
    assert (again["decision"], again["basis"]) == ("hold", "expired")
    assert "waiver_expired" in {r["code"] for r in again["reasons"]}
    assert again["dossier"]["version"] == answer["dossier"]["version"] + 1


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
    assert counted.before_routing() == 1, "only the first key's repeated read was served early"
    reader = keys.key(f"gate-reader-{uuid.uuid4().hex[:6]}")
    assert counted.client.get(url, headers=reader.headers).status_code == 200
    with Session(engine) as session:
        row = apikey.get_key(session, reader.id, None)
        assert row is not None and apikey.revoke(session, row)
        session.commit()
    assert counted.client.get(url, headers=reader.headers).status_code == 401


def test_a_cached_answer_is_served_before_routing_exactly_as_the_route_serves_it(
    counted: Counted, engine: sa.Engine, settings: Settings
) -> None:
    held = held_system(engine, settings)
    for url in (f"/v1/gate/{held.system}", f"/v1/gate/{held.system}?version=1"):
        before = counted.before_routing()
        computed = counted.client.get(url)
        assert counted.before_routing() == before, "a miss goes to the route"
        counted.clear()
        served = counted.client.get(url)
        assert counted.before_routing() == before + 1
        assert served.status_code == computed.status_code == 200
        assert served.content == computed.content
        assert served.headers["content-type"] == computed.headers["content-type"]
        assert counted.sent() == ["hot:principal+system"]


PLANTED = b'{"planted": true}'


def plant(counted: Counted, engine: sa.Engine, system_id: uuid.UUID, version: str | None) -> None:
    """Put an answer straight into the API's cache under input the route refuses: whatever
    else is true of the request, the cached path must never serve it."""
    with Session(engine) as session:
        row = session.get(System, system_id)
        assert row is not None
        epoch = SystemEpoch(system_id, row.gate_epoch)
    standing = Standing(uuid.uuid4(), Word.ALLOW, Basis.ASSAY, [], None)
    counted.answers.put(epoch, version, standing, PLANTED)


@pytest.mark.parametrize(
    ("query", "version"),
    [
        ("?version=", ""),
        ("?version=" + "v" * 201, "v" * 201),
        ("?version=1%01", "1\x01"),
        ("?version=1%0A", "1\n"),
    ],
)
def test_a_version_the_route_refuses_is_never_answered_from_the_cache(
    counted: Counted, engine: sa.Engine, settings: Settings, query: str, version: str
) -> None:
    held = held_system(engine, settings)
    plant(counted, engine, held.system_id, version)
    answer = counted.client.get(f"/v1/gate/{held.system}{query}")
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "version"
    assert counted.before_routing() == 0


def test_a_system_name_the_route_refuses_is_never_answered_from_the_cache(
    counted: Counted, engine: sa.Engine, settings: Settings
) -> None:
    held = held_system(engine, settings)
    # A name no submission could give it, written straight to the database.
    with Session(engine) as session:
        row = session.get(System, held.system_id)
        assert row is not None
        row.name = held.system + "\x01"
        session.add(row)
        session.commit()
    plant(counted, engine, held.system_id, None)
    answer = counted.client.get(f"/v1/gate/{held.system}%01")
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "system"
    assert counted.before_routing() == 0


def test_a_key_is_read_from_the_bearer_scheme_alone_as_the_route_reads_it(
    counted: Counted, engine: sa.Engine, settings: Settings, keys: KeyBook
) -> None:
    held = held_system(engine, settings)
    url = f"/v1/gate/{held.system}"
    assert counted.client.get(url).status_code == 200
    secret = keys.headers("ci")["Authorization"].removeprefix("Bearer ")
    for refused in ("", f"Basic {secret}", f"Token {secret}", secret, "Bearer"):
        answer = counted.client.get(url, headers={"Authorization": refused})
        assert answer.status_code == 401, refused
    assert counted.before_routing() == 0
    # The scheme's case does not matter to the route's HTTPBearer, nor here.
    for accepted in (f"bearer {secret}", f"BEARER {secret}"):
        assert counted.client.get(url, headers={"Authorization": accepted}).status_code == 200
    assert counted.before_routing() == 2


def test_a_query_parameter_besides_one_version_goes_to_the_route(
    counted: Counted, engine: sa.Engine, settings: Settings
) -> None:
    held = held_system(engine, settings)
    url = f"/v1/gate/{held.system}?version=1"
    first = counted.client.get(url)
    for extra in ("&verbose=1", "&version=1"):
        answer = counted.client.get(url + extra)
        assert answer.status_code == 200 and answer.content == first.content
    assert counted.before_routing() == 0
