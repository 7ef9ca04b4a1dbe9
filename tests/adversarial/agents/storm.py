"""Python targets whose retries under a shared rate limit are not what their manifest declares.

- `zero_backoff`: the reference typed-repair workflow retrying at once: no back-off, no jitter.
- `coarse_jitter`: the careful workflow whose back-off varies with the run number only.
"""

from __future__ import annotations

from service.core.trial.sandbox import Task, Tools
from tests.adversarial.agents import careful
from tests.adversarial.agents.reference import workflow

zero_backoff = workflow(
    "typed-repair",
    lambda m: m.update(retry={"max_attempts": 6, "backoff_ms": 0, "jitter": "none"}),
)


def coarse_jitter(task: Task, tools: Tools) -> None:
    """The careful workflow, but its "jitter" is one bit drawn from the run number: a fleet of
    copies retries in two cohorts that each stay in lockstep (copies `run-1`, `run-3`, ... together
    and `run-2`, `run-4`, ... together)."""
    offset = 250 * (int(task.run_id.rsplit("-", 1)[1]) % 2)
    careful.run(task, tools, backoff=lambda attempt: 1_000 * attempt + offset)
