"""A real worker process with slots, on the warehouse example's real MCP servers serving isolated
worlds: it holds several shards of one assay at once (each sequential fault is one shard that runs
one trial at a time), and the assay's per-fault figures are exactly the local run's."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session, col, select

from service.asgi import create_app
from service.cli import main
from service.db.models import AssayShard, ShardStatus
from service.settings import Settings
from tests.mcp.test_slots import FAULTS, SLOTS, Slotted, counts, slotted
from tests.support.keys import ALL_ROLES, make_key
from tests.support.service import ROOT, ApiServer, WorkerProcess, allow_code, wait_decided

__all__ = ["slotted"]  # the module's warehouse servers with SLOTS worlds

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TENANT = "holder"


def running_on(engine: sa.Engine, assay_id: uuid.UUID, worker: str) -> int:
    with Session(engine) as session:
        rows = session.exec(
            select(AssayShard.shard_index).where(
                col(AssayShard.assay_id) == assay_id,
                col(AssayShard.status) == ShardStatus.RUNNING.value,
                col(AssayShard.worker) == worker,
            )
        ).all()
    return len(rows)


def test_a_worker_with_slots_holds_several_shards_of_an_mcp_assay_at_once_with_exact_figures(
    settings: Settings,
    engine: sa.Engine,
    slotted: Slotted,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    key = make_key(engine, TENANT, ALL_ROLES)
    allow_code(engine, TENANT)
    manifest = slotted.manifest("careful")
    trials = 3
    # An mcp target's plan is sequential unless it says otherwise.
    plan = {"trials": trials, "seed": 11, "modes": list(FAULTS)}
    # The tenant's own worker (the agent is its code), the checkout as the operator's folder.
    worker = WorkerProcess(
        settings,
        "held-mcp",
        tmp_path,
        tenant=TENANT,
        code_dir=ROOT,
        extra_env={"ASSAYGATE_WORKER_SLOTS": str(SLOTS)},
    )
    most = 0
    try:
        worker.wait_ready(120)
        body: dict[str, Any] = {
            "system": f"held-{uuid.uuid4().hex[:8]}",
            "version": "v1",
            "source_revision": "abc123",
            "manifest": manifest,
            "plan": plan,
        }
        with (
            ApiServer(create_app(settings)) as server,
            httpx.Client(base_url=server.url, timeout=30.0, headers=key.headers) as client,
        ):
            response = client.post("/v1/candidates", json=body)
            assert response.status_code == 202, response.text
            submitted = response.json()
            assay_id = uuid.UUID(submitted["assay_id"])
            end = time.monotonic() + 600
            while time.monotonic() < end:
                most = max(most, running_on(engine, assay_id, worker.hostname))
                status = client.get(f"/v1/assays/{assay_id}").json()["status"]
                if status not in ("queued", "running"):
                    break
                time.sleep(0.1)
            done = wait_decided(client, submitted["id"], timeout=60)
            report = client.get(f"/v1/assays/{assay_id}").json()["report"]
    finally:
        worker.stop()
    log = worker.log_path.read_text(errors="replace")
    assert done["status"] == "done", log[-3000:]
    # One worker process ran every fault's shard at once.
    assert most == len(FAULTS), log[-3000:]
    assert "holding shards together" in log
    # The local run, one trial at a time: the same per-fault figures.
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    args = ["assay", str(path), "--trials", str(trials), "--json", "--seed", "11"]
    args += ["--rule", "sequential", "--concurrency", "1"]
    for mode in FAULTS:
        args += ["--mode", mode]
    main(args)
    local_counts = counts(json.loads(capsys.readouterr().out))
    assert counts(report)["faults"] == local_counts["faults"]
    assert counts(report)["decision"] == local_counts["decision"]
