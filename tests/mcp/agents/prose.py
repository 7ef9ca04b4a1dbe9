"""An agent whose final answer is prose, as a model's often is: the python host reports why."""

from __future__ import annotations

from typing import Any


def run(task: dict[str, Any], mcp_url: str) -> dict[str, Any]:
    raise ValueError("the final output is not a claim object: 'I shipped the order.'")
