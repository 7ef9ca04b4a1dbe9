"""Real agent processes on loopback for the target tests; no mocks anywhere."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.core.faults.plan import AssayPlan, parse_plan
from service.core.shards.assay import AssayReport, run_assay
from service.core.system.manifest import Manifest, parse_manifest, parse_manifest_json
from service.core.trial.target import Target
from tests.support.agents import StartAgent, agent_processes
from tests.support.service import example as example_dict

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "examples" / "http-agent" / "agent.py"
BAD_AGENT = Path(__file__).resolve().parent / "agents" / "bad_agent.py"


def example(name: str, **target: Any) -> Manifest:
    """An example manifest, optionally pointed at another target."""
    data = example_dict(name)
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


@pytest.fixture
def start_agent() -> Iterator[StartAgent]:
    """Start an agent script as its own process; returns its URL. Stopped after the test."""
    with agent_processes(AGENT) as start:
        yield start
