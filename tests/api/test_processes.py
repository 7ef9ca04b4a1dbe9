"""`assaygate serve --processes 2`: two API processes on one port, each with its own
SO_REUSEPORT socket, beside the embedded worker child; a dead one restarted, all stopped together.
Run as a real process, embedded (SQLite and a filesystem broker), so it needs no servers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from service.serving import PROCESS_HEADER
from tests.support.service import ROOT, free_port, wait_for

pytestmark = pytest.mark.integration


class Served(NamedTuple):
    url: str
    server: subprocess.Popen[bytes]
    log: Path


def descendants(pid: int) -> dict[int, str]:
    """Every live process below `pid`, with its command line."""
    found: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                try:
                    cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
                except OSError:
                    continue
                if alive(child):
                    found[child] = cmdline.replace(b"\0", b" ").decode()
                    frontier.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def api_processes(pid: int) -> dict[int, str]:
    return {p: c for p, c in descendants(pid).items() if "service.serving" in c}


def fresh_answer(url: str) -> httpx.Response:
    """One request on a new connection: the kernel picks a socket per connection."""
    with httpx.Client(timeout=10.0) as client:
        return client.get(f"{url}/healthz")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "service.cli", "serve"),
                *("--port", str(port), "--processes", "2", "--workers", "1"),
            ],
            cwd=tmp_path,
            env={**env, "PYTHONPATH": str(ROOT), "ASSAYGATE_LOG_FORMAT": "text"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert server.poll() is None, log.read_text()
        return b"Assaygate is up" in log.read_bytes()

    try:
        wait_for(ready, 90.0, "serve --processes 2 up")
        yield Served(url, server, log)
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def test_two_api_processes_both_answer_on_the_one_port(served: Served) -> None:
    assert len(api_processes(served.server.pid)) == 2
    answered_by = {fresh_answer(served.url).headers[PROCESS_HEADER] for _ in range(60)}
    assert answered_by == {"1", "2"}


def test_a_killed_api_process_leaves_the_service_up_and_is_started_again(
    served: Served,
) -> None:
    before = api_processes(served.server.pid)
    victim = next(p for p, c in before.items() if c.split()[-2] == "1")
    os.kill(victim, signal.SIGKILL)
    # A connection that reaches the dying process's socket before its files are closed is reset
    # with it; once it is gone (a zombie holds no files) the kernel has dropped its socket from the
    # port's group, and every new connection is answered.
    wait_for(lambda: not alive(victim), 30.0, "the killed API process gone")
    answers = [fresh_answer(served.url) for _ in range(20)]
    assert all(a.status_code == 200 for a in answers)

    def replaced() -> bool:
        now = api_processes(served.server.pid)
        return len(now) == 2 and victim not in now

    wait_for(replaced, 60.0, "the killed API process started again")
    wait_for(
        lambda: any(fresh_answer(served.url).headers[PROCESS_HEADER] == "1" for _ in range(20)),
        30.0,
        "process 1 answering again",
    )
    assert "API process 1 exited with -9; restarting" in served.log.read_text()


def test_sigterm_stops_the_api_processes_and_the_worker_together(served: Served) -> None:
    children = descendants(served.server.pid)
    assert len(api_processes(served.server.pid)) == 2
    assert any(" -m worker" in c for c in children.values()), children
    served.server.send_signal(signal.SIGTERM)
    assert served.server.wait(timeout=30) == 0
    wait_for(lambda: not any(map(alive, children)), 20.0, "every child of serve gone")
    with pytest.raises(httpx.TransportError):
        fresh_answer(served.url)


def test_serve_refuses_fewer_than_one_process_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--processes", "0"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "--processes must be at least 1" in done.stderr


def test_an_api_process_takes_no_connection_on_the_shared_port_before_its_app_has_started(
    tmp_path: Path,
) -> None:
    # A restarted process's socket must not join the port's group while it imports and starts:
    # the kernel would hand it a share of new connections that then wait out the start (seconds
    # on a busy machine). Its start is held here on the secrets key, a FIFO it reads in the
    # app's lifespan, until the test writes the key.
    key = tmp_path / "secrets.key"
    os.mkfifo(key)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    read_fd, write_fd = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-m", "service.serving", "1", str(write_fd)],
        cwd=tmp_path,
        env={
            **env,
            "PYTHONPATH": str(ROOT),
            "ASSAYGATE_DATA_DIR": str(tmp_path / "data"),
            "ASSAYGATE_PORT": str(port),
            "ASSAYGATE_SECRETS_KEY_FILE": str(key),
        },
        pass_fds=(write_fd,),
    )
    os.close(write_fd)
    try:
        # A writer's non-blocking open succeeds once a reader is waiting in its open: the child
        # is in its lifespan, past its imports and its socket's bind.
        writer: list[int] = []

        def reading() -> bool:
            assert child.poll() is None
            try:
                writer.append(os.open(key, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                return False
            return True

        wait_for(reading, 60.0, "the API process reading its secrets key")
        with pytest.raises(httpx.ConnectError):
            fresh_answer(f"http://127.0.0.1:{port}")
        os.write(writer[0], os.urandom(32).hex().encode())
        os.close(writer[0])
        wait_for(lambda: os.read(read_fd, 1) == b"r", 60.0, "the API process ready")
        assert fresh_answer(f"http://127.0.0.1:{port}").status_code == 200
    finally:
        os.close(read_fd)
        child.terminate()
        child.wait(timeout=30)
