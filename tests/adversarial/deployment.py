"""The production shape for the red team's attacks through the service, once per module: a
PostgreSQL database, a Redis queue, the API on its own port (the one its settings name), a shared
worker, and a tenant worker for each tenant the module names, with their code allowed; the
tenant's own local service (a witness) its code reports to; and what the attacks submit and read
through the API."""

from __future__ import annotations

import base64
import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import sqlalchemy as sa

from service.asgi import create_app
from service.db import migrate
from service.db.models import KeyRole
from service.db.session import make_engine
from service.settings import Settings
from tests.support.api import submit, system_name
from tests.support.keys import KeyBook
from tests.support.service import (
    ApiServer,
    WorkerProcess,
    allow_code,
    example,
    flush_redis_prefix,
    free_port,
    postgres_database,
    session_settings,
    stop_workers,
    tenant_code,
)

#: What every worker logs at its start when loopback ports are every tenant's alike while a
#: tenant may run code (`service.app.tenants.shared_loopback`).
SHARED_LOOPBACK = "for every tenant alike while tenants may run code"


class Witness(BaseHTTPRequestHandler):
    """The tenant's own local service: what its code reports, by kind."""

    reports: ClassVar[dict[str, list[dict[str, Any]]]] = {}

    def do_POST(self) -> None:
        report = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        self.reports.setdefault(report["kind"], []).append(report)
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextlib.contextmanager
def witnessed(handler: type[Witness] = Witness) -> Iterator[int]:
    """A witness (or a subclass, with its own `reports`) on a loopback port of its own, serving
    from a thread for the block; its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()


@dataclass
class Deployment:
    settings: Settings
    engine: sa.Engine
    keys: KeyBook
    url: str
    port: int
    workers: dict[str, WorkerProcess] = field(default_factory=dict)

    def submitter(self, tenant: str) -> httpx.Client:
        """A client with a key of `tenant` that may submit and read, not manage secrets."""
        headers = self.keys.headers(f"{tenant}-ci", tenant=tenant)
        return httpx.Client(base_url=self.url, timeout=30.0, headers=headers)

    def admin(self, tenant: str) -> httpx.Client:
        """A client with a key of `tenant`'s admin: secrets and webhooks too."""
        headers = self.keys.headers(f"{tenant}-admin", tenant=tenant, roles=[KeyRole.ADMIN])
        return httpx.Client(base_url=self.url, timeout=30.0, headers=headers)

    def logged(self, text: str) -> dict[str, list[str]]:
        """Each worker's log lines so far that hold `text`."""
        return {
            name: [line for line in worker.log_path.read_text().splitlines() if text in line]
            for name, worker in self.workers.items()
        }

    def put_secret(self, tenant: str, name: str, value: str) -> None:
        with self.admin(tenant) as admin:
            stored = admin.put(f"/v1/secrets/{name}", json={"value": value})
        assert stored.status_code == 200, stored.text


def submit_target(
    client: httpx.Client, target: dict[str, Any], plan: dict[str, Any], prefix: str
) -> dict[str, Any]:
    """Version v1 of a new system (`prefix-…`): the typed example pointed at `target`, assayed
    with `plan` (202 or the test fails); the candidate's JSON."""
    manifest = {**example("typed"), "target": target}
    return submit(client, manifest, system=system_name(prefix), version="v1", plan=plan)


def everything(client: httpx.Client, done: dict[str, Any]) -> str:
    """Every answer the submitter can read about a decided candidate: its assay's report, the
    candidate, the events and the signed dossier's statement."""
    texts = [
        client.get(f"/v1/assays/{done['assay_id']}").text,
        client.get(f"/v1/candidates/{done['id']}").text,
        client.get("/v1/events").text,
    ]
    dossier = client.get(f"/v1/candidates/{done['id']}/dossier")
    if dossier.status_code == 200:
        texts.append(base64.b64decode(dossier.json()["envelope"]["payload"]).decode())
    return "\n".join(texts)


@contextlib.contextmanager
def deployment(
    log_dir: Path,
    label: str,
    tenants: dict[str, dict[str, str]],
    code_dirs: dict[str, Path] | None = None,
    **overrides: Any,
) -> Iterator[Deployment]:
    """The service with a tenant worker per tenant (`tenants`: its worker's extra environment),
    each tenant's code allowed; the API listens where its settings say (`ASSAYGATE_PORT`).
    `code_dirs`: a tenant's operator folder, where it is not the tests' (`tenant_code()`)."""
    port = free_port()
    with postgres_database(label) as database_url:
        settings = session_settings(
            database_url, log_dir, label, port=port, trials_per_shard=50, **overrides
        )
        migrate.upgrade(settings)
        engine = make_engine(settings)
        keys = KeyBook(engine)
        started: dict[str, WorkerProcess] = {}
        try:
            # Every worker starts with the tenants in place, as after an operator's set-up.
            for tenant in tenants:
                keys.key(f"{tenant}-ci", tenant=tenant)  # the tenant exists once it has a key
                allow_code(engine, tenant)
            started["shared"] = WorkerProcess(settings, f"{label}-shared", log_dir)
            for tenant, env in tenants.items():
                started[tenant] = WorkerProcess(
                    settings,
                    f"tw-{tenant}",
                    log_dir,
                    tenant=tenant,
                    code_dir=(code_dirs or {}).get(tenant) or tenant_code(),
                    extra_env=env,
                )
            for worker in started.values():
                worker.wait_ready(60)
            with ApiServer(create_app(settings), port=port) as api:
                yield Deployment(settings, engine, keys, api.url, port, started)
        finally:
            stop_workers(started.values())
            engine.dispose()
            flush_redis_prefix(settings)
