"""A python target that runs the reference workflow only when its sandbox handed it exactly its
named secret and declared variable, and nothing of the worker's environment; otherwise it raises,
naming what was wrong (never the value)."""

from __future__ import annotations

import hashlib
import os

from service.core.trial.sandbox import Task, Tools
from tests.adversarial.agents.reference import typed_repair

# The manifest declares EXPECTED_SHA (the first 16 hex digits of the secret's SHA-256) and MODE.
ALLOWED = frozenset({"ASSAYGATE_LISTEN_PORT"})  # the sandbox's own: where the host listens


def agent(task: Task, tools: Tools) -> None:
    value = os.environ.get("OPENAI_API_KEY", "")
    if hashlib.sha256(value.encode()).hexdigest()[:16] != os.environ.get("EXPECTED_SHA", "?"):
        raise RuntimeError("OPENAI_API_KEY is missing or not the stored secret")
    if os.environ.get("MODE") != "test":
        raise RuntimeError("the declared variable MODE is missing")
    leaked = sorted(k for k in os.environ if k.startswith("ASSAYGATE_") and k not in ALLOWED)
    if leaked:
        raise RuntimeError(f"the worker's environment leaked: {leaked}")
    typed_repair(task, tools)
