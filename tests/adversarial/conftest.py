"""The red team's bench: manifests pointed at attacking targets, real child processes and real HTTP
agents on loopback, and small readers for the decision and its reasons. No mocks anywhere."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.core.faults.catalogue import Catalogue, FaultSpec, full_catalogue
from service.core.faults.plan import AssayPlan, parse_plan
from service.core.system.manifest import Manifest
from service.core.trial.harness import Runtime, run_trial
from service.core.trial.record import TrialRecord
from service.targets import close_target, load_target
from tests.mcp.conftest import sandbox
from tests.support.agents import StartAgent, agent_processes
from tests.targets.conftest import assay, example

# The warehouse example's real MCP servers, for the attacks on a team's own world.
__all__ = ["sandbox"]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_AGENT = ROOT / "examples" / "http-agent" / "agent.py"
LIAR_HTTP = Path(__file__).resolve().parent / "agents" / "liar_http.py"
AGENTS = "tests.adversarial.agents"
ALL_CONTROLS = (
    "bind_identity",
    "pre_effect_authority",
    "refresh_context",
    "state_precondition",
    "idempotency",
    "effect_readback",
    "evidence_gate",
    "evidence_repair",
)


def entry(name: str) -> str:
    """`module:callable` of an attacking agent in tests/adversarial/agents."""
    return f"{AGENTS}.{name}"


def manifest(
    profile: str = "typed-repair",
    *,
    controls: tuple[str, ...] | None = None,
    cannot_disable: tuple[str, ...] = (),
    **target: Any,
) -> Manifest:
    """An example manifest pointed at a target; `controls`, if given, is all it declares. Its
    floors compare the point estimate (`tests.support.service.example`): the attacks decide at
    a handful of trials; test_chance.py and test_promise.py set the envelope they read."""
    data = example(profile).model_dump(mode="json")
    data["target"] = {**target, "cannot_disable": list(cannot_disable)}
    if controls is not None:
        data["controls"] = {c: c in controls for c in ALL_CONTROLS}
    return Manifest.model_validate(data)


def plan(trials: int, *modes: str, **options: Any) -> AssayPlan:
    return parse_plan(
        {"catalogue": "full", "trials": trials, "seed": 188, "modes": list(modes), **options}
    )


def assay_target(m: Manifest, p: AssayPlan) -> dict[str, Any]:
    """Assay the manifest's target through its real adapter (a python target's child process, or
    the HTTP adapter), then release the adapter."""
    target = load_target(m)
    try:
        return assay(m, p, target)
    finally:
        close_target(target)


def one_trial(
    m: Manifest, target: Any, spec: FaultSpec, cat: Catalogue | None = None, key: int = 7
) -> TrialRecord:
    """One intervention trial (of the full catalogue's fault, or `cat`'s), with its world."""
    rt = Runtime(m, cat or full_catalogue(), target)
    return run_trial(rt, spec, key, key + 1)


def codes(report: dict[str, Any]) -> set[str]:
    return {r["code"] for r in report["reasons"]}


def reasons(report: dict[str, Any], code: str) -> list[dict[str, Any]]:
    return [r for r in report["reasons"] if r["code"] == code]


def severities(report: dict[str, Any]) -> set[str]:
    return {r["severity"] for r in report["reasons"]}


def counts(report: dict[str, Any], fault_id: str) -> dict[str, int]:
    f = next(f for f in report["faults"] if f["id"] == fault_id)
    out: dict[str, int] = f["signature"]["counts"]
    return out


def write_manifest(path: Path, m: Manifest) -> Path:
    path.write_text(json.dumps(m.model_dump(mode="json")))
    return path


@pytest.fixture
def start_agent() -> Iterator[StartAgent]:
    """Start an HTTP agent script as its own process; returns its URL. Stopped after the test."""
    with agent_processes(EXAMPLE_AGENT) as start:
        yield start
