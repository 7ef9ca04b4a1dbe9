"""The reference workflow's native port: the public protocol's methods, and the same trials
through it whether the tools are the sandbox's own or any other port's."""

from __future__ import annotations

from typing import Any

import pytest

from assaygate.target import Tools as ToolPort
from service.core.faults.plan import AssayPlan
from service.core.shards.assay import run_assay
from service.core.trial.copperfin import copperfin
from service.core.trial.port import ForwardingPort, NativePort
from service.core.trial.sandbox import Task, Tools
from tests.core.conftest import load_example


def _methods(cls: type) -> set[str]:
    return {name for name in vars(cls) if not name.startswith("_")}


def test_the_native_port_and_its_forwarder_have_the_public_protocols_methods() -> None:
    public = _methods(ToolPort)
    assert _methods(NativePort) == public
    assert _methods(ForwardingPort) >= public
    # The sandbox's tools override every one of them (a stub left would raise mid-trial).
    assert _methods(Tools) >= public


class _ForeignPort:
    """A port that is not the sandbox's class (as a `python` target's stand-in is not)."""

    def __init__(self, tools: Tools) -> None:
        self.tools = tools

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tools, name)


@pytest.mark.parametrize("profile", ["baseline", "typed", "typed-repair", "refuse-all"])
def test_the_workflow_runs_the_same_trials_through_a_foreign_port(profile: str) -> None:
    manifest = load_example(profile)
    plan = AssayPlan(catalogue="paper", trials=600, seed=188, evidence_sample=None)
    workflow = copperfin(manifest)
    seen: list[bool] = []

    def through_a_foreign_port(task: Task, tools: Tools) -> None:
        # Typed as the sandbox's tools (`Target`), a reference target runs on any port.
        port: Any = _ForeignPort(tools)
        seen.append(isinstance(port, NativePort))
        workflow(task, port)

    own = run_assay(manifest, plan).to_dict()
    foreign = run_assay(manifest, plan, target=through_a_foreign_port).to_dict()
    assert seen and not any(seen)
    assert foreign == own
