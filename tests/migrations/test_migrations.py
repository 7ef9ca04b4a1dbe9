"""The schema exists only through the Alembic revisions: from empty, checked against the models,
and down and up again, on PostgreSQL and on SQLite."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from service.db import migrate
from service.settings import Settings
from tests.support.service import ROOT, TABLES, postgres_database

pytestmark = pytest.mark.integration


@pytest.fixture(params=["postgresql", "sqlite"])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    if request.param == "sqlite":
        yield Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'fresh.sqlite3'}")
        return
    with postgres_database("migrations") as url:
        yield Settings(data_dir=tmp_path, database_url=url)


def tables(settings: Settings) -> set[str]:
    engine = sa.create_engine(settings.database_url, poolclass=sa.pool.NullPool)
    try:
        return set(sa.inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_migrations_build_the_whole_schema_from_an_empty_database(
    empty_database: Settings,
) -> None:
    assert tables(empty_database) == set()
    migrate.upgrade(empty_database)
    assert tables(empty_database) == set(TABLES)
    migrate.check(empty_database)


def test_downgrade_and_upgrade_round_trip_to_the_same_schema(empty_database: Settings) -> None:
    migrate.upgrade(empty_database)
    migrate.downgrade(empty_database, "base")
    assert tables(empty_database) == set()
    migrate.upgrade(empty_database)
    migrate.check(empty_database)


def test_the_service_never_creates_tables_behind_the_migrations_back() -> None:
    sources = [*(ROOT / "service").rglob("*.py"), *(ROOT / "worker").rglob("*.py")]
    assert not [p for p in sources if "create_all(" in p.read_text()]


def test_the_db_upgrade_command_migrates_the_configured_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.sqlite3'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    env["ASSAYGATE_DATABASE_URL"] = url
    command = [sys.executable, "-m", "service.cli", "db", "upgrade"]
    subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True)
    assert tables(Settings(database_url=url)) == set(TABLES)
    check = subprocess.run([*command[:-1], "check"], cwd=ROOT, env=env, capture_output=True)
    assert check.returncode == 0


def _insert(db: sa.Connection, table: str, **values: object) -> None:
    """A row written as the schema of the time holds it (no models: they describe head)."""

    def kind(value: object) -> Any:
        if isinstance(value, uuid.UUID):
            return sa.Uuid()
        if isinstance(value, list | dict):
            return sa.JSON()
        if isinstance(value, datetime):
            return sa.DateTime(timezone=True)
        if isinstance(value, int):
            return sa.Integer()
        return sa.LargeBinary() if isinstance(value, bytes) else sa.String()

    columns = [sa.column(name, kind(value)) for name, value in values.items()]
    db.execute(sa.table(table, *columns).insert().values(**values))


def test_upgrading_to_0007_gives_every_existing_key_a_person_of_its_own_and_names_reviews(
    empty_database: Settings,
) -> None:
    """Keys from before people existed each become a person named after the key, so no two old
    keys count as one person; what they submitted and reviewed is named after that person."""
    migrate.upgrade(empty_database, "0005")
    engine = sa.create_engine(empty_database.database_url, poolclass=sa.pool.NullPool)
    tenant, system, manifest = uuid.uuid4(), uuid.uuid4(), "d" * 64
    ci, rita = uuid.uuid4(), uuid.uuid4()
    candidate, dossier, hold = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    now = datetime.now(UTC)
    try:
        with engine.begin() as db:
            _insert(db, "tenant", id=tenant, name="acme", created_at=now)
            for key_id, name, prefix in (
                (ci, "ci-main", "ag_aaaaaaaa"),
                (rita, None, "ag_bbbbbbbb"),
            ):
                _insert(
                    db, "api_key", id=key_id, tenant_id=tenant, roles=["reviewer"], name=name,
                    prefix=prefix, key_sha256=prefix * 5, created_at=now,
                )  # fmt: skip
            _insert(db, "system", id=system, tenant_id=tenant, name="refunds", created_at=now)
            _insert(db, "manifest", digest=manifest, document={}, created_at=now)
            _insert(
                db, "candidate", id=candidate, system_id=system, version="1",
                source_revision="r", manifest_digest=manifest, submitter=str(ci), created_at=now,
            )  # fmt: skip
            _insert(
                db, "dossier", id=dossier, candidate_id=candidate, system_id=system, version=1,
                payload=b"{}", envelope="{}", digest="e" * 64, decision="hold", reasons=[],
                change="c", triggers={}, catalogue_version="x", keyid="k", created_at=now,
            )  # fmt: skip
            _insert(
                db, "hold", id=hold, candidate_id=candidate, dossier_id=dossier,
                status="waived", reasons=[], reviewer=str(rita), created_at=now,
            )  # fmt: skip
        migrate.upgrade(empty_database, "0007")
        assert _people(engine) == (
            ["ci-main ag_aaaaaaaa", "key ag_bbbbbbbb"],
            "ci-main ag_aaaaaaaa",
            "key ag_bbbbbbbb",
        )
        # 0011: a name never carries the first characters of a secret; the key's id replaces them.
        migrate.upgrade(empty_database)
        names, submitted_by, reviewed_by = _people(engine)
        assert names == sorted([f"ci-main {str(ci)[:8]}", f"key {str(rita)[:8]}"])
        assert submitted_by == f"ci-main {str(ci)[:8]}" and reviewed_by == f"key {str(rita)[:8]}"
        assert not any("ag_" in n for n in (*names, submitted_by, reviewed_by))
        migrate.downgrade(empty_database, "0010")
        assert _people(engine)[0] == ["ci-main ag_aaaaaaaa", "key ag_bbbbbbbb"]
    finally:
        engine.dispose()
    migrate.upgrade(empty_database)
    migrate.check(empty_database)


def _people(engine: sa.Engine) -> tuple[list[str], str, str]:
    """The people behind the keys, the candidate's submitter and the hold's reviewer, by name."""
    with engine.connect() as db:
        people = db.execute(
            sa.text(
                "SELECT person.name FROM api_key"
                " JOIN person ON person.id = api_key.person_id ORDER BY person.name"
            )
        ).scalars()
        names = list(people)
        submitted_by = db.execute(sa.text("SELECT submitted_by FROM candidate")).scalar_one()
        reviewed_by = db.execute(sa.text("SELECT reviewed_by FROM hold")).scalar_one()
    return names, submitted_by, reviewed_by
