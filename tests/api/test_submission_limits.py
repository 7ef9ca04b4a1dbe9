"""What a submitter can send that costs the service: a CEL bomb, target fields a worker cannot use,
and request heads of any size. Refused at the edge, naming the field, with nothing written, while
the API keeps answering."""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.settings import Settings
from tests.support.service import free_port, terminate, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
WAREHOUSE = ROOT / "examples" / "mcp-warehouse" / "manifest.careful.json"
LIST_100 = "[" + ",".join(str(i) for i in range(100)) + "]"
BOMB = f"{LIST_100}.all(a, {LIST_100}.all(b, {LIST_100}.all(c, {LIST_100}.all(d, a+b+c+d >= 0))))"


def mcp_body(**target: Any) -> dict[str, Any]:
    manifest = json.loads(WAREHOUSE.read_text())
    manifest["system"] = "limits-warehouse"
    manifest["target"] = {**manifest["target"], **target}
    return {"source_revision": "0123abc", "manifest": manifest}


def refused(response: httpx.Response, status: int, field: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["field"] == field, error
    return error


def test_the_nested_all_bomb_is_refused_while_healthz_keeps_answering(
    client: httpx.Client, api_url: str, unchanged: None
) -> None:
    body = mcp_body()
    body["manifest"]["invariants"]["predicates"][0]["expr"] = BOMB
    slowest: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=api_url, timeout=30.0) as probe_client:
            while not stop.is_set():
                started = time.monotonic()
                assert probe_client.get("/healthz").status_code == 200
                slowest.append(time.monotonic() - started)
                time.sleep(0.02)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        time.sleep(0.2)
        started = time.monotonic()
        for _ in range(5):
            error = refused(
                client.post("/v1/candidates", json=body),
                422,
                "manifest.invariants.predicates.0.expr",
            )
        took = time.monotonic() - started
        time.sleep(0.2)
    finally:
        stop.set()
        prober.join()
    # Refused by the static estimate (its message), never evaluated: evaluating the bomb's 10^8
    # steps would hold the API for minutes. The bounds are guards against that, not speed checks
    # a busy machine could fail.
    assert "over the budget" in error["message"] and "estimated cost" in error["message"]
    assert took < 60.0
    assert slowest and max(slowest) < 10.0


@pytest.mark.parametrize(
    ("target", "field"),
    [
        ({"runner": {"kind": "http", "url": "file:///etc/passwd"}}, "target.runner.url"),
        ({"runner": {"kind": "http", "url": "::::"}}, "target.runner.url"),
        ({"runner": {"kind": "http", "url": "http://"}}, "target.runner.url"),
        ({"runner": {"kind": "http", "url": "http://user:pw@host/"}}, "target.runner.url"),
        ({"runner": {"kind": "http", "url": "http://host:70000/"}}, "target.runner.url"),
        ({"runner": {"kind": "python", "entrypoint": ":"}}, "target.runner.entrypoint"),
        ({"runner": {"kind": "python", "entrypoint": "a:b:c"}}, "target.runner.entrypoint"),
        ({"runner": {"kind": "langgraph", "entrypoint": "1x:y"}}, "target.runner.entrypoint"),
        ({"runner": {"kind": "command", "command": []}}, "target.runner.command"),
        ({"runner": {"kind": "command", "command": ["python", ""]}}, "target.runner.command"),
    ],
)
def test_a_runner_field_a_worker_cannot_use_is_refused_naming_it(
    client: httpx.Client, unchanged: None, target: dict[str, Any], field: str
) -> None:
    refused(client.post("/v1/candidates", json=mcp_body(**target)), 422, f"manifest.{field}")


REMOTE_RUNNER = {"kind": "http", "url": "https://agent.example/run"}


@pytest.mark.parametrize(
    ("target", "field"),
    [
        ({"runner": {**REMOTE_RUNNER, "command": ["python", "a.py"]}}, "target.runner.command"),
        ({"runner": {**REMOTE_RUNNER, "entrypoint": "agent:run"}}, "target.runner.entrypoint"),
        ({"runner": {"kind": "python", "entrypoint": "a:b", "command": ["sh"]}},
         "target.runner.command"),
        ({"entrypoint": "agent:run"}, "target.entrypoint"),
    ],
)  # fmt: skip
def test_a_remote_kind_carrying_code_fields_is_refused_naming_the_field(
    client: httpx.Client, unchanged: None, target: dict[str, Any], field: str
) -> None:
    error = refused(
        client.post("/v1/candidates", json=mcp_body(**target)), 422, f"manifest.{field}"
    )
    assert "code the gate runs" in error["message"]


def test_an_http_hook_carrying_a_command_is_refused_naming_it(
    client: httpx.Client, unchanged: None
) -> None:
    body = mcp_body()
    tools = copy.deepcopy(body["manifest"]["tools"])
    tools["hooks"]["reset"] = {"kind": "http", "url": "https://h.example/", "command": ["sh"]}
    body["manifest"]["tools"] = tools
    error = refused(
        client.post("/v1/candidates", json=body), 422, "manifest.tools.hooks.reset.command"
    )
    assert "code the gate runs" in error["message"]


def test_an_http_target_url_that_is_a_file_is_refused(
    client: httpx.Client, unchanged: None
) -> None:
    body = mcp_body()
    manifest = body["manifest"]
    manifest["target"] = {"kind": "http", "url": "file:///etc/passwd"}
    manifest.pop("invariants")
    refused(client.post("/v1/candidates", json=body), 422, "manifest.target.url")


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("servers", "shop"), {"url": "file:///etc/passwd"}, "tools.servers.shop.url"),
        (("servers", "shop"), {"command": ["a\x01"]}, "tools.servers.shop.command.0"),
        (("hooks", "reset"), {"kind": "http", "url": "gopher://h/"}, "tools.hooks.reset.url"),
        (("hooks", "reset"), {"kind": "command", "command": [""]}, "tools.hooks.reset.command"),
    ],
)
def test_a_contract_url_or_command_a_worker_cannot_use_is_refused_naming_it(
    client: httpx.Client, unchanged: None, path: tuple[str, str], value: Any, field: str
) -> None:
    body = mcp_body()
    tools = copy.deepcopy(body["manifest"]["tools"])
    tools[path[0]][path[1]] = value
    body["manifest"]["tools"] = tools
    refused(client.post("/v1/candidates", json=body), 422, f"manifest.{field}")


# ------------------------------------------------------------------ request heads (assaygate serve)


def rss_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def served(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, int]]:
    """`assaygate serve` (one process, no worker) on the suite's database: (url, pid)."""
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    env = {**settings.child_environment(), "ASSAYGATE_LOG_FORMAT": "text"}
    env["PYTHONPATH"] = str(ROOT)
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "service.cli", "serve", "--port", str(port)),
                *("--processes", "1", "--no-worker", "--no-migrate"),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: b"Assaygate is up" in log.read_bytes(), 90.0, "serve up")
        yield f"http://127.0.0.1:{port}", server.pid
    finally:
        terminate(server)


def send_head(url: str, request_line: bytes, header_bytes: int, one_header: bool) -> bytes:
    """Send a request head of `header_bytes`; the first bytes of the answer."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request_line + b"Host: x\r\n" + (b"X-One: " if one_header else b""))
        chunk = b"a" * 65536 if one_header else b"X-Pad: " + b"a" * 65520 + b"\r\n"
        sent = 0
        try:
            while sent < header_bytes:
                sock.sendall(chunk)
                sent += len(chunk)
            sock.sendall(b"\r\n\r\n")
        except OSError:
            pass  # the server answered and closed while we were still sending
        try:
            return sock.recv(65536)
        except OSError:
            return b""


@pytest.mark.parametrize("one_header", [False, True], ids=["many headers", "one header"])
def test_64_mb_of_headers_get_431_without_a_key_and_the_server_stays_small(
    served: tuple[str, int], one_header: bool
) -> None:
    url, pid = served
    before = rss_mb(pid)
    answer = send_head(url, b"GET /v1/candidates HTTP/1.1\r\n", 64 * 1024 * 1024, one_header)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body["error"]["field"] == "headers"
    assert rss_mb(pid) - before < 20
    assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200


def test_an_overlong_request_line_gets_414(served: tuple[str, int]) -> None:
    url, _ = served
    answer = send_head(url, b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n", 0, False)
    assert answer.startswith(b"HTTP/1.1 414"), answer[:200]


def test_ordinary_heads_are_served(served: tuple[str, int]) -> None:
    url, _ = served
    headers = {f"x-h{i}": "v" * 100 for i in range(60)}
    assert httpx.get(f"{url}/healthz", headers=headers, timeout=5).status_code == 200
    too_many = {f"x-h{i}": "v" for i in range(150)}
    assert httpx.get(f"{url}/healthz", headers=too_many, timeout=5).status_code == 431
