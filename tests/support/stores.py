"""Stores a test owns: its own `redis-server` and its own PostgreSQL cluster (`initdb` and
`pg_ctl`, run as the postgres user), each on a free port, so an outage test can kill and restart
them without touching the machine's shared servers."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import redis

from tests.support.service import free_port, wait_for

PG_USER = "postgres"


def _pg_bindir() -> Path:
    """The newest installed PostgreSQL's binaries (Debian layout), else whatever is on PATH."""
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name or 0)
    )
    if versions:
        return versions[-1]
    found = shutil.which("pg_ctl")
    if found is None:
        raise RuntimeError("PostgreSQL binaries (initdb, pg_ctl) are not installed")
    return Path(found).parent


class RedisServer:
    """`redis-server` on a free port; `kill()` is SIGKILL, as a crash or an OOM kill would be.
    With `appendonly`, a restart reloads what the append-only file holds (as docker-compose.yml
    runs Redis); without it, a restart comes back empty."""

    def __init__(self, root: Path, *, appendonly: bool) -> None:
        self.port = free_port()
        self.dir = root / f"redis-{self.port}"
        self.dir.mkdir(parents=True)
        self.appendonly = appendonly
        self.process: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--logfile",
            str(self.dir / "redis.log"),
        ]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        wait_for(self.answers, 15.0, f"redis-server on port {self.port}")

    def answers(self) -> bool:
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class PostgresCluster:
    """A cluster of its own: `initdb` into a fresh folder owned by the postgres user, `pg_ctl
    start` on a free port, and `pg_ctl -m immediate stop` for an outage (no shutdown checkpoint:
    what a crashed or killed server leaves, recovered from the WAL on the next start)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.bindir = _pg_bindir()
        # Not under pytest's tmp_path: its folders are private to root, and postgres must own it.
        self.root = Path(tempfile.mkdtemp(prefix="assaygate-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self._chown(self.root)

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/{database}"

    def url(self, database: str) -> str:
        return self.dsn(database).replace("postgresql://", "postgresql+psycopg://", 1)

    def _chown(self, path: Path) -> None:
        if os.geteuid() == 0:
            shutil.chown(path, user=PG_USER, group=PG_USER)

    def _run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        # initdb refuses to run as root: drop to the postgres user when the tests run as root.
        prefix = ["runuser", "-u", PG_USER, "--"] if os.geteuid() == 0 else []
        return subprocess.run(
            [*prefix, str(self.bindir / command[0]), *command[1:]],
            cwd=self.root,
            capture_output=True,
            check=check,
        )

    def init(self) -> None:
        self._run(
            "initdb", "-D", str(self.data), "-U", PG_USER, "-A", "trust", "-E", "UTF8", "--no-sync"
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")
        wait_for(self.answers, 30.0, f"PostgreSQL on port {self.port}")

    def stop_immediately(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def answers(self) -> bool:
        try:
            with psycopg.connect(self.dsn(), connect_timeout=1) as connection:
                connection.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.dsn(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def destroy(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def outage(seconds: float) -> Iterator[float]:
    """Times the outage: yields its deadline (monotonic), and returns once it has passed."""
    deadline = time.monotonic() + seconds
    yield deadline
    remaining = deadline - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)
