"""A worker's probes, as deploy/k8s runs them, against a real worker (prefork, one child, as the
pods run it) on a `redis-server` of the test's own: ready once its consumer's loop beats; live but
not ready while the broker is gone (a restart would not bring it back); neither once its loop
stops turning; not ready while it shuts down."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.db import migrate
from service.settings import Settings
from tests.support.k8s import K8S, named, render
from tests.support.service import WorkerProcess, session_settings, wait_for
from tests.support.stores import RedisServer
from worker import health

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

# Beats five times a second, so a frozen loop is stale within a second.
INTERVAL_S = 0.2


def probes() -> dict[str, list[str]]:
    """The shared workers' probe commands in deploy/k8s (the tenant's pool runs the same)."""
    worker = named(render(K8S / "base"), "Deployment", "assaygate-worker")
    (container,) = worker["spec"]["template"]["spec"]["containers"]
    return {
        "live": container["livenessProbe"]["exec"]["command"],
        "ready": container["readinessProbe"]["exec"]["command"],
    }


class Probed:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.commands = probes()

    def run(self, which: str) -> tuple[int, str]:
        program, *rest = self.commands[which]
        assert program == "python"
        done = subprocess.run(
            [sys.executable, *rest],
            env=self.settings.child_environment(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return done.returncode, done.stdout.strip()

    def state(self) -> str | None:
        path = self.settings.worker_health_file
        assert path is not None
        try:
            return str(json.loads(path.read_text())["state"])
        except FileNotFoundError:
            return None


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path, appendonly=False)
    server.start()
    yield server
    server.stop()


def test_the_probes_follow_the_consumer_loop_and_the_broker(
    broker: RedisServer, tmp_path: Path
) -> None:
    # Its own stores: a Redis to kill, and a SQLite file (the probes never read the database).
    own = session_settings(
        f"sqlite:///{tmp_path / 'gate.sqlite3'}",
        tmp_path,
        "health",
        broker_url=broker.url,
        worker_health_file=tmp_path / "data" / "worker-health.json",
        worker_health_interval_s=INTERVAL_S,
    )
    migrate.upgrade(own)
    probe = Probed(own)
    assert probe.run("live") == (
        1,
        f"not live: no {own.worker_health_file}: the worker has not started",
    )
    worker = WorkerProcess(own, "probed", tmp_path, pool="prefork")
    try:
        wait_for(lambda: probe.state() == health.CONSUMING, 60, "the consumer's first beat")
        assert probe.run("ready")[0] == 0

        # A frozen loop (the whole process stopped) beats no more: not live, so restarted.
        worker.process.send_signal(signal.SIGSTOP)
        try:
            wait_for(lambda: not health.judge(own).live, 30, "the beat to go stale")
            code, said = probe.run("live")
            assert code == 1 and "last beat" in said and "stale after 0.6 s" in said, said
        finally:
            worker.process.send_signal(signal.SIGCONT)
        wait_for(lambda: health.judge(own).ready, 30, "the loop to beat again")
        assert probe.run("live")[0] == 0

        # The broker gone: Celery reconnects for ever; live (a restart brings nothing back),
        # not ready, until it consumes again.
        broker.kill()
        wait_for(lambda: probe.state() == health.CONNECTING, 30, "the consumer to lose Redis")
        assert probe.run("live")[0] == 0
        code, said = probe.run("ready")
        assert code == 1 and said.startswith("not ready: connecting for"), said
        broker.start()
        wait_for(lambda: health.judge(own).ready, 60, "the consumer to reconnect")

        # A warm shutdown finishes the shard in hand: live, not ready.
        worker.process.send_signal(signal.SIGTERM)
        wait_for(lambda: probe.state() == health.STOPPING, 30, "the worker to say it stops")
        verdict = health.judge(own)
        assert verdict.live and not verdict.ready
    finally:
        worker.stop()


def test_a_health_file_the_worker_cannot_write_stops_it_at_start_in_one_line(
    tmp_path: Path,
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # where the health file's folder would have to be
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    env.update(
        ASSAYGATE_DATA_DIR=str(tmp_path / "data"),
        ASSAYGATE_WORKER_HEALTH_FILE=str(blocked / "worker-health.json"),
    )
    done = subprocess.run(
        [sys.executable, "-m", "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("worker: error: ASSAYGATE_WORKER_HEALTH_FILE: ")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
