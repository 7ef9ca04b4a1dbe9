"""The dashboard in-process: the real app on a SQLite database the real migrations built, with
decided candidates seeded through the db layer (no workers: these tests read pages).

Two tenants: `acme` (whose keys the tests sign in with) and `globex` (whose system, candidate,
dossier, hold and events acme must never see). `web_client` is a browser signed in with an acme
key that has the reviewer and submitter roles; `anonymous_client` has not signed in."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlmodel import Session

from service.asgi import create_app
from service.db import migrate
from service.db.models import KeyRole
from service.db.session import make_engine
from service.keys import KeyRing
from service.settings import Settings
from tests.support.keys import Key, make_key
from tests.web.seed import report_of, seed_candidate

EVIL = '<script>alert("x")</script>'


OTHER_TENANT = "globex"
OTHER_SYSTEM = "globex-ledger"


@dataclass(frozen=True)
class Seeded:
    baseline: str
    typed: str
    evil: str
    running: str
    # Another tenant's blocked candidate (with a signed dossier and an open hold).
    other: str


@pytest.fixture(scope="package")
def web_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = Path(tmp_path_factory.mktemp("web"))
    settings = Settings(data_dir=root, database_url=f"sqlite:///{root / 'web.sqlite3'}")
    migrate.upgrade(settings)
    return settings


@pytest.fixture(scope="package")
def web_engine(web_settings: Settings) -> Iterator[sa.Engine]:
    engine = make_engine(web_settings)
    yield engine
    engine.dispose()


@pytest.fixture(scope="package")
def seeded(web_settings: Settings, web_engine: sa.Engine) -> Seeded:
    assert web_settings.keys_dir is not None
    signer = KeyRing(web_settings.keys_dir).load_or_create()
    with Session(web_engine, expire_on_commit=False) as session:
        baseline = seed_candidate(
            session,
            system="copperfin-returns",
            version="1.0.0",
            example_name="baseline",
            signer=signer,
        )
        typed = seed_candidate(session, system="copperfin-returns", version="1.1.0", signer=signer)
        evil_report = report_of("baseline")
        evil_report["reasons"][0]["message"] = f"{EVIL} in a reason"
        evil_report["faults"][0]["id"] = f"{EVIL}fault"
        evil = seed_candidate(
            session,
            system=f"{EVIL} system",
            version=f"{EVIL}1",
            example_name="baseline",
            report=evil_report,
            source_revision=EVIL,
            signer=signer,
        )
        running = seed_candidate(session, system="still-running", version="0.1", decided=False)
        other = seed_candidate(
            session,
            system=OTHER_SYSTEM,
            version="9.9.9",
            example_name="baseline",
            signer=signer,
            tenant=OTHER_TENANT,
        )
        session.commit()
        return Seeded(
            str(baseline.candidate.id),
            str(typed.candidate.id),
            str(evil.candidate.id),
            str(running.candidate.id),
            str(other.candidate.id),
        )


@dataclass(frozen=True)
class Fresh:
    candidate: str
    system: str


@pytest.fixture
def fresh_typed(web_settings: Settings, web_engine: sa.Engine, seeded: Seeded) -> Fresh:
    """A decided typed candidate (open hold, signed dossier) of a system of its own, for a test
    that changes what it reads (waives its hold, adds its events): the session's `seeded`
    candidates are read by other files and must stay as seeded, whatever the order."""
    assert web_settings.keys_dir is not None
    signer = KeyRing(web_settings.keys_dir).load_or_create()
    system = f"scratch-{uuid.uuid4().hex[:8]}"
    with Session(web_engine, expire_on_commit=False) as session:
        typed = seed_candidate(session, system=system, version="1.1.0", signer=signer)
        session.commit()
        return Fresh(str(typed.candidate.id), system)


@pytest.fixture(scope="package")
def anonymous_client(
    web_settings: Settings, web_engine: sa.Engine, seeded: Seeded
) -> Iterator[TestClient]:
    """The app (its lifespan running for the session) seen by a browser that has not signed in."""
    with TestClient(create_app(web_settings, engine=web_engine)) as client:
        yield client


@pytest.fixture(scope="package")
def web_client(anonymous_client: TestClient) -> TestClient:
    """A browser signed in with acme's `rita` (reviewer and submitter)."""
    return signed_in(anonymous_client, "rita", "/")


_KEYS: dict[tuple[int, str], Key] = {}


def key_for(
    client: TestClient,
    name: str,
    *,
    tenant: str = "acme",
    roles: tuple[KeyRole, ...] = (KeyRole.REVIEWER, KeyRole.SUBMITTER),
) -> Key:
    """`name`'s API key in `tenant` (reviewer and submitter unless told), one per app, tenant
    and name."""
    engine: sa.Engine = client.app.state.engine  # type: ignore[attr-defined]
    where = (id(engine), f"{tenant}/{name}")
    if where not in _KEYS:
        _KEYS[where] = make_key(engine, tenant, roles, name)
    return _KEYS[where]


def signed_in(
    client: TestClient,
    name: str = "rita",
    next_url: str = "/holds",
    *,
    tenant: str = "acme",
    roles: tuple[KeyRole, ...] = (KeyRole.REVIEWER, KeyRole.SUBMITTER),
) -> TestClient:
    """A new browser signed in to the dashboard with `name`'s API key."""
    browser = TestClient(client.app)
    form = browser.get("/signin").text
    found = re.search(r'name="csrf" value="([^"]+)"', form)
    assert found is not None
    key = key_for(client, name, tenant=tenant, roles=roles)
    answer = browser.post(
        "/signin",
        data={"credential": key.secret, "csrf": found.group(1), "next": next_url},
        follow_redirects=False,
    )
    assert answer.status_code == 303 and answer.headers["location"] == next_url
    return browser
