"""Proxied trials per second of an mcp target on 2 workers (the warehouse example).

Each worker process has its own sandbox (the example's servers over its own SQLite file: one world
per sandbox, so trials on one sandbox are serialised), its own proxy and the careful agent served by
the python runner (a persistent child process; the command runner pays an interpreter start per
run). A proxied trial is reset (which also answers the fresh world, so no first probe), one run of
the agent through the proxy (nine tool calls and one listing), probe, and the invariants; the
proxy's sessions to the servers stay open for the whole run. Prints figures; asserts nothing.

    .venv/bin/python bench/mcp_target.py [--trials 100] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "mcp-warehouse"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(port: int) -> None:
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"port {port} never opened")


def worker(index: int, trials: int, fault: str | None, out: mp.Queue) -> None:  # type: ignore[type-arg]
    sys.path.insert(0, str(EXAMPLE))
    sys.path.insert(0, str(ROOT))
    from service.core.contract import catalogue_for
    from service.core.manifest import parse_manifest
    from service.mcp.engine import McpEngine

    db = Path(tempfile.mkdtemp()) / f"bench-{index}.db"
    shop, admin = _port(), _port()
    servers = subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLE / "servers.py"),
            "http",
            "--db",
            str(db),
            "--shop-port",
            str(shop),
            "--admin-port",
            str(admin),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait(shop)
        _wait(admin)
        data = json.loads((EXAMPLE / "manifest.careful.json").read_text())
        data["tools"]["servers"] = {
            "shop": {"url": f"http://127.0.0.1:{shop}/mcp"},
            "admin": {"url": f"http://127.0.0.1:{admin}/mcp"},
        }
        data["target"]["runner"] = {"kind": "python", "entrypoint": "agents:run_careful"}
        manifest = parse_manifest(data)
        cat = catalogue_for(manifest)
        spec = cat.by_id(fault) if fault else None
        engine = McpEngine(manifest, cat)
        try:
            engine.run_trial(spec, 1, 1, frozenset(), False)  # warm up
            bad = 0
            start = time.perf_counter()
            for k in range(trials):
                rec = engine.run_trial(spec, 1000 + k, k, frozenset(), False)
                bad += int(not rec.outcome.get("verified"))
            out.put((trials, time.perf_counter() - start, bad))
        finally:
            engine.close()
    finally:
        servers.terminate()
        servers.wait(10)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=100, help="trials per worker")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--fault", default=None, help="arm this fault (default: baseline trials)")
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    q: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    procs = [ctx.Process(target=worker, args=(i, a.trials, a.fault, q)) for i in range(a.workers)]
    for proc in procs:
        proc.start()
    results = [q.get() for _ in procs]
    for proc in procs:
        proc.join()
    total = sum(n for n, _, _ in results)
    wall = max(t for _, t, _ in results)
    bad = sum(b for _, _, b in results)
    print(f"mcp target: {total} proxied trials on {a.workers} workers in {wall:.2f} s")
    print(f"  {total / wall:.1f} proxied trials/s ({a.fault or 'baseline'}; {bad} not verified)")
    for i, (n, t, _) in enumerate(results):
        print(f"  worker {i}: {n / t:.1f} trials/s ({1000 * t / n:.1f} ms a trial)")


if __name__ == "__main__":
    main()
