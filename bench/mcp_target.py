"""Proxied trials per second of an mcp target on 2 workers (the warehouse example).

Each worker process has its own sandbox (the example's servers over its own SQLite file: one world
per sandbox, so trials on one sandbox are serialised), its own proxy and the careful agent served by
the python runner (a persistent child process; the command runner pays an interpreter start per
run). A proxied trial is reset (which also answers the fresh world, so no first probe), one run of
the agent through the proxy (nine tool calls and one listing), probe, and the invariants; the
proxy's sessions to the servers stay open for the whole run. `--upstream stdio` reaches the
example's servers over stdio instead of Streamable HTTP (the agent still talks HTTP to the proxy).
`--runner command` starts the agent as a command per run, `--runner lines` keeps one warm command
process (`protocol: "lines"`); agent processes that ended are counted from the worker's reaped
children.

Prints trials per second and the CPU a trial costs in each process (read from /proc: the worker,
i.e. engine and proxy; the sandbox servers; the agent's host); asserts nothing.

    .venv/bin/python bench/mcp_target.py [--trials 100] [--workers 2] [--upstream http|stdio]
        [--runner python|command|lines]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "mcp-warehouse"
ROLES = ("engine", "servers", "agent")


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


def _cpu_by_role(root: int) -> dict[str, float]:
    """CPU seconds (user + system) of `root` and its descendants, by what each process is."""
    parent: dict[int, int] = {}
    stats: dict[int, tuple[str, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        parent[int(entry)] = int(stat[1])
        stats[int(entry)] = (cmd, (int(stat[11]) + int(stat[12])) / tick)
    out = dict.fromkeys(ROLES, 0.0)
    for pid, (cmd, cpu) in stats.items():
        p = pid
        while p not in (root, 0, 1) and p in parent:
            p = parent[p]
        if p != root:
            continue
        agent = "mcp_host" in cmd or "agents.py" in cmd
        role = "servers" if "servers.py" in cmd else "agent" if agent else "engine"
        out[role] += cpu
    # Agent processes that already ended (a command per run) were reaped by this process.
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    out["agent"] += reaped.ru_utime + reaped.ru_stime
    return out


def worker(  # type: ignore[type-arg]
    index: int, trials: int, fault: str | None, upstream: str, runner: str, out: mp.Queue
) -> None:
    sys.path.insert(0, str(EXAMPLE))
    sys.path.insert(0, str(ROOT))
    from service.core.faults.contract_catalogue import catalogue_for
    from service.core.system.manifest import parse_manifest
    from service.mcp.engine import McpEngine

    db = Path(tempfile.mkdtemp()) / f"bench-{index}.db"
    data = json.loads((EXAMPLE / "manifest.careful.json").read_text())
    run = [sys.executable, str(EXAMPLE / "servers.py")]
    servers = None
    if upstream == "stdio":
        data["tools"]["servers"] = {
            "shop": {"command": [*run, "shop-stdio", "--db", str(db)]},
            "admin": {"command": [*run, "admin-stdio", "--db", str(db)]},
        }
    else:
        shop, admin = _port(), _port()
        ports = ["--shop-port", str(shop), "--admin-port", str(admin)]
        servers = subprocess.Popen(
            [*run, "http", "--db", str(db), *ports],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait(shop)
        _wait(admin)
        data["tools"]["servers"] = {
            "shop": {"url": f"http://127.0.0.1:{shop}/mcp"},
            "admin": {"url": f"http://127.0.0.1:{admin}/mcp"},
        }
    try:
        careful = [sys.executable, str(EXAMPLE / "agents.py"), "careful"]
        data["target"]["runner"] = (
            {"kind": "python", "entrypoint": "agents:run_careful"}
            if runner == "python"
            else {"kind": "command", "command": careful}
            if runner == "command"
            else {"kind": "command", "command": [*careful, "--lines"], "protocol": "lines"}
        )
        manifest = parse_manifest(data)
        cat = catalogue_for(manifest)
        spec = cat.by_id(fault) if fault else None
        engine = McpEngine(manifest, cat)
        try:
            engine.run_trial(spec, 1, 1, frozenset(), False)  # warm up
            bad = 0
            cpu0 = _cpu_by_role(os.getpid())
            start = time.perf_counter()
            for k in range(trials):
                rec = engine.run_trial(spec, 1000 + k, k, frozenset(), False)
                bad += int(not rec.outcome.get("verified"))
            wall = time.perf_counter() - start
            cpu1 = _cpu_by_role(os.getpid())
            cpu = {r: cpu1[r] - cpu0[r] for r in ROLES}
            out.put((trials, wall, bad, cpu))
        finally:
            engine.close()
    finally:
        if servers is not None:
            servers.terminate()
            servers.wait(10)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=100, help="trials per worker")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--fault", default=None, help="arm this fault (default: baseline trials)")
    p.add_argument("--upstream", choices=["http", "stdio"], default="http")
    p.add_argument("--runner", choices=["python", "command", "lines"], default="python")
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    q: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    procs = [
        ctx.Process(target=worker, args=(i, a.trials, a.fault, a.upstream, a.runner, q))
        for i in range(a.workers)
    ]
    for proc in procs:
        proc.start()
    results = [q.get() for _ in procs]
    for proc in procs:
        proc.join()
    total = sum(r[0] for r in results)
    wall = max(r[1] for r in results)
    bad = sum(r[2] for r in results)
    cpu = {role: sum(r[3][role] for r in results) for role in ROLES}
    label = f"{a.fault or 'baseline'}, upstream {a.upstream}, runner {a.runner}"
    print(f"mcp target: {total} proxied trials on {a.workers} workers in {wall:.2f} s")
    print(f"  {total / wall:.1f} proxied trials/s ({label}; {bad} not verified)")
    per = {role: 1000 * cpu[role] / total for role in ROLES}
    print(
        f"  CPU a trial: {sum(per.values()):.1f} ms "
        f"(engine and proxy {per['engine']:.1f}, servers {per['servers']:.1f}, "
        f"agent {per['agent']:.1f})"
    )
    for i, (n, t, _, _) in enumerate(results):
        print(f"  worker {i}: {n / t:.1f} trials/s ({1000 * t / n:.1f} ms a trial)")


if __name__ == "__main__":
    main()
