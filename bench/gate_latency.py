"""Gate read latency: 16 keep-alive clients on `GET /v1/gate/{system}` of a real `serve`.

    .venv/bin/python bench/gate_latency.py [--clients 16] [--seconds 10] [--processes 1 2]

Against PostgreSQL and Redis (a fresh database, dropped afterwards): migrates, mints a key, starts
one worker to decide a small candidate (so the gate has a signed dossier to answer from), stops
the worker, then for each `--processes` count starts `assaygate serve --processes N --no-worker`
and hammers the gate route with `--clients` connections, each sending its next request as soon as
the last reply is read. The client is one asyncio loop writing raw HTTP/1.1, so it costs the
2-core machine little. Prints requests/s, p50 and p99 side by side against the issue's anchor;
`--json FILE` writes the figures for bench/summary.py. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from service_latency import (
    MANIFEST,
    ROOT,
    backend,
    free_port,
    percentile,
    reachable,
    stop,
)

# Issue 17's measurement: one uvicorn process, 16 clients.
ANCHOR = {"requests_per_s": 105.0, "p99_ms": 268.0}
AIM_P99_MS = 20.0
SYSTEM = str(MANIFEST["system"])


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout


def _ready(url: str, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while True:
        try:
            if httpx.get(f"{url}/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("the service did not become ready")
        time.sleep(0.1)


@contextmanager
def serve(env: dict[str, str], processes: int) -> Iterator[str]:
    """A running `serve`, once every one of its API processes listens (it says so on stdout)."""
    port = free_port()
    api = subprocess.Popen(
        [
            *(sys.executable, "-m", "service.cli", "serve", "--no-worker", "--no-migrate"),
            *("--port", str(port), "--processes", str(processes)),
        ],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert api.stdout is not None
        for line in api.stdout:
            if "Assaygate is up" in line:
                break
        else:
            raise SystemExit("serve exited before it listened")
        _ready(url)
        yield url
    finally:
        stop(api)


def decide_one(env: dict[str, str], key: str) -> None:
    """Submit a small candidate and wait for its decision, with one worker running."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "worker", "--pool", "solo", "--hostname", "gatebench@%h"],
        env=env,
        cwd=ROOT,
    )
    try:
        with (
            serve(env, 1) as url,
            httpx.Client(
                base_url=url, timeout=60, headers={"Authorization": f"Bearer {key}"}
            ) as client,
        ):
            body = {"source_revision": "bench", "manifest": MANIFEST, "plan": {"trials": 5}}
            created = client.post("/v1/candidates", json=body)
            created.raise_for_status()
            deadline = time.monotonic() + 120
            while client.get(f"/v1/candidates/{created.json()['id']}").json()["status"] not in (
                "done",
                "stopped",
                "failed",
            ):
                if time.monotonic() > deadline:
                    raise SystemExit("the candidate was not decided within 120 s")
                time.sleep(0.2)
            client.get(f"/v1/gate/{SYSTEM}").raise_for_status()
    finally:
        stop(worker)


async def _client(
    port: int, request: bytes, stop_at: float, samples: list[float], by: Counter[str]
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            writer.write(request)
            status = await reader.readline()
            length, process = 0, "?"
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"assaygate-process":
                    process = value.strip().decode()
            await reader.readexactly(length)
            samples.append(time.perf_counter() - started)
            if b" 200 " not in status:
                raise SystemExit(f"the gate answered {status!r}")
        by[process] += 1
    finally:
        writer.close()


async def _hammer(url: str, key: str, clients: int, seconds: float) -> dict[str, Any]:
    port = int(url.rsplit(":", 1)[1])
    request = (
        f"GET /v1/gate/{SYSTEM} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n\r\n"
    ).encode()
    samples: list[float] = []
    by: Counter[str] = Counter()
    stop_at = time.monotonic() + seconds
    await asyncio.gather(*(_client(port, request, stop_at, samples, by) for _ in range(clients)))
    return {
        "requests": len(samples),
        "requests_per_s": len(samples) / seconds,
        "p50_ms": percentile(samples, 0.50) * 1000,
        "p99_ms": percentile(samples, 0.99) * 1000,
        "connections_per_process": dict(sorted(by.items())),
    }


def measure(clients: int, seconds: float, counts: list[int]) -> dict[str, Any]:
    if not (reachable("127.0.0.1", 5432) and reachable("127.0.0.1", 6379)):
        raise SystemExit("the gate bench needs PostgreSQL on :5432 and Redis on :6379")
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch, backend("redis", Path(scratch), None) as env:
        _cli(env, "db", "upgrade")
        created = _cli(
            env,
            *("keys", "create", "--tenant", "bench", "--role", "submitter", "--role", "reviewer"),
            *("--service-account", "bench"),
        )
        key = json.loads(created)["key"]
        decide_one(env, key)
        for processes in counts:
            with serve(env, processes) as url:
                asyncio.run(_hammer(url, key, clients, 1.0))  # warm: pools, imports, caches
                rows[str(processes)] = asyncio.run(_hammer(url, key, clients, seconds))
    return {"clients": clients, "seconds": seconds, "processes": rows, "anchor": ANCHOR}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0, help="load per process count")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    print(
        f"GET /v1/gate/{{system}}: {args.clients} keep-alive clients, {args.seconds:g} s each; "
        f"PostgreSQL and Redis; {os.cpu_count()} CPUs"
    )
    figures = measure(args.clients, args.seconds, args.processes)
    print(f"{'':>22} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}  connections per process")
    print(
        f"{'anchor (issue 17)':>22} {ANCHOR['requests_per_s']:>8.0f} {'':>8} "
        f"{ANCHOR['p99_ms']:>8.0f}"
    )
    for processes, row in figures["processes"].items():
        print(
            f"{f'--processes {processes}':>22} {row['requests_per_s']:>8.0f} "
            f"{row['p50_ms']:>8.1f} {row['p99_ms']:>8.1f}  {row['connections_per_process']}"
        )
    print(f"aim: p99 ≤ {AIM_P99_MS:g} ms at {args.clients} clients")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
