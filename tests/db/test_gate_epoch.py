"""The database bumps a system's gate epoch with every write that can change what its gate says
(migration 0009's triggers), on PostgreSQL and on the embedded SQLite alike, and with no other."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlmodel import Session, col, select

from service.app import reviews
from service.db import dossier as dossiers
from service.db import migrate
from service.db.models import Assay, ConfigChange, Hold, System
from service.db.session import make_engine
from service.keys import KeyRing
from service.settings import Settings
from tests.web.seed import Recorded, seed_candidate


@pytest.fixture(params=["postgresql", "sqlite"])
def db(request: pytest.FixtureRequest, engine: sa.Engine, tmp_path: Path) -> Iterator[Session]:
    if request.param == "postgresql":
        with engine.connect() as connection:
            transaction = connection.begin()
            with Session(bind=connection, join_transaction_mode="create_savepoint") as session:
                yield session
            transaction.rollback()
        return
    settings = Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'epoch.sqlite3'}")
    migrate.upgrade(settings)
    embedded = make_engine(settings)
    with Session(embedded) as session:
        yield session
    embedded.dispose()


def epoch(session: Session, system_id: uuid.UUID) -> int:
    found = session.execute(
        sa.text("SELECT gate_epoch FROM system WHERE id = :id"),
        {"id": system_id.hex if session.bind.dialect.name == "sqlite" else system_id},  # type: ignore[union-attr]
    ).scalar_one()
    return int(found)


def seeded(session: Session, **kw: object) -> Recorded:
    return seed_candidate(session, system=f"epoch-{uuid.uuid4().hex[:8]}", version="1", **kw)  # type: ignore[arg-type]


def test_submitting_a_candidate_and_deciding_its_assay_each_move_the_epoch(db: Session) -> None:
    recorded = seeded(db, decided=False)
    system_id = recorded.candidate.system_id
    submitted = epoch(db, system_id)
    assert submitted > 0
    recorded.assay.status = "failed"
    db.flush()
    assert epoch(db, system_id) > submitted


def test_a_stored_shards_counters_leave_the_epoch_alone(db: Session) -> None:
    recorded = seeded(db, decided=False)
    system_id = recorded.candidate.system_id
    before = epoch(db, system_id)
    db.execute(
        sa.update(Assay)
        .where(col(Assay.id) == recorded.assay.id)
        .values(shards_done=col(Assay.shards_done) + 1, trials_done=col(Assay.trials_done) + 5)
    )
    assert epoch(db, system_id) == before


def test_a_review_a_config_change_and_new_triggers_each_move_the_epoch(
    db: Session, tmp_path: Path
) -> None:
    signer = KeyRing(tmp_path / "keys").load_or_create()
    recorded = seeded(db, signer=signer)
    other = seeded(db, signer=signer)
    system_id = recorded.candidate.system_id
    seen = [epoch(db, system_id)]
    others = epoch(db, other.candidate.system_id)

    # A waiver: a new signed dossier version and the hold's new status.
    hold = db.exec(select(Hold).where(Hold.candidate_id == recorded.candidate.id)).one()
    now = datetime.now(UTC)
    review = reviews.ReviewHold(
        hold_id=hold.id,
        action=reviews.Action.WAIVE,
        reviewer="someone-else",
        reason="fine for the pilot",
        expires_at=now + timedelta(days=1),
    )
    assert reviews.record(db, signer, review, now=now) is not None
    seen.append(epoch(db, system_id))

    db.add(ConfigChange(system_id=system_id, component="tools", sha256="0" * 64, trigger=True))
    db.flush()
    seen.append(epoch(db, system_id))

    system = db.get(System, system_id)
    assert system is not None
    dossiers.set_triggers(db, system.name, ["tools"], tenant_id=system.tenant_id)
    seen.append(epoch(db, system_id))
    dossiers.set_triggers(db, system.name, ["tools"], tenant_id=system.tenant_id)
    seen.append(epoch(db, system_id))

    assert seen[:-1] == sorted(set(seen[:-1])), f"every write moved the epoch: {seen}"
    assert seen[-1] == seen[-2], "setting the same triggers again changes nothing"
    assert epoch(db, other.candidate.system_id) == others, "another system's epoch stays"
