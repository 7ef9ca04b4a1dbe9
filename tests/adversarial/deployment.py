"""The production shape for the red team's attacks through the service, once per module: a
PostgreSQL database, a Redis queue, the API on its own port (the one its settings name), a shared
worker, and a tenant worker for each tenant the module names, with their code allowed."""

from __future__ import annotations

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
from tests.support.keys import KeyBook
from tests.support.service import (
    ApiServer,
    WorkerProcess,
    allow_code,
    flush_redis_prefix,
    free_port,
    postgres_database,
    session_settings,
    tenant_code,
)


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


def witness_server() -> ThreadingHTTPServer:
    """The witness on a loopback port of its own, serving from a thread (`shutdown()` ends it)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Witness)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


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

    def put_secret(self, tenant: str, name: str, value: str) -> None:
        headers = self.keys.headers(f"{tenant}-admin", tenant=tenant, roles=[KeyRole.ADMIN])
        with httpx.Client(base_url=self.url, timeout=30.0, headers=headers) as admin:
            stored = admin.put(f"/v1/secrets/{name}", json={"value": value})
        assert stored.status_code == 200, stored.text


@contextlib.contextmanager
def deployment(
    log_dir: Path, label: str, tenants: dict[str, dict[str, str]], **overrides: Any
) -> Iterator[Deployment]:
    """The service with a tenant worker per tenant (`tenants`: its worker's extra environment),
    each tenant's code allowed; the API listens where its settings say (`ASSAYGATE_PORT`)."""
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
            started["shared"] = WorkerProcess(settings, f"{label}-shared", log_dir)
            for tenant, env in tenants.items():
                keys.key(f"{tenant}-ci", tenant=tenant)  # the tenant exists once it has a key
                allow_code(engine, tenant)
                started[tenant] = WorkerProcess(
                    settings,
                    f"tw-{tenant}",
                    log_dir,
                    tenant=tenant,
                    code_dir=tenant_code(),
                    extra_env=env,
                )
            for worker in started.values():
                worker.wait_ready(60)
            with ApiServer(create_app(settings), port=port) as api:
                yield Deployment(settings, engine, keys, api.url, port, started)
        finally:
            for worker in started.values():
                worker.stop()
            engine.dispose()
            flush_redis_prefix(settings)
