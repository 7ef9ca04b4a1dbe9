"""Python targets that fail in one way each: they raise, they die, they chatter on stdout."""

from __future__ import annotations

import os

from service.core.trial.sandbox import Task, Tools

print("importing the chatty agent: this line must not be taken for the host's report")


def raises(task: Task, tools: Tools) -> None:
    tools.orders_read(task.order_id)
    raise ValueError("no refunds on a Tuesday")


def dies(task: Task, tools: Tools) -> None:
    tools.orders_read(task.order_id)
    os._exit(3)


def chatty(task: Task, tools: Tools) -> None:
    print(f"working on {task.order_id}", flush=True)
    tools.record("denial", f"{task.order_id}:refund:{task.run_id}", None, None, "chatty")
    tools.respond("denied", f"{task.order_id}:refund:{task.run_id}", None)


def snoops(task: Task, tools: Tools) -> None:
    """Saves which of the assay process's settings it can read from its environment."""
    leaked = sorted(k for k in os.environ if k.startswith("ASSAYGATE_"))
    tools.checkpoint_save(task.run_id, "snoop", {"leaked": leaked})
    tools.respond("denied", f"{task.order_id}:refund:{task.run_id}", None)
