"""Attacks from inside the sandbox, through the command runner a worker uses: each fails, and the
runner records a clear target error (the attack's own report says what stopped it)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from service.mcp.runners import CommandRunner, RunResult
from service.sandbox.bwrap import Sandbox
from tests.sandbox.conftest import Worker, confinement, outlived

pytestmark = pytest.mark.timeout(120)


def attack(
    worker: Worker, url: str, *args: str, deadline_s: float = 30.0, **limits: int
) -> RunResult:
    runner = CommandRunner((sys.executable, "attack.py", *args), confinement(worker.code, **limits))
    return runner.run({"order": "o-1"}, url, deadline_s, threading.Event())


def blocked(result: RunResult) -> str:
    assert result.error == "TargetFailed: exit code 3", result
    assert len(result.claims) == 1 and "blocked" in result.claims[0], result.claims
    reason: str = result.claims[0]["blocked"]
    return reason


def leaked(result: RunResult) -> Any:
    assert result.error is None, result
    return result.claims[0]["leaked"]


def test_code_that_reads_the_signing_key_finds_nothing(worker: Worker, proxy_url: str) -> None:
    reason = blocked(attack(worker, proxy_url, "read", str(worker.keys / "signing.key")))
    assert reason.startswith("FileNotFoundError"), reason


def test_code_that_reads_the_workers_data_dir_finds_nothing(worker: Worker, proxy_url: str) -> None:
    reason = blocked(attack(worker, proxy_url, "read", str(worker.data / "assaygate.db")))
    assert reason.startswith("FileNotFoundError"), reason


def test_code_that_reads_the_hosts_shadow_file_finds_nothing(
    worker: Worker, proxy_url: str
) -> None:
    assert blocked(attack(worker, proxy_url, "read", "/etc/shadow")).startswith("FileNotFound")


def test_code_that_reads_the_database_url_from_its_environment_finds_nothing(
    worker: Worker, proxy_url: str
) -> None:
    assert blocked(attack(worker, proxy_url, "env", "ASSAYGATE_DATABASE_URL")).startswith(
        "KeyError"
    )


def test_code_sees_its_tenants_secret_and_nothing_else_of_the_workers_environment(
    worker: Worker, proxy_url: str
) -> None:
    env = leaked(attack(worker, proxy_url, "environment"))
    assert env["TENANT_SECRET"] == "tenant-secret"
    assert env["ASSAYGATE_MCP_URL"] == proxy_url
    assert set(env) == {
        "PATH", "HOME", "LANG", "TMPDIR", "PYTHONDONTWRITEBYTECODE", "TENANT_SECRET",
        "ASSAYGATE_MCP_URL",
    }  # fmt: skip
    assert "worker-secret" not in str(env) and "hunter2" not in str(env)


@pytest.mark.parametrize("port", [5432, 6379], ids=["postgresql", "redis"])
def test_code_that_connects_to_the_control_plane_is_refused(
    worker: Worker, proxy_url: str, port: int
) -> None:
    reason = blocked(attack(worker, proxy_url, "connect", "127.0.0.1", str(port)))
    assert reason.startswith("ConnectionRefusedError"), reason


def test_code_that_connects_to_the_api_is_refused(
    worker: Worker, proxy_url: str, api_port: int
) -> None:
    reason = blocked(attack(worker, proxy_url, "connect", "127.0.0.1", str(api_port)))
    assert reason.startswith("ConnectionRefusedError"), reason


def test_code_that_connects_to_the_hosts_address_finds_no_network(
    worker: Worker, proxy_url: str
) -> None:
    reason = blocked(attack(worker, proxy_url, "connect", "10.255.255.1", "5432"))
    assert "unreachable" in reason, reason


def test_code_that_connects_to_postgresqls_unix_socket_finds_nothing(
    worker: Worker, proxy_url: str
) -> None:
    reason = blocked(attack(worker, proxy_url, "unix", "/var/run/postgresql/.s.PGSQL.5432"))
    assert reason.startswith("FileNotFoundError"), reason


def test_code_reaches_the_trials_proxy_through_its_relay_at_the_same_url(
    worker: Worker, proxy_url: str
) -> None:
    assert leaked(attack(worker, proxy_url, "fetch", proxy_url)) == "hello from the trial's proxy"


def test_code_that_forks_without_end_is_stopped_at_its_process_limit(
    worker: Worker, proxy_url: str
) -> None:
    reason = blocked(attack(worker, proxy_url, "fork", processes=32))
    assert reason.startswith("OSError: after") and "Resource temporarily unavailable" in reason
    assert int(reason.split()[2]) < 32, reason


def test_code_that_fills_memory_is_stopped_at_its_address_space_limit(
    worker: Worker, proxy_url: str
) -> None:
    assert blocked(attack(worker, proxy_url, "memory", "1024", memory_mb=256)) == "MemoryError: "


@pytest.mark.parametrize(
    "where", ["code", "/etc/passwd", "/usr/evil", "/root/evil"], ids=["code", "etc", "usr", "root"]
)
def test_code_that_writes_outside_tmp_is_refused(
    worker: Worker, proxy_url: str, where: str
) -> None:
    path = str(worker.code / "evil.py") if where == "code" else where
    reason = blocked(attack(worker, proxy_url, "write", path))
    assert reason.startswith(("OSError: [Errno 30]", "PermissionError")), reason
    assert not (worker.code / "evil.py").exists()


def test_code_writes_in_its_own_tmp(worker: Worker, proxy_url: str) -> None:
    assert leaked(attack(worker, proxy_url, "write", "/tmp/scratch")) == "/tmp/scratch"


def test_code_sees_no_process_but_its_sandboxs_own(worker: Worker, proxy_url: str) -> None:
    reason = blocked(attack(worker, proxy_url, "processes"))
    assert reason.startswith("PermissionError: only the sandbox's own processes"), reason


def test_code_runs_as_nobody_without_any_capability(worker: Worker, proxy_url: str) -> None:
    got = leaked(attack(worker, proxy_url, "identity"))
    assert got["ids"] == [[65534] * 3, [65534] * 3, []]
    assert {v for k, v in got["caps"].items()} == {"0000000000000000"}, got["caps"]


def test_code_that_outlives_its_deadline_dies_with_all_its_children(
    worker: Worker, proxy_url: str
) -> None:
    marker = f"{time.time() % 1000:.6f}"
    start = time.monotonic()
    result = attack(worker, proxy_url, "hang", marker, deadline_s=3.0)
    assert result.timed_out and result.error == "TargetTimeout: the run passed its deadline"
    # A guard, not a speed check: a run that waited for the tree instead of ending it would
    # return when the 1000 s sleep does; a busy machine is far inside 300 s.
    assert time.monotonic() - start < 300
    assert outlived(marker) == [], "a process of the sandbox outlived its deadline"


def test_code_that_swaps_its_inbound_socket_for_a_symlink_cannot_aim_the_worker_at_the_host(
    worker: Worker, tmp_path: Path
) -> None:
    host_socket = socket.socket(socket.AF_UNIX)
    host_socket.bind(str(tmp_path / "control-plane.sock"))
    host_socket.listen()
    host_socket.settimeout(1.0)
    swap = (
        "import os, time; p = '/run/assaygate/run/in.sock'; os.unlink(p); "
        f"os.symlink({str(tmp_path / 'control-plane.sock')!r}, p); print('swapped', flush=True); "
        "time.sleep(60)"
    )
    sandbox = Sandbox(confinement(worker.code), [sys.executable, "-c", swap], serve=True)
    try:
        proc = sandbox.popen(stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline() == b"swapped\n"
        assert sandbox.url is not None
        relay = urlsplit(sandbox.url)
        assert relay.hostname is not None and relay.port is not None
        with socket.create_connection((relay.hostname, relay.port), timeout=10) as worker_side:
            worker_side.sendall(b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
            assert worker_side.recv(100) == b"", "the relay forwarded to what the symlink named"
        with pytest.raises(TimeoutError):
            host_socket.accept()
    finally:
        sandbox.close()
        host_socket.close()
