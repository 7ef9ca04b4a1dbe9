"""Hosts of their own on one machine: a Linux bridge (the cluster's network) and one network
namespace per host, joined to the bridge by a veth pair with its own address, as pods on
different nodes are. A process started on a host sees only that host's loopback and its veth:
whatever it reaches of another host, it reaches over the bridge's addresses. Needs root and `ip`.

The stores a multi-host test owns live on a host of their own: a PostgreSQL cluster (`initdb`,
`pg_ctl`, as the postgres user) and a `redis-server`, listening only on that host's address; the
machine's shared servers are never touched."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import IO

import psycopg
import redis

from tests.support.service import wait_for
from tests.support.stores import PG_USER, _pg_bindir


def namespaces_unavailable() -> str | None:
    """Why this machine cannot build the hosts (None: it can)."""
    if os.geteuid() != 0:
        return "network namespaces and veth pairs need root"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = f"agprobe{os.getpid()}"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if done.returncode != 0:
        return f"`ip netns add` fails here: {done.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _free_subnet() -> int:
    """A third octet of 10.77.X.0/24 that no address or route of the machine uses (another
    session's test may hold one)."""
    used = subprocess.run(
        ["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True
    ).stdout
    start = os.getpid() % 240
    for step in range(240):
        octet = 10 + (start + step) % 240
        if f"10.77.{octet}." not in used:
            return octet
    raise RuntimeError("no free 10.77.X.0/24 subnet")


class Host:
    """A network namespace with one veth on the bridge: a node of the test's cluster."""

    def __init__(self, network: Network, role: str, index: int) -> None:
        self.role = role
        self.address = network.address(10 + index)
        self.namespace = f"{network.tag}-{role}"
        # Interface names have at most 15 characters.
        outside, inside = f"{network.tag}v{index}o", f"{network.tag}v{index}i"
        _ip("netns", "add", self.namespace)
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", self.namespace)
        _ip("link", "set", outside, "master", network.bridge, "up")
        _ip("-n", self.namespace, "link", "set", inside, "name", "eth0")
        _ip("-n", self.namespace, "addr", "add", f"{self.address}/24", "dev", "eth0")
        _ip("-n", self.namespace, "link", "set", "eth0", "up")
        # Its own loopback, as a pod has: it reaches nothing of the other hosts.
        _ip("-n", self.namespace, "link", "set", "lo", "up")

    def command(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *argv]

    def popen(
        self, argv: list[str], *, env: dict[str, str], cwd: Path, log: IO[bytes]
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.command(*argv), env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT
        )

    def run(
        self, argv: list[str], *, env: dict[str, str], cwd: Path
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*argv), env=env, cwd=cwd, capture_output=True, text=True, timeout=120
        )

    def remove(self) -> None:
        # Deleting the namespace deletes its veth, and with it the peer on the bridge.
        subprocess.run(["ip", "netns", "del", self.namespace], capture_output=True)


class Network:
    """The bridge 10.77.X.1/24 in the machine's own namespace (where the test, like an operator
    or a load balancer, reaches the hosts) and the hosts on it."""

    def __init__(self) -> None:
        self.tag = f"ag{os.getpid() % 100000}"
        self.bridge = f"{self.tag}br"
        self.octet = _free_subnet()
        self.hosts: list[Host] = []
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.address(1)}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def address(self, last: int) -> str:
        return f"10.77.{self.octet}.{last}"

    def host(self, role: str) -> Host:
        host = Host(self, role, len(self.hosts))
        self.hosts.append(host)
        return host

    def remove(self) -> None:
        for host in self.hosts:
            host.remove()
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


class Stores:
    """PostgreSQL and Redis on `host`, on their usual ports of its address alone."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.bindir = _pg_bindir()
        # Not under pytest's tmp_path: its folders are private to root, and postgres must own it.
        self.root = Path(tempfile.mkdtemp(prefix="assaygate-netns-pg-"))
        shutil.chown(self.root, user=PG_USER, group=PG_USER)
        self.data = self.root / "data"
        self.redis_dir = Path(tempfile.mkdtemp(prefix="assaygate-netns-redis-"))
        self.redis: subprocess.Popen[bytes] | None = None
        self.database_url = f"postgresql+psycopg://{PG_USER}@{host.address}:5432/assaygate"
        self.broker_url = f"redis://{host.address}:6379/0"

    def _pg(self, *command: str) -> None:
        argv = ["runuser", "-u", PG_USER, "--", str(self.bindir / command[0]), *command[1:]]
        subprocess.run(self.host.command(*argv), cwd=self.root, check=True, capture_output=True)

    def start(self) -> None:
        self._pg("initdb", "-D", str(self.data), "-U", PG_USER, "-A", "trust", "--no-sync")
        # initdb trusts loopback only: the other hosts connect over the bridge.
        with (self.data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {self.host.address.rsplit('.', 1)[0]}.0/24 trust\n")
        options = f"-p 5432 -k {self.root} -c listen_addresses={self.host.address}"
        log = str(self.root / "postgres.log")
        self._pg("pg_ctl", "-D", str(self.data), "-l", log, "-o", options, "-w", "start")
        self.redis = subprocess.Popen(
            self.host.command(
                "redis-server",
                *("--bind", self.host.address, "--port", "6379", "--protected-mode", "no"),
                *("--dir", str(self.redis_dir), "--save", "", "--appendonly", "no"),
                *("--logfile", str(self.redis_dir / "redis.log")),
            ),
            stdout=subprocess.DEVNULL,
        )
        wait_for(self._answer, 30.0, f"PostgreSQL and Redis on {self.host.address}")
        with psycopg.connect(self._dsn("postgres"), autocommit=True) as admin:
            admin.execute('CREATE DATABASE "assaygate"')

    def _dsn(self, database: str) -> str:
        return f"postgresql://{PG_USER}@{self.host.address}:5432/{database}"

    def _answer(self) -> bool:
        try:
            with psycopg.connect(self._dsn("postgres"), connect_timeout=1) as connection:
                connection.execute("SELECT 1")
            client = redis.Redis(host=self.host.address, port=6379, socket_connect_timeout=0.5)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except (psycopg.Error, redis.RedisError):
            return False

    def stop(self) -> None:
        if self.redis is not None and self.redis.poll() is None:
            self.redis.kill()
            self.redis.wait()
        argv = ["runuser", "-u", PG_USER, "--", str(self.bindir / "pg_ctl")]
        subprocess.run(
            self.host.command(*argv, "-D", str(self.data), "-m", "immediate", "-w", "stop"),
            capture_output=True,
        )
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.redis_dir, ignore_errors=True)
