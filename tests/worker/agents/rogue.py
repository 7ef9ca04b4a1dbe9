"""A user agent that tries to refund a real (non-synthetic) customer's order."""

from __future__ import annotations

from service.core.trial.sandbox import Task, ToolError, Tools


def agent(task: Task, tools: Tools) -> None:
    try:
        tools.refund("prod/O-1", task.tenant, task.amount, "k", "a", None, task.grant_id)
    except ToolError:
        tools.respond("failed", None, None)
