"""`python -m worker [celery worker options]`: one Celery worker for the configured queue.

With `ASSAYGATE_WORKER_TENANT=NAME` (and `ASSAYGATE_TENANT_CODE_DIR`, where that tenant's code
lives) it consumes only that tenant's code queue; without, the shared queue, which never carries
code (docs/operations.md, "Running tenant code"), and the webhook deliveries' own queue."""

from __future__ import annotations

import logging
import os
import sys
import warnings

from celery.exceptions import CPendingDeprecationWarning, SecurityWarning

from service.settings import Settings, SettingsInvalid, get_settings
from worker import health, webhooks
from worker.app import make_celery


def queues(settings: Settings) -> list[str]:
    """A tenant's worker consumes its code queue alone; a shared one, the shared queue and the
    webhook deliveries' own, which it hands to sender threads of their own (worker.webhooks)."""
    if settings.worker_tenant:
        return [settings.worker_queue]
    return [settings.queue, webhooks.queue_of(settings)]


def main(argv: list[str] | None = None) -> None:
    try:
        settings = get_settings()
    except SettingsInvalid as exc:
        print(f"worker: error: {exc}", file=sys.stderr)
        sys.exit(2)
    # Live while it connects, not ready until its consumer beats (worker.health).
    try:
        health.write(settings, health.CONNECTING)
    except OSError as exc:
        print(f"worker: error: ASSAYGATE_WORKER_HEALTH_FILE: {exc}", file=sys.stderr)
        sys.exit(2)
    if settings.broker_url.startswith("filesystem"):
        for folder in ("queue", "processed"):
            (settings.broker_dir / folder).mkdir(parents=True, exist_ok=True)
    extra = list(sys.argv[1:] if argv is None else argv)
    args = [
        "worker",
        "--queues",
        ",".join(queues(settings)),
        "--loglevel",
        settings.log_level,
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    if not any(a.startswith(("-c", "--concurrency")) for a in extra):
        args += ["--concurrency", str(settings.worker_concurrency)]
    if logging.getLevelName(settings.log_level.upper()) >= logging.WARNING:
        # No start-up banner, and no root warning (containers and CI run as root) when only
        # warnings are wanted.
        args.insert(0, "--quiet")
        warnings.filterwarnings("ignore", category=SecurityWarning)
    # Celery warns on every lost broker connection that cancelling running tasks will become
    # its default; we chose not to cancel them (worker/app.py), so the warning says nothing.
    warnings.filterwarnings(
        "ignore", category=CPendingDeprecationWarning, message=r"\s*In Celery 5\.1 we introduced"
    )
    if not any(a.startswith(("-n", "--hostname")) for a in extra):
        args += ["--hostname", f"assaygate-{os.getpid()}@%h"]
    make_celery(settings).worker_main(args + extra)


if __name__ == "__main__":
    main()
