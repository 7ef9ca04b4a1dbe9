"""What the sandbox costs a run: wall time and CPU of the same command agent run unconfined and in
the sandbox, and of python-target trials over the relays.

    .venv/bin/python bench/sandbox_overhead.py [RUNS] [CPUACCT_DIR]

CPU is counted by a cgroup (v1 cpuacct) when CPUACCT_DIR names one (`mkdir
/sys/fs/cgroup/cpuacct/sandbox-bench`): this process joins it, and every process it starts, in or
out of a sandbox, counts there. Without one it is the whole machine's busy time (/proc/stat):
bubblewrap does not reap into this process's children's usage, so no per-process count includes
the sandbox; read that as an upper bound on a busy machine.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from service.core.faults.plan import parse_plan
from service.core.shards.assay import run_assay
from service.core.system.manifest import parse_manifest
from service.mcp.runners import CommandRunner
from service.sandbox import Confinement
from service.targets import load_target

ROOT = Path(__file__).resolve().parents[1]
AGENT = "import json, sys; json.load(sys.stdin); print(json.dumps({'status': 'done'}))"


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return


CPUACCT = Path(sys.argv[2]) if len(sys.argv) > 2 else None


def busy_s() -> float:
    """CPU seconds of this process's cgroup, or of the whole machine without one."""
    if CPUACCT is not None:
        return int((CPUACCT / "cpuacct.usage").read_text()) / 1e9
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    busy = sum(fields[:3]) + sum(fields[5:8])
    return busy / os.sysconf("SC_CLK_TCK")


def measure(label: str, runs: int, fn: Callable[[], object]) -> None:
    fn()  # the first sandbox of a process also checks bubblewrap once
    t0, c0 = time.perf_counter(), busy_s()
    for _ in range(runs):
        fn()
    wall, cpu = time.perf_counter() - t0, busy_s() - c0
    print(f"{label:48s} {1000 * wall / runs:7.1f} ms wall {1000 * cpu / runs:7.1f} ms CPU each")


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    if CPUACCT is not None:
        (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/t/x/mcp"
    code = Path(tempfile.mkdtemp())
    code.chmod(0o755)
    command = (sys.executable, "-c", AGENT)
    confined = Confinement(code_dir=code)
    for label, runner in (
        ("command run, unconfined", CommandRunner(command)),
        ("command run, sandboxed", CommandRunner(command, confined)),
    ):
        measure(label, runs, lambda r=runner: r.run({}, url, 30.0, threading.Event()))
    data = json_manifest()
    plan = parse_plan({"catalogue": "full", "trials": runs, "seed": 1, "modes": ["retry_storm"]})
    for label, confinement in (
        ("python target, unconfined", None),
        ("python target, sandboxed (relays)", Confinement(code_dir=ROOT)),
    ):
        manifest = parse_manifest(data)
        target = load_target(manifest, confinement=confinement)
        try:
            measure(
                f"{label}, an assay of {runs} trials",
                1,
                lambda m=manifest, t=target: run_assay(m, plan, t),
            )
        finally:
            target.close()  # type: ignore[union-attr]
    server.shutdown()


def json_manifest() -> dict[str, object]:
    import json

    data: dict[str, object] = json.loads((ROOT / "examples" / "copperfin-typed.json").read_text())
    data["target"] = {"kind": "python", "entrypoint": "tests.targets.agents.trusting:run"}
    return data


if __name__ == "__main__":
    main()
