"""Service latency: submission to decision, and GET latency under concurrent load.

    .venv/bin/python bench/service_latency.py [--backend auto|redis|embedded] [--trials 1000]

For 1 and then 2 worker processes it starts the real processes (`assaygate serve --no-worker`
and `python -m worker --pool solo`), submits the full catalogue at `--trials` trials per fault
and times submission to decision; then it measures GET latency with `--clients` concurrent
clients. `auto` uses PostgreSQL and Redis when they answer, else the embedded SQLite and
filesystem broker. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = json.loads((ROOT / "examples" / "copperfin-typed.json").read_text())
PG_ADMIN = os.environ.get("ASSAYGATE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("ASSAYGATE_BENCH_REDIS", "redis://127.0.0.1:6379/14")


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def backend(kind: str, scratch: Path, trials_per_shard: int | None) -> Iterator[dict[str, str]]:
    tag = f"assaygate-bench-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    env.update(ASSAYGATE_DATA_DIR=str(scratch), ASSAYGATE_LOG_LEVEL="WARNING")
    if trials_per_shard:
        env["ASSAYGATE_TRIALS_PER_SHARD"] = str(trials_per_shard)
    if kind == "embedded":
        yield env
        return
    import psycopg
    import redis

    name = tag.replace("-", "_")
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    env.update(
        ASSAYGATE_DATABASE_URL=PG_ADMIN.rsplit("/", 1)[0].replace(
            "postgresql://", "postgresql+psycopg://", 1
        )
        + f"/{name}",
        ASSAYGATE_BROKER_URL=REDIS,
        ASSAYGATE_QUEUE=tag,
        ASSAYGATE_REDIS_KEY_PREFIX=f"{tag}:",
    )
    try:
        yield env
    finally:
        client = redis.Redis.from_url(REDIS)
        keys = list(client.scan_iter(match=f"{tag}:*"))
        if keys:
            client.delete(*keys)
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# The bench's API key, made by `assaygate keys create` once the database is migrated.
HEADERS: dict[str, str] = {}


@contextmanager
def service(env: dict[str, str], workers: int) -> Iterator[str]:
    python = sys.executable
    subprocess.run([python, "-m", "service.cli", "db", "upgrade"], env=env, cwd=ROOT, check=True)
    created = subprocess.run(
        [
            *(python, "-m", "service.cli", "keys", "create", "--tenant", "bench"),
            *("--role", "submitter", "--role", "reviewer", "--role", "admin"),
            *("--service-account", "bench"),
        ],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    HEADERS["Authorization"] = "Bearer " + json.loads(created.stdout)["key"]
    port = free_port()
    api = subprocess.Popen(
        [
            *(python, "-m", "service.cli", "serve", "--no-worker", "--no-migrate"),
            *("--port", str(port)),
        ],
        env=env,
        cwd=ROOT,
    )
    pool = [
        subprocess.Popen(
            [python, "-m", "worker", "--pool", "solo", "--hostname", f"bench{n}@%h"],
            env=env,
            cwd=ROOT,
        )
        for n in range(workers)
    ]
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the service did not become ready")
            time.sleep(0.1)
        yield url
    finally:
        for process in [api, *pool]:
            stop(process)


def decide(client: httpx.Client, trials: int, seed: int) -> tuple[float, dict[str, Any]]:
    """Seconds from sending the submission to the decision being stored.

    The end is the assay's `finished_at` (same machine, same clock), not the moment a poll sees
    it, so the poll can be as lazy as a CI job's without blurring the figure or taking CPU from
    the workers.
    """
    body = {
        "source_revision": "bench",
        "manifest": MANIFEST,
        "plan": {"trials": trials, "seed": seed},
    }
    sent = time.time()
    candidate = client.post("/v1/candidates", json=body).json()
    accepted = time.time() - sent
    while True:
        time.sleep(0.2)
        status = client.get(f"/v1/candidates/{candidate['id']}").json()
        if status["status"] in ("done", "stopped", "failed"):
            break
    assay = client.get(f"/v1/assays/{status['assay_id']}").json()
    created, first, finished = (
        datetime.fromisoformat(assay[k]) for k in ("created_at", "started_at", "finished_at")
    )
    status["phases"] = (
        f"202 in {accepted * 1000:.0f} ms, first shard after "
        f"{(first - created).total_seconds() * 1000:.0f} ms, shards and merge "
        f"{(finished - first).total_seconds():.2f} s"
    )
    return finished.timestamp() - sent, status


def get_latency(url: str, path: str, clients: int, seconds: float) -> list[float]:
    samples: list[float] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def hammer() -> None:
        mine: list[float] = []
        with httpx.Client(base_url=url, timeout=30.0, headers=HEADERS) as client:
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                client.get(path).raise_for_status()
                mine.append(time.perf_counter() - started)
        with lock:
            samples.extend(mine)

    threads = [threading.Thread(target=hammer) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return samples


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("auto", "redis", "embedded"), default="auto")
    parser.add_argument("--trials", type=int, default=1000, help="trials per fault")
    parser.add_argument("--runs", type=int, default=2, help="timed runs per worker count")
    parser.add_argument("--clients", type=int, default=16, help="concurrent GET clients")
    parser.add_argument("--seconds", type=float, default=3.0, help="GET load duration")
    parser.add_argument("--trials-per-shard", type=int, default=None, help="default: the service's")
    args = parser.parse_args()
    kind = args.backend
    if kind == "auto":
        kind = (
            "redis" if reachable("127.0.0.1", 5432) and reachable("127.0.0.1", 6379) else "embedded"
        )
    print(
        f"backend: {kind}; full catalogue, {args.trials} trials per fault; "
        f"one API process; {os.cpu_count()} CPUs"
    )

    best: dict[int, float] = {}
    for workers in (1, 2):
        with (
            tempfile.TemporaryDirectory() as scratch,
            backend(kind, Path(scratch), args.trials_per_shard) as env,
            service(env, workers) as url,
            httpx.Client(base_url=url, timeout=60, headers=HEADERS) as client,
        ):
            decide(client, 5, 1)  # warm: imports, connection pools, the catalogue
            times = []
            for run in range(args.runs):
                seconds, status = decide(client, args.trials, 188 + run)
                times.append(seconds)
                print(
                    f"  {workers} worker(s), run {run + 1}: {seconds:6.2f} s to decision "
                    f"({status['decision']}, {status['progress']['trials_done']} trials, "
                    f"{status['progress']['shard_count']} shards; {status['phases']})"
                )
            best[workers] = min(times)
            if workers == 2:
                ids = client.get("/v1/candidates", params={"limit": 1}).json()["items"][0]
                for label, path in (
                    ("GET /v1/candidates/{id}", f"/v1/candidates/{ids['id']}"),
                    ("GET /v1/candidates?limit=20", "/v1/candidates?limit=20"),
                    ("GET /v1/systems", "/v1/systems"),
                    ("GET /v1/gate/{system}", f"/v1/gate/{ids['system']}"),
                ):
                    for clients in sorted({1, args.clients}):
                        samples = get_latency(url, path, clients, args.seconds)
                        print(
                            f"  {label:<28} {clients:>3} client(s): {len(samples):>5} requests, "
                            f"{len(samples) / args.seconds:6.0f}/s, "
                            f"p50 {percentile(samples, 0.50) * 1000:6.1f} ms, "
                            f"p99 {percentile(samples, 0.99) * 1000:6.1f} ms"
                        )
    print(
        f"submission to decision, best of {args.runs}: 1 worker {best[1]:.2f} s, "
        f"2 workers {best[2]:.2f} s, speedup {best[1] / best[2]:.2f}x"
    )


if __name__ == "__main__":
    main()
