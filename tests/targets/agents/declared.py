"""An agent whose care depends on its environment: careful only when it sees the declared
`REFUND_MODE=careful` and its `REFUND_TOKEN` secret; otherwise it claims refunds it never made.
What it sees is what the manifest declares, locally as on a worker."""

from __future__ import annotations

import os

from service.core.trial.sandbox import Task, Tools
from tests.adversarial.agents import careful, liars


def run(task: Task, tools: Tools) -> None:
    if os.environ.get("REFUND_MODE") == "careful" and os.environ.get("REFUND_TOKEN") == "s3cret":
        careful.run(task, tools)
    else:
        liars.always_completed(task, tools)
