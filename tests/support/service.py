"""Real servers for the service tests: a PostgreSQL database per test session, a Redis key prefix
and queue per session (so concurrent sessions never steal each other's tasks), Celery workers as
subprocesses, and the API served by uvicorn on a real port."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import redis
import sqlalchemy as sa
import uvicorn
from fastapi import FastAPI
from sqlmodel import Session, col, select

from service.db.models import Assay, AssayStatus
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
_TENANT_CODE: list[Path] = []
TENANT_CODE = ("tests", "examples")  # the checkout's folders `tenant_code()` copies


def tenant_code() -> Path:
    """An operator's folder of tenant code for the tests' tenant workers: a copy of the
    checkout's `tests` and `examples` (every agent, runner and server they name), made once per
    test process. Not the checkout itself: a worker hashes its operator's folder when it loads it
    (docs/operations.md), and the checkout's virtualenv would take a minute to hash."""
    if not _TENANT_CODE:
        import shutil
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="assaygate-tenant-code-"))
        # A test run leaves nothing in /tmp: the copy goes when the process that made it ends
        # (its workers are stopped by then; a worker killed with the run has nothing to lose).
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        folder.chmod(0o755)  # the sandbox's user reads it
        skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
        for name in TENANT_CODE:
            shutil.copytree(ROOT / name, folder / name, ignore=skip, symlinks=True)
        _TENANT_CODE.append(folder)
    return _TENANT_CODE[0]


def in_tenant_code(manifest: dict[str, Any]) -> dict[str, Any]:
    """`manifest` with its runner's command naming the copy in `tenant_code()` of each checkout
    file it names (the sandbox binds the operator's folder at its own path). A tenant worker
    hashes its whole operator's folder for every shard it starts (worker/code.py): the checkout,
    virtualenv and bytecode cache included, that was seconds of CPU a shard."""
    checkout, copy = f"{ROOT}{os.sep}", f"{tenant_code()}{os.sep}"
    data: dict[str, Any] = json.loads(json.dumps(manifest))
    runner = data["target"]["runner"]
    runner["command"] = [
        copy + part.removeprefix(checkout)
        if part.startswith(checkout) and Path(part).relative_to(ROOT).parts[0] in TENANT_CODE
        else part
        for part in runner["command"]
    ]
    return data


PG_ADMIN_DSN = os.environ.get("ASSAYGATE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
# A Redis database of its own, so tests never touch the keys of a real deployment.
REDIS_URL = os.environ.get("ASSAYGATE_TEST_REDIS", "redis://127.0.0.1:6379/13")

TABLES = (
    "tenant",
    "person",
    "api_key",
    "browser_session",
    "system",
    "manifest",
    "component_hash",
    "candidate",
    "assay",
    "assay_shard",
    "fault_result",
    "event",
    "idempotency_key",
    "dossier",
    "hold",
    "config_change",
    "tenant_secret",
    "artifact",
    "candidate_artifact",
    "org_policy",
    "webhook",
    "webhook_delivery",
    "webhook_attempt",
)


def example(name: str) -> dict[str, Any]:
    """A Copperfin example manifest with its floors on the point estimate: the service tests
    decide at 5 to 10 trials a fault, and the default (`lower_bound`) needs 16 for a perfect
    record (`default_example` keeps it: tests/api/test_gate.py shows both)."""
    data = default_example(name)
    data.setdefault("envelope", {})["floor_on"] = "point"
    return data


def default_example(name: str) -> dict[str, Any]:
    """The Copperfin example manifest as committed (floors on the default lower bound)."""
    data: dict[str, Any] = json.loads((EXAMPLES / f"copperfin-{name}.json").read_text())
    return data


def candidate_body(
    name: str = "typed", *, source_revision: str = "0123abc", **plan: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"source_revision": source_revision, "manifest": example(name)}
    if plan:
        body["plan"] = plan
    return body


# -------------------------------------------------------------------------------- PostgreSQL


@contextlib.contextmanager
def postgres_database(label: str) -> Iterator[str]:
    """A fresh, empty database, dropped afterwards; yields its SQLAlchemy URL."""
    name = f"assaygate_test_{label}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN_DSN.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url.replace("postgresql://", "postgresql+psycopg://", 1)
    finally:
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def quiet(engine: sa.Engine, within_s: float = 120.0) -> None:
    """Wait until no assay in the database is queued or running. `row_counts` counts the whole
    database: an earlier test's assay finishing on the shared workers would change the counts
    without the code under test writing a row."""
    deadline = time.monotonic() + within_s
    while True:
        with Session(engine) as session:
            busy = session.exec(
                select(Assay.id).where(
                    col(Assay.status).in_([AssayStatus.QUEUED, AssayStatus.RUNNING])
                )
            ).first()
        if busy is None:
            return
        assert time.monotonic() < deadline, f"still queued or running: {_busy_view(engine, busy)}"
        time.sleep(0.2)


def _busy_view(engine: sa.Engine, assay_id: uuid.UUID) -> str:
    """Whose the stuck assay is, so a failing `quiet` names the test that left it."""
    with Session(engine) as session:
        assay = session.get(Assay, assay_id)
        if assay is None:
            return f"assay {assay_id}"
        found = session.execute(
            sa.text(
                "SELECT s.name, c.version FROM candidate c JOIN system s ON s.id = c.system_id "
                "WHERE c.id = :id"
            ),
            {"id": assay.candidate_id},
        ).first()
        shards = session.execute(
            sa.text(
                "SELECT status, count(*) FROM assay_shard WHERE assay_id = :id GROUP BY status"
            ),
            {"id": assay_id},
        ).all()
        return (
            f"assay {assay_id} ({assay.status}, created {assay.created_at}) of system "
            f"{found[0] if found else '?'} version {found[1] if found else '?'}; shards "
            f"{dict((str(k), int(v)) for k, v in shards)}"
        )


def row_counts(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as connection:
        return {
            table: int(connection.execute(sa.text(f'SELECT count(*) FROM "{table}"')).scalar_one())
            for table in TABLES
        }


# ------------------------------------------------------------------------------------- Redis


def session_settings(database_url: str, data_dir: Path, label: str, **overrides: Any) -> Settings:
    tag = f"assaygate-test-{label}-{os.getpid()}"
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "database_url": database_url,
        "broker_url": REDIS_URL,
        "queue": tag,
        "redis_key_prefix": f"{tag}:",
        # Short, so a SIGKILLed worker's shard comes back within seconds.
        "broker_visibility_timeout": 3.0,
        "broker_restore_interval": 1.0,
        # Short leases and frequent rounds, so a lost shard is found within seconds.
        "shard_lease_s": 4.0,
        "reconcile_interval_s": 1.0,
        "log_level": "INFO",
        # The suite submits far faster than CI would; the limit has its own test.
        "submissions_per_minute": 0,
        # The suite's agents and MCP servers listen on loopback; the gate's own ports stay refused.
        "egress_allow_loopback": True,
        # A webhook's retries within a second, not half a minute.
        "webhook_backoff_s": 0.5,
        # A small pool (3 kept, 3 more at a burst): the services of a directory's unit live
        # while its files run (tests/conftest.py), and up to four test processes share PostgreSQL's
        # default 100 connections. Not fewer kept: a burst past the pool opens and closes a
        # connection a time, and a new backend costs PostgreSQL CPU.
        "db_pool_size": 3,
        **overrides,
    }
    return Settings(**values)


def flush_redis_prefix(settings: Settings) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=f"{settings.redis_key_prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


# ----------------------------------------------------------------------------------- workers


def terminate(process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout`; reaped either way."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class WorkerProcess:
    """`python -m worker` as a child process, one task at a time (solo pool by default), so
    SIGKILL takes exactly the shard in hand. `pool="prefork"` runs the task in one child
    process, which the worker replaces if it dies."""

    def __init__(
        self,
        settings: Settings,
        name: str,
        log_dir: Path,
        *,
        pool: str = "solo",
        tenant: str | None = None,
        code_dir: Path | None = None,
        image: str | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.log_path = log_dir / f"worker-{name}.log"
        env = settings.child_environment()
        env["ASSAYGATE_TRIALS_PER_SHARD"] = str(settings.trials_per_shard)
        if tenant is not None:
            # A tenant's worker: only its code queue, its code from `code_dir`.
            env["ASSAYGATE_WORKER_TENANT"] = tenant
            env["ASSAYGATE_TENANT_CODE_DIR"] = str(code_dir or tenant_code())
        if image is not None:
            env["ASSAYGATE_TENANT_IMAGE"] = image
        env.update(extra_env or {})
        self._log = self.log_path.open("wb")
        pool_args = ["--pool", pool] + (["--concurrency", "1"] if pool == "prefork" else [])
        self.process = subprocess.Popen(
            [sys.executable, "-m", "worker", *pool_args, "--hostname", f"{name}@%h"],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def hostname(self) -> str:
        """How the worker records itself on the shards it starts (`AssayShard.worker`)."""
        return f"{self.name}@{socket.gethostname()}"

    def wait_ready(self, timeout: float = 30.0) -> None:
        wait_for(lambda: b" ready." in self.log_path.read_bytes(), timeout, f"{self.name} ready")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            terminate(self.process, 15)
        self._log.close()


def stop_workers(workers: Iterable[WorkerProcess]) -> None:
    """Stop several workers side by side: each is told at once (SIGTERM) and shuts down on its
    own, so the whole takes the slowest one's shutdown, not their sum."""
    workers = list(workers)
    running = [w for w in workers if w.process.poll() is None]
    for worker in running:
        worker.process.send_signal(signal.SIGTERM)
    for worker in workers:
        if worker in running:
            try:
                worker.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
        worker.stop()


# --------------------------------------------------------------------------------------- API


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class ApiServer:
    """The real ASGI app on a real socket, served from a thread of the test process."""

    def __init__(self, app: FastAPI, port: int | None = None) -> None:
        self.port = free_port() if port is None else port
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_config=None)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ApiServer:
        self.thread.start()
        wait_for(lambda: self.server.started, 15.0, "uvicorn start")
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


# ------------------------------------------------------------------------------------ waiting


def wait_for(
    predicate: Callable[[], bool], timeout: float, what: str, *, most: float = 0.25
) -> None:
    """Poll `predicate` until it holds: every 50 ms at first, a quarter more each time, at most
    every `most` seconds. A poll is often an API read (`wait_decided`: ~16 ms of CPU for a
    candidate's view), and an assay takes seconds: at a steady 50 ms the waiting test took a
    fifth of a core from the workers it waited on. A wait for a state that lasts only a moment
    keeps `most` at 0.05."""
    deadline = time.monotonic() + timeout
    pause = min(0.05, most)
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(pause)
        pause = min(most, pause * 1.25)


def wait_decided(
    client: Any,
    candidate_id: str,
    # A guard against a hang, not a speed check: a busy 2-core machine runs an assay slowly.
    timeout: float = 600.0,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def decided() -> bool:
        found.update(client.get(f"/v1/candidates/{candidate_id}", headers=headers).json())
        return found.get("status") in ("done", "stopped", "failed")

    wait_for(decided, timeout, f"candidate {candidate_id} decided")
    return found


def allow_code(engine: sa.Engine, tenant: str) -> None:
    """What `assaygate tenants allow-code TENANT` does (the tenant must exist: it has a key)."""
    from service.db import tenant as tenants

    with Session(engine) as session:
        row = tenants.by_name(session, tenant)
        assert row is not None, f"no tenant {tenant}"
        tenants.set_code_allowed(session, row, True)
        session.commit()


def local_report(name: str, *, trials: int, seed: int, extra: list[str] | None = None) -> Any:
    """The report of the local `assaygate assay` command for the same manifest and plan."""
    # The manifest the service tests submit (`example`), written where the CLI can read it.
    path = Path(tempfile.mkdtemp(prefix="assaygate-local-")) / f"copperfin-{name}.json"
    path.write_text(json.dumps(example(name)))
    command = [
        sys.executable,
        "-m",
        "service.cli",
        "assay",
        str(path),
        "--json",
        "--trials",
        str(trials),
        "--seed",
        str(seed),
        *(extra or []),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    output = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, check=False)
    shutil.rmtree(path.parent, ignore_errors=True)
    # `assay` exits like `gate`: 0 allow, 1 block, 2 hold; 3 is an error.
    assert output.returncode in (0, 1, 2), output.stderr
    return json.loads(output.stdout)


def grant_injector(session: Any, settings: Settings, assay: Any, plan: Any, **stop: Any) -> None:
    """What the API does for every submission: mint the assay's injector credential."""
    from service.db.injector import issue_credential

    issue_credential(
        session,
        assay,
        tenant="copperfin-returns",
        plan=plan,
        signer=settings.injector_ring().load_or_create(),
        namespace=settings.injector_namespace,
        max_effects=settings.injector_max_effects,
        margin_s=settings.injector_margin_s,
        defaults={"max_unsafe": None, "max_target_errors": None, "deadline_s": None, **stop},
    )
