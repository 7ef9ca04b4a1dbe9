"""The sandbox's posture through the service: an assay of tenant code records the layers that
confined it in its report and its signed dossier, and a tenant worker that cannot give the
layers the operator requires refuses the code (the assay fails saying which layer and why)
instead of running it weaker. Real PostgreSQL, Redis, shared workers and tenant workers."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from service.settings import Settings
from tests.api.test_tenant_code import allow, body, client_of, new_tenant, python_target
from tests.support.keys import KeyBook
from tests.support.service import WorkerProcess, example, tenant_code, wait_decided

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(600),
    pytest.mark.skipif(os.getuid() != 0, reason="the per-sandbox layers need root"),
]


@pytest.fixture
def posture_worker(
    settings: Settings, tmp_path: Path, workers: list[WorkerProcess]
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start a tenant's worker with sandbox settings of the test's choosing."""
    started: list[WorkerProcess] = []

    def start(tenant: str, **env: str) -> WorkerProcess:
        worker = WorkerProcess(
            settings,
            f"tw-{tenant}",
            tmp_path,
            tenant=tenant,
            code_dir=tenant_code(),
            extra_env={f"ASSAYGATE_{k.upper()}": v for k, v in env.items()},
        )
        started.append(worker)
        worker.wait_ready()
        return worker

    yield start
    for worker in started:
        worker.stop()


def predicate(team: Any, candidate_id: str) -> dict[str, Any]:
    doc = team.get(f"/v1/candidates/{candidate_id}/dossier").json()
    found: dict[str, Any] = json.loads(base64.b64decode(doc["envelope"]["payload"]))["predicate"]
    return found


def test_an_assay_of_tenant_code_records_its_sandbox_layers_in_the_report_and_the_dossier(
    settings: Settings,
    api_url: str,
    keys: KeyBook,
    posture_worker: Callable[..., WorkerProcess],
) -> None:
    tenant = new_tenant(keys)
    allow(settings, tenant)
    posture_worker(tenant, sandbox_min_posture="seccomp,cgroup,uid,relay_tmpfs")
    with client_of(api_url, keys, tenant) as team:
        candidate = team.post("/v1/candidates", json=body(python_target())).json()
        done = wait_decided(team, candidate["id"], timeout=240)
        assert done["status"] == "done", done
        report = team.get(f"/v1/assays/{candidate['assay_id']}").json()["report"]
        [layers] = report["sandbox"]
        assert layers["seccomp"] and layers["uid"].startswith("per sandbox from 200000-265535")
        assert layers["cgroup"]["version"] in ("v1", "v2")
        assert layers["cgroup"]["memory_mb"] == settings.code_memory_mb
        assert layers["relay_tmpfs_mb"] == 16 and "missing" not in layers
        assert "pid" in layers["namespaces"] and "net" in layers["namespaces"]
        assert predicate(team, candidate["id"])["sandbox"] == [layers]

        # A remote target runs nothing of the tenant's: no posture to record.
        remote = team.post("/v1/candidates", json=body(example("typed"))).json()
        assert wait_decided(team, remote["id"])["status"] == "done"
        assert "sandbox" not in predicate(team, remote["id"])


def test_a_worker_that_cannot_give_a_required_layer_refuses_the_code_and_says_why(
    settings: Settings,
    api_url: str,
    keys: KeyBook,
    posture_worker: Callable[..., WorkerProcess],
) -> None:
    tenant = new_tenant(keys)
    allow(settings, tenant)
    # No uid range: every sandbox would share uid 65534, and the operator requires its own uid.
    own = posture_worker(tenant, sandbox_uid_range="", sandbox_min_posture="seccomp,uid")
    log = own.log_path.read_text(errors="replace")
    assert "sandbox layer uid unavailable" in log and "refuses tenant code" in log, log
    with client_of(api_url, keys, tenant) as team:
        candidate = team.post("/v1/candidates", json=body(python_target())).json()
        done = wait_decided(team, candidate["id"], timeout=240)
        assert done["status"] == "failed", done
        error = team.get(f"/v1/assays/{candidate['assay_id']}").json()["report"]["error"]
    assert "ASSAYGATE_SANDBOX_MIN_POSTURE" in error and "no uid" in error, error
    assert "ASSAYGATE_SANDBOX_UID_RANGE" in error, error
