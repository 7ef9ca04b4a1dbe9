"""Real agent processes on loopback for the target tests; no mocks anywhere."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from service.core.assay import AssayReport, run_assay
from service.core.manifest import Manifest, parse_manifest, parse_manifest_json
from service.core.plan import AssayPlan, parse_plan
from service.core.target import Target

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "examples" / "http-agent" / "agent.py"
BAD_AGENT = Path(__file__).resolve().parent / "agents" / "bad_agent.py"

StartAgent = Callable[..., str]


def example(name: str, **target: Any) -> Manifest:
    """An example manifest, optionally pointed at another target."""
    data = json.loads((ROOT / "examples" / f"copperfin-{name}.json").read_text())
    if target:
        data["target"] = target
        return parse_manifest(data)
    return parse_manifest_json(json.dumps(data))


def plan(trials: int, *modes: str, seed: int = 188) -> AssayPlan:
    return parse_plan({"catalogue": "full", "trials": trials, "seed": seed, "modes": list(modes)})


def assay(manifest: Manifest, p: AssayPlan, target: Target | None = None) -> dict[str, Any]:
    report: AssayReport = run_assay(manifest, p, target=target)
    return report.to_dict()


def fault(report: dict[str, Any], fault_id: str) -> dict[str, Any]:
    return next(f for f in report["faults"] if f["id"] == fault_id)


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture
def start_agent() -> Iterator[StartAgent]:
    """Start an agent script as its own process; returns its URL. Stopped after the test."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str, script: Path = AGENT) -> str:
        proc = subprocess.Popen(
            [sys.executable, str(script), "--port", "0", *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on "), f"the agent did not start: {line!r}"
        return line.split()[-1]

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)
