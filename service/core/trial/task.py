"""What a target is handed besides the tools: its task, the typed tool errors it can observe, and
the record of one boundary crossing that the disturbance handlers change.

Split from `sandbox.py`, which re-exports these names; compiled with it (a hot module).
"""

from __future__ import annotations

from typing import Any

from service.core.faults.catalogue import FaultSpec


class ToolError(Exception):
    """A tool call failed in a way the target can observe."""


class ToolTimeout(ToolError):
    pass


class ToolMalformed(ToolError):
    pass


class ToolRejected(ToolError):
    pass


class RateLimited(ToolError):
    pass


class PreconditionFailed(ToolError):
    pass


class RunCrashed(BaseException):
    """The run's process died; the harness restarts the target from its checkpoint.

    A BaseException so that a target's `except Exception` cannot swallow its own crash.
    """


class Task:
    __slots__ = (
        "actor",
        "amount",
        "customer",
        "disabled_controls",
        "grant_id",
        "order_id",
        "purpose",
        "run_id",
        "tenant",
    )

    def __init__(
        self,
        run_id: str,
        order_id: str,
        tenant: str,
        customer: str,
        amount: int,
        grant_id: str,
        actor: str,
        disabled_controls: frozenset[str],
    ) -> None:
        self.run_id = run_id
        self.order_id = order_id
        self.tenant = tenant
        self.customer = customer
        self.amount = amount
        self.grant_id = grant_id
        self.actor = actor
        self.purpose = "customer_refund"
        # Declared controls this run must switch off (a counterfactual containment pair).
        self.disabled_controls = disabled_controls

    def view(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "order_id": self.order_id,
            "tenant": self.tenant,
            "customer": self.customer,
            "amount": self.amount,
            "grant_id": self.grant_id,
            "actor": self.actor,
            "purpose": self.purpose,
            "disabled_controls": sorted(self.disabled_controls),
        }


Trace = list[dict[str, Any]]


class Call:
    """One boundary crossing, as the disturbance handlers see and change it."""

    __slots__ = ("after", "args", "reply")

    def __init__(self, args: dict[str, Any]) -> None:
        self.args = args
        # A reply the disturbance substitutes for the world's answer (read boundaries).
        self.reply: Any = None
        # A disturbance that applies after the effect commits (lost, cut off or partial replies).
        self.after: FaultSpec | None = None
