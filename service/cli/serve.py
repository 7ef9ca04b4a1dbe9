"""`assaygate serve`: the API, and (embedded) a worker child it supervises."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from service.cli.common import framed, server_options, settings_from
from service.cli.keys import first_admin_key
from service.settings import Settings, configure_logging

log = logging.getLogger("assaygate.serve")


def register(sub: Any) -> None:
    """Add the `serve` command(s) to the top-level parser."""
    serve = sub.add_parser(
        "serve",
        help="run the API (and, embedded, a worker) on localhost:8000",
        description="With no configuration: SQLite and a filesystem broker under ./var, the "
        "schema migrated, a worker started as a child process, the API on 127.0.0.1:8000.",
    )
    server_options(serve)
    serve.add_argument(
        "--worker",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="start a worker child process (default: only when embedded)",
    )
    serve.add_argument(
        "--migrate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run `db upgrade` before serving (default: only when embedded)",
    )
    serve.add_argument(
        "--processes",
        type=int,
        default=None,
        help="API server processes, each on its own SO_REUSEPORT socket "
        "(default: $ASSAYGATE_API_PROCESSES or 1)",
    )
    serve.set_defaults(func=_serve)


class EmbeddedWorker:
    """The worker child of `serve`: started, restarted if it dies, stopped with the server.

    The embedded broker has no visibility timeout, and a message is gone from its folder once a
    worker has read it. The child's reconciler would send a shard it held again once its lease
    lapsed; embedded, the child is the only worker, so `serve` need not wait: before each child
    starts, every shard of an open assay that has no result is released (pending, a fresh lease)
    and enqueued again. Copies of shards that are still queued cost one lookup each: by the time
    a copy is read the original has stored the result or holds the shard, and the copy finds it
    done or leased.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._process: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._supervise, name="worker-supervisor", daemon=True
        )

    def start(self, ready_within: float = 30.0) -> None:
        """Start the child and wait (up to `ready_within` seconds) until it consumes tasks."""
        self._requeue_unfinished()
        self._spawn()
        self._thread.start()
        deadline = time.monotonic() + ready_within
        while not self._ready_file.exists() and time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                break
            time.sleep(0.05)

    @property
    def _ready_file(self) -> Path:
        return self.settings.data_dir / f"worker-ready-{os.getpid()}"

    def _spawn(self) -> None:
        command = [
            sys.executable,
            "-m",
            "worker",
            "--concurrency",
            str(self.settings.worker_concurrency),
        ]
        self._ready_file.unlink(missing_ok=True)
        env = self.settings.child_environment()
        env["ASSAYGATE_WORKER_READY_FILE"] = str(self._ready_file)
        self._process = subprocess.Popen(command, env=env, preexec_fn=_die_with_parent)
        log.info("worker started", extra={"worker": str(self._process.pid)})

    def _supervise(self) -> None:
        backoff = 1.0
        while not self._stopping.wait(backoff):
            process = self._process
            if process is None or process.poll() is None or self._stopping.is_set():
                backoff = 1.0
                continue
            # A worker that cannot start would otherwise be respawned every second forever.
            backoff = min(backoff * 2, 60.0)
            log.error("worker exited with %s; restarting", process.returncode)
            self._requeue_unfinished()
            self._spawn()

    def _requeue_unfinished(self) -> None:
        from service.app.shards import requeue_unfinished
        from service.cli.database import open_engine
        from service.http.dispatch import Dispatcher

        if not self.settings.embedded:
            return  # other workers may hold these shards: their leases and reconcilers decide
        engine = open_engine(self.settings)
        dispatcher = Dispatcher(self.settings)
        dispatcher.prepare()
        try:
            requeue_unfinished(engine, self.settings, dispatcher)
        finally:
            dispatcher.close()
            engine.dispose()

    def stop(self) -> None:
        self._stopping.set()
        self._ready_file.unlink(missing_ok=True)
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _die_with_parent() -> None:
    """Linux: the worker child gets SIGTERM if `serve` dies without cleaning up (SIGKILL, OOM)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _exit_on_sigterm(_signum: int, _frame: object) -> None:
    # uvicorn restores this handler and re-raises SIGTERM once it has shut down; exiting through
    # SystemExit (not the default handler's instant death) lets `serve` stop its worker first.
    raise SystemExit(0)


def _serve(args: argparse.Namespace) -> int:
    from service import serving
    from service.cli.database import upgrade

    settings = settings_from(args)
    configure_logging(settings)
    if settings.database_is_sqlite:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    if args.migrate if args.migrate is not None else settings.embedded:
        upgrade(settings)
    first_key = first_admin_key(settings) if settings.embedded else None
    worker = (
        EmbeddedWorker(settings)
        if (args.worker if args.worker is not None else settings.embedded)
        else None
    )
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if worker is not None:
        worker.start()
    return serving.run(settings, settings.api_processes, _announcement(settings, first_key), worker)


def _announcement(settings: Settings, first_key: str | None) -> str:
    """What `serve` prints once it listens: where it is, and (first start only) the first key,
    framed so it stands out from the log lines around it."""
    url = f"http://{settings.host}:{settings.port}"
    lines = [f"Assaygate is up: {url}/ (dashboard), {url}/docs (OpenAPI)"]
    if first_key is not None:
        lines += [
            "",
            f"First API key (tenant {_default_tenant()}; admin, submitter, reviewer), shown",
            "only now:",
            f"  {first_key}",
            "Sign in to the dashboard with it, or send it as `Authorization: Bearer <key>`",
            "(ASSAYGATE_API_KEY for the CLI); more keys: `assaygate keys create`.",
        ]
    return framed(lines)


def _default_tenant() -> str:
    from service.app.records import DEFAULT_TENANT

    return DEFAULT_TENANT
