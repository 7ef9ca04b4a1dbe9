"""Tenant code through the service: refused unless an operator allowed the tenant, then run only on
the tenant's own worker (its own queue), and refused again by that worker once revoked. Real
PostgreSQL, Redis, shared workers and tenant workers as subprocesses, the operator's commands as
the `assaygate` command."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session, col, select

from service.db.models import Assay, AssayShard, Event
from service.settings import Settings
from tests.api.test_bad_input import refused
from tests.support.api import dossier, predicate
from tests.support.keys import KeyBook
from tests.support.service import (
    EXAMPLES,
    ROOT,
    WorkerProcess,
    example,
    tenant_code,
    wait_decided,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PLAN = {"trials": 2, "seed": 3, "modes": ["subject_swap"]}
MCP_PLAN = {"trials": 1, "seed": 7, "modes": ["forked_run"]}
PYTHON_TARGET = {"kind": "python", "entrypoint": "tests.worker.agents.rogue:agent"}
HTTP_RUNNER = {"kind": "http", "url": "http://127.0.0.1:9/agent"}


def python_target() -> dict[str, Any]:
    return {**example("typed"), "target": PYTHON_TARGET}


def warehouse(**runner: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (EXAMPLES / "mcp-warehouse" / "manifest.careful.json").read_text()
    )
    if runner:
        data["target"]["runner"] = runner
    return data


def framework(kind: str) -> dict[str, Any]:
    path = EXAMPLES / "frameworks" / f"manifest.{kind}.careful.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def stdio_server() -> dict[str, Any]:
    data = warehouse(**HTTP_RUNNER)
    data["tools"]["servers"]["admin"] = {"command": ["python", "servers.py", "admin-stdio"]}
    return data


def command_hook(hook: str) -> dict[str, Any]:
    data = warehouse(**HTTP_RUNNER)
    data["tools"]["hooks"][hook] = {"kind": "command", "command": ["python", f"{hook}.py"]}
    return data


#: Each code kind, the field a refusal names and its kind.
CODE_MANIFESTS: dict[str, tuple[Callable[[], dict[str, Any]], str, str]] = {
    "python target": (python_target, "manifest.target.entrypoint", "python"),
    "command runner": (warehouse, "manifest.target.runner.command", "command"),
    "python runner": (
        lambda: warehouse(kind="python", entrypoint="examples.frameworks.scripted:careful"),
        "manifest.target.runner.entrypoint",
        "python",
    ),
    "langgraph runner": (
        lambda: framework("langgraph"),
        "manifest.target.runner.entrypoint",
        "langgraph",
    ),
    "openai-agents runner": (
        lambda: framework("openai-agents"),
        "manifest.target.runner.entrypoint",
        "openai-agents",
    ),
    "stdio server": (stdio_server, "manifest.tools.servers.admin.command", "stdio"),
    "command reset hook": (lambda: command_hook("reset"), "manifest.tools.hooks.reset", "command"),
    "command probe hook": (lambda: command_hook("probe"), "manifest.tools.hooks.probe", "command"),
    "command mutate hook": (
        lambda: command_hook("mutate"),
        "manifest.tools.hooks.mutate",
        "command",
    ),
}


def body(manifest: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "system": f"code-{uuid.uuid4().hex[:8]}",
        "version": "v1",
        "source_revision": "abc123",
        "manifest": copy.deepcopy(manifest),
        "plan": MCP_PLAN if manifest["target"]["kind"] == "mcp" else PLAN,
        **extra,
    }


def new_tenant(keys: KeyBook) -> str:
    """A tenant of its own, with its CI key (a tenant exists once it has a key)."""
    name = f"team-{uuid.uuid4().hex[:8]}"
    keys.key(f"ci-{name}", tenant=name)
    return name


def operator(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """`assaygate tenants …` where the database is configured, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "tenants", *args],
        cwd=ROOT,
        env=settings.child_environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def allow(settings: Settings, tenant: str) -> dict[str, Any]:
    done = operator(settings, "allow-code", tenant, "--by", "ops-alice")
    assert done.returncode == 0, done.stderr
    shown: dict[str, Any] = json.loads(done.stdout)
    return shown


def revoke(settings: Settings, tenant: str) -> dict[str, Any]:
    done = operator(settings, "revoke-code", tenant, "--by", "ops-bob")
    assert done.returncode == 0, done.stderr
    shown: dict[str, Any] = json.loads(done.stdout)
    return shown


@pytest.fixture
def tenant_worker(
    settings: Settings, tmp_path: Path, workers: list[WorkerProcess]
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start a worker for a tenant (its code queue only), with the shared workers running."""
    started: list[WorkerProcess] = []

    def start(tenant: str, image: str | None = None) -> WorkerProcess:
        worker = WorkerProcess(
            settings, f"tw-{tenant}", tmp_path, tenant=tenant, code_dir=tenant_code(), image=image
        )
        started.append(worker)
        worker.wait_ready()
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture(scope="module")
def outsider(api_url: str, keys: KeyBook) -> Iterator[httpx.Client]:
    """A submitter of a tenant no operator allowed to run code (made before any count)."""
    key = keys.key("outsider-ci", tenant="no-code-team")
    with httpx.Client(base_url=api_url, timeout=30.0, headers=key.headers) as client:
        yield client


def client_of(api_url: str, keys: KeyBook, tenant: str) -> httpx.Client:
    return httpx.Client(
        base_url=api_url, timeout=30.0, headers=keys.key(f"ci-{tenant}", tenant=tenant).headers
    )


def shard_workers(engine: sa.Engine, assay_id: str) -> list[str | None]:
    with Session(engine) as session:
        rows = session.exec(select(AssayShard).where(AssayShard.assay_id == uuid.UUID(assay_id)))
        return [row.worker for row in rows]


def audit_actions(engine: sa.Engine, tenant: str) -> list[tuple[str, str]]:
    with Session(engine) as session:
        rows = session.exec(
            select(Event).where(Event.kind == "audit").order_by(col(Event.id))
        ).all()
    return [
        (e.data["action"], e.data["person"])
        for e in rows
        if e.data.get("tenant") == tenant and str(e.data.get("action", "")).startswith("tenant.")
    ]


# ------------------------------------------------------------------------------ refused


@pytest.mark.parametrize("kind", sorted(CODE_MANIFESTS))
def test_a_tenant_not_allowed_is_refused_naming_the_code_field_and_nothing_is_written(
    api_url: str,
    outsider: httpx.Client,
    unchanged: None,
    kind: str,
) -> None:
    make, field, part_kind = CODE_MANIFESTS[kind]
    response = outsider.post("/v1/candidates", json=body(make()))
    error = refused(response, 403, field)
    assert error["code"] == "code_not_allowed"
    assert f"is {part_kind} code" in error["message"]
    assert "assaygate tenants allow-code no-code-team" in error["message"]


def test_a_remote_manifest_of_a_tenant_not_allowed_is_accepted(
    api_url: str, outsider: httpx.Client
) -> None:
    response = outsider.post("/v1/candidates", json=body(example("typed")))
    assert response.status_code == 202, response.text


def test_the_tenant_route_shows_a_tenant_not_allowed(api_url: str, outsider: httpx.Client) -> None:
    shown = outsider.get("/v1/tenant").json()
    assert shown["name"] == "no-code-team"
    assert shown["code_allowed"] is False and shown["code_changed_at"] is None
    assert shown["code_queue"].endswith(".tenant.no-code-team")


def test_an_unknown_tenant_is_one_line_and_exit_2(settings: Settings) -> None:
    for command in ("allow-code", "revoke-code"):
        done = operator(settings, command, "no-such-tenant-anywhere")
        assert done.returncode == 2
        assert done.stderr.strip().splitlines() == [
            "assaygate: error: no tenant no-such-tenant-anywhere"
        ]


# -------------------------------------------------------------------- allowed, then revoked


def test_an_allowed_tenants_code_runs_only_on_its_own_worker_and_is_audited(
    settings: Settings,
    engine: sa.Engine,
    api_url: str,
    keys: KeyBook,
    workers: list[WorkerProcess],
    tenant_worker: Callable[[str], WorkerProcess],
) -> None:
    tenant = new_tenant(keys)
    with client_of(api_url, keys, tenant) as team:
        assert team.post("/v1/candidates", json=body(python_target())).status_code == 403
        shown = allow(settings, tenant)
        assert shown["code_allowed"] is True and shown["code_changed_at"]
        assert shown["code_queue"] == settings.tenant_queue(tenant)
        assert allow(settings, tenant)["code_changed_at"] == shown["code_changed_at"]  # no-op
        listed = operator(settings, "list", "--json")
        assert {"name": tenant, **{k: shown[k] for k in shown if k != "name"}} in json.loads(
            listed.stdout
        )["items"]
        tenant_view = team.get("/v1/tenant").json()
        assert tenant_view["code_allowed"] is True
        assert tenant_view["code_queue"] == settings.tenant_queue(tenant)

        accepted = team.post("/v1/candidates", json=body(python_target()))
        assert accepted.status_code == 202, accepted.text
        candidate = accepted.json()
        # Queued on the tenant's queue: the shared workers, running all along, never take it.
        time.sleep(3)
        assert shard_workers(engine, candidate["assay_id"]) == [None] * len(
            shard_workers(engine, candidate["assay_id"])
        )
        own = tenant_worker(tenant)
        done = wait_decided(team, candidate["id"])
        assert done["status"] == "done", done
        ran = shard_workers(engine, candidate["assay_id"])
        assert ran and all(w is not None and w.startswith(f"{own.name}@") for w in ran), ran

        # A remote manifest of the same tenant still runs on the shared workers.
        remote = team.post("/v1/candidates", json=body(example("typed"))).json()
        assert wait_decided(team, remote["id"])["status"] == "done"
        shared = {f"{w.name}@" for w in workers}
        for w in shard_workers(engine, remote["assay_id"]):
            assert w is not None and any(w.startswith(s) for s in shared), w
    assert audit_actions(engine, tenant) == [("tenant.code_allowed", "ops-alice")]


def test_the_image_a_tenant_worker_runs_in_is_recorded_per_shard_and_a_declared_subject(
    settings: Settings,
    engine: sa.Engine,
    api_url: str,
    keys: KeyBook,
    tenant_worker: Callable[..., WorkerProcess],
) -> None:
    image = "registry.example.com/team/worker@sha256:" + "5e" * 32
    tenant = new_tenant(keys)
    allow(settings, tenant)
    tenant_worker(tenant, image)
    with client_of(api_url, keys, tenant) as team:
        candidate = team.post("/v1/candidates", json=body(python_target())).json()
        assert wait_decided(team, candidate["id"])["status"] == "done"
        signed = dossier(team, candidate["id"])
    with Session(engine) as session:
        rows = session.exec(
            select(AssayShard).where(AssayShard.assay_id == uuid.UUID(candidate["assay_id"]))
        ).all()
    assert rows and {(r.tenant_image, r.code_sha256 is not None) for r in rows} == {(image, True)}
    shipped = predicate(signed)["artifacts"]
    assert {"name": "tenant_image", "digest": {"sha256": "5e" * 32}, "assurance": "declared",
            "ref": image} in shipped  # fmt: skip
    assert [a["name"] for a in shipped] == ["code/operator", "tenant_image"]


def test_another_tenants_code_never_reaches_a_tenants_worker(
    settings: Settings,
    engine: sa.Engine,
    api_url: str,
    keys: KeyBook,
    tenant_worker: Callable[[str], WorkerProcess],
) -> None:
    mine, theirs = new_tenant(keys), new_tenant(keys)
    allow(settings, mine)
    allow(settings, theirs)
    own = tenant_worker(mine)
    with client_of(api_url, keys, theirs) as other:
        candidate = other.post("/v1/candidates", json=body(python_target())).json()
        time.sleep(4)
        assert set(shard_workers(engine, candidate["assay_id"])) == {None}
        assert candidate["assay_id"] not in own.log_path.read_text(errors="replace")
        aborted = other.post(f"/v1/assays/{candidate['assay_id']}/abort", json={"reason": "done"})
        assert aborted.status_code == 202, aborted.text
        assert wait_decided(other, candidate["id"])["status"] == "stopped"


def test_a_revoked_tenant_is_refused_its_queued_code_shards_fail_and_a_rerun_is_refused(
    settings: Settings,
    engine: sa.Engine,
    api_url: str,
    keys: KeyBook,
    tenant_worker: Callable[[str], WorkerProcess],
) -> None:
    tenant = new_tenant(keys)
    allow(settings, tenant)
    with client_of(api_url, keys, tenant) as team:
        queued = team.post("/v1/candidates", json=body(python_target()))
        assert queued.status_code == 202, queued.text
        candidate = queued.json()
        shown = revoke(settings, tenant)
        assert shown["code_allowed"] is False and shown["code_changed_at"]
        again = team.post("/v1/candidates", json=body(python_target()))
        assert refused(again, 403, "manifest.target.entrypoint")["code"] == "code_not_allowed"
        assert team.get("/v1/tenant").json()["code_allowed"] is False
        # The tenant's worker starts after the revocation and finds its shards queued.
        tenant_worker(tenant)
        done = wait_decided(team, candidate["id"])
        assert done["status"] == "failed", done
        assert set(shard_workers(engine, candidate["assay_id"])) == {None}  # never started
        rerun = team.post(f"/v1/candidates/{candidate['id']}/rerun", json={})
        assert refused(rerun, 403, "manifest.target.entrypoint")["code"] == "code_not_allowed"
    with Session(engine) as session:
        assay = session.get(Assay, uuid.UUID(candidate["assay_id"]))
        assert assay is not None and assay.report is not None
        assert "no longer allowed to run code" in assay.report["error"]
        assert f"assaygate tenants allow-code {tenant}" in assay.report["error"]
    assert audit_actions(engine, tenant) == [
        ("tenant.code_allowed", "ops-alice"),
        ("tenant.code_revoked", "ops-bob"),
    ]


def test_a_shared_worker_handed_a_code_shard_fails_the_assay_instead_of_running_it(
    settings: Settings, engine: sa.Engine, api_url: str, keys: KeyBook
) -> None:
    """Defence in depth: a code shard that reaches the shared queue anyway (here, sent there by
    hand) is never run by a shared worker."""
    from service.http.dispatch import Dispatcher

    tenant = new_tenant(keys)
    allow(settings, tenant)
    with client_of(api_url, keys, tenant) as team:
        candidate = team.post("/v1/candidates", json=body(python_target())).json()
        dispatcher = Dispatcher(settings)
        try:
            dispatcher.enqueue_shards(uuid.UUID(candidate["assay_id"]), [0], settings.queue)
        finally:
            dispatcher.close()
        wait_for(
            lambda: team.get(f"/v1/candidates/{candidate['id']}").json()["status"] == "failed",
            60,
            "the shared worker's refusal",
        )
    with Session(engine) as session:
        assay = session.get(Assay, uuid.UUID(candidate["assay_id"]))
        assert assay is not None and assay.report is not None
        assert "a shared worker never runs it" in assay.report["error"]
