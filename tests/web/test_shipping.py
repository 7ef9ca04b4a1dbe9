"""The candidate page shows what ships: the code by digest and whether the gate ran it, the
build each remote endpoint reported against the one declared (a mismatch marked), and the
tenant image the code ran in, where a worker recorded one."""

from __future__ import annotations

import re
import uuid

import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlmodel import Session, col

from service.core.evidence.builds import EndpointBuilds, assay_view
from service.core.system.artifact import CODE, ArtifactSubject, Assurance, Source
from service.db.artifact import set_subjects
from service.db.models import AssayShard
from tests.web.conftest import Seeded
from tests.web.seed import report_of, seed_candidate

CODE_HEX = "c0" * 32
IMAGE = "registry.example.com/team/worker@sha256:" + "1a" * 32
BUILDS = (
    EndpointBuilds("target", "agent@7", (("agent@7", 40),)),
    EndpointBuilds("tools.servers.shop", "shop@1", (("shop@1", 30), ("shop@2", 10))),
)


def seeded_candidate(engine: sa.Engine, *, decided: bool, assurance: Assurance) -> str:
    report = {**report_of("typed"), "builds": assay_view(BUILDS)} if decided else None
    with Session(engine, expire_on_commit=False) as session:
        recorded = seed_candidate(
            session, system=f"ships-{uuid.uuid4().hex[:8]}", version="1", report=report,
            decided=decided,
        )  # fmt: skip
        recorded.candidate.code_sha256 = CODE_HEX
        subject = ArtifactSubject(CODE, CODE_HEX, assurance, Source.ARTIFACT)
        set_subjects(session, recorded.candidate.id, [subject])
        if decided:
            session.execute(
                sa.update(AssayShard)
                .where(col(AssayShard.assay_id) == recorded.assay.id)
                .values(code_sha256=CODE_HEX, tenant_image=IMAGE)
            )
        session.commit()
        return str(recorded.candidate.id)


def ships_of(client: TestClient, candidate: str) -> str:
    page = client.get(f"/candidates/{candidate}")
    assert page.status_code == 200, page.text
    found = re.search(r'<section class="card" id="ships">(.*?)</section>', page.text, re.S)
    assert found, "no 'What ships' section"
    return found.group(1)


def test_a_decided_candidate_shows_its_executed_code_its_builds_and_its_tenant_image(
    web_client: TestClient, web_engine: sa.Engine, seeded: Seeded
) -> None:
    ships = ships_of(
        web_client, seeded_candidate(web_engine, decided=True, assurance=Assurance.EXECUTED)
    )
    code = re.search(r'<tr class="ship-code" data-assurance="(\w+)">(.*?)</tr>', ships, re.S)
    assert code and code.group(1) == "executed"
    assert f"sha256:{CODE_HEX}" in code.group(2) and "the gate ran these bytes" in code.group(2)
    image = re.search(r'<tr class="ship-image">(.*?)</tr>', ships, re.S)
    assert image and IMAGE in image.group(1) and "declared" in image.group(1)

    rows = re.findall(r'<tr class="build (build-\w+)" data-endpoint="([^"]+)"', ships)
    assert rows == [("build-ok", "target"), ("build-mismatch", "tools.servers.shop")]
    shop = ships[ships.index('data-endpoint="tools.servers.shop"') :]
    assert "shop@1" in shop and "shop@2</span> × 10" in shop and ">mismatch<" in shop
    assert "declared as build &#39;shop@1&#39; but reported &#39;shop@2&#39; in 10 of 40" in shop
    target = ships[ships.index('data-endpoint="target"') : ships.index('data-endpoint="tools')]
    assert "agent@7</span> × 40" in target and "reported" in target and ">mismatch<" not in target


def test_a_running_candidate_shows_its_code_declared_and_not_yet_executed(
    web_client: TestClient, web_engine: sa.Engine, seeded: Seeded
) -> None:
    ships = ships_of(
        web_client, seeded_candidate(web_engine, decided=False, assurance=Assurance.DECLARED)
    )
    assert 'data-assurance="declared"' in ships and "not executed yet" in ships
    assert "ship-image" not in ships and "build-" not in ships
