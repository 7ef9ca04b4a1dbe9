"""A lone surrogate from one tenant poisons nothing, through the real service (PostgreSQL, Redis,
the API, a shared worker): tenant A's remote `http` agent (no code rights) says "\\ud800" and NUL
as JSON escapes in its evidence, claims and reason. Its text is made valid where it enters, so
A's assay ends with a readable record; its GET and abort answer; and tenant B's waiver, lapsing
meanwhile, is still signed on time by the reconcilers and its `hold.reopened` still sent."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import rfc8785
from sqlmodel import Session, col, select

from service.db.models import AssayShard, Dossier, ShardStatus
from service.db.session import session_scope
from service.keys import KeyRing
from tests.adversarial.conftest import LIAR_HTTP, assay_target, manifest, plan
from tests.adversarial.deployment import Deployment, deployment, submit_target
from tests.support.agents import agent_processes
from tests.support.receiver import Receiver
from tests.support.service import wait_for
from tests.web.seed import seed_waiver

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

POISONER, NEIGHBOUR = "poisoner", "neighbour"
PLAN = {"trials": 2, "seed": 3, "modes": ["timeout_before_send"]}
LAPSE_S = 3.0


def test_a_claim_with_half_a_surrogate_pair_is_graded_as_text_and_its_report_is_signable() -> None:
    with agent_processes(LIAR_HTTP) as start:
        m = manifest(kind="http", url=start("--mode", "surrogate"))
        report = assay_target(m, plan(2, "timeout_before_send"))
    said = json.dumps(report, ensure_ascii=False)
    assert "\ufffd" in said and "\ud800" not in said and "\x00" not in said
    # The bytes the dossier signs exist: RFC 8785 refuses a lone surrogate.
    assert rfc8785.dumps(report)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    # Remote agents only: the shared worker runs them, and its reconciler is the one poisoned.
    with deployment(tmp_path_factory.mktemp("poison"), "poison", {}) as running:
        yield running


def submit_poisoned_agent(service: Deployment, url: str) -> dict[str, Any]:
    with service.submitter(POISONER) as client:
        return submit_target(client, {"kind": "http", "url": url}, PLAN, "poison")


def shards_stored(service: Deployment, assay_id: str) -> bool:
    with Session(service.engine) as session:
        shards = session.exec(
            select(AssayShard.status).where(AssayShard.assay_id == uuid.UUID(assay_id))
        ).all()
    return bool(shards) and all(s == ShardStatus.DONE.value for s in shards)


def waiver_lapsing_soon(service: Deployment, hook_url: str) -> uuid.UUID:
    """Tenant B's held candidate, waived until LAPSE_S from now, with a webhook on its holds."""
    with service.admin(NEIGHBOUR) as client:
        hook = client.post("/v1/webhooks", json={"url": hook_url})
    assert hook.status_code in (200, 201), hook.text
    assert service.settings.keys_dir is not None
    signer = KeyRing(service.settings.keys_dir).load_or_create()
    now = datetime.now(UTC)
    with session_scope(service.engine) as session:
        lapsing = now + timedelta(seconds=LAPSE_S)
        hold = seed_waiver(session, signer, expires_at=lapsing, waived_at=now, tenant=NEIGHBOUR)
        return hold.candidate_id


def reopened(receiver: Receiver) -> list[dict[str, Any]]:
    bodies = [json.loads(r.body) for r in receiver.received]
    return [b for b in bodies if b.get("event") == "hold.reopened"]


def test_a_lone_surrogate_from_one_tenant_fails_only_its_own_assay_and_every_round_goes_on(
    service: Deployment,
) -> None:
    with agent_processes(LIAR_HTTP) as start, Receiver() as receiver:
        candidate = submit_poisoned_agent(service, start("--mode", "surrogate"))
        assay_id = str(candidate["assay_id"])
        wait_for(lambda: shards_stored(service, assay_id), 90, "the poisoned shards stored")

        # B's waiver lapses after A's evidence reached the database: every round from then on
        # meets A's assay before it signs B's lapse.
        # A round that A's assay broke would never sign B's lapse: that it is signed at all is
        # the proof (the wait is a guard against a hang, not a measure of how soon).
        neighbour = waiver_lapsing_soon(service, receiver.url)
        wait_for(lambda: bool(reopened(receiver)), 120, "tenant B's hold.reopened")
        with Session(service.engine) as session:
            latest = session.exec(
                select(Dossier)
                .where(Dossier.candidate_id == neighbour)
                .order_by(col(Dossier.version).desc())
            ).first()
        assert latest is not None and latest.change == "waiver expired", latest

    with service.submitter(POISONER) as client:
        wait_for(
            lambda: client.get(f"/v1/assays/{assay_id}").json()["status"] in ("done", "failed"),
            60,
            "the poisoned assay ended",
        )
        shown = client.get(f"/v1/assays/{assay_id}")
        aborted = client.post(f"/v1/assays/{assay_id}/abort", json={"reason": "poison"})
        again = client.get(f"/v1/candidates/{candidate['id']}")
    assert shown.status_code == 200, shown.text
    assert aborted.status_code in (202, 409), aborted.text
    assert again.status_code == 200, again.text
    record = shown.json()
    text = json.dumps(record)
    # Either the sanitised claims were graded and signed, or the assay says why it failed.
    if record["status"] == "failed":
        assert again.json()["error"], again.json()
    else:
        assert "\\ud800" not in text and "\\u0000" not in text, text[:2000]
        with Session(service.engine) as session:
            signed = session.exec(
                select(Dossier).where(Dossier.assay_id == uuid.UUID(assay_id))
            ).first()
        assert signed is not None
