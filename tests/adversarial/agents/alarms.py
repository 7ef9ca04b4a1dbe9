"""A python target that raises an "anomaly" receipt at the start of every run, then works quietly.

An unconditional alarm used to make detection 100 %: it must count as a false alarm in the no-fault
baseline, and never as detection of a fault injected after it.
"""

from __future__ import annotations

from service.core.trial.sandbox import Task, Tools
from tests.adversarial.agents import careful


def anomaly_spam(task: Task, tools: Tools) -> None:
    tools.record("anomaly", careful.action_id_of(task), None, None, "something may be wrong")
    careful.run(task, tools)
