"""The interface a `python` target is written against: `run(task: Task, tools: Tools) -> None`.

Import from here (`from assaygate.target import Task, Tools, ToolTimeout`): these names are the
stable interface (docs/targets.md). The sandbox's tool calls raise exactly these error classes,
whichever process serves them, so `except ToolTimeout` means the same in every target.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = [
    "CLAIM_STATUSES",
    "COMPLETED",
    "DENIED",
    "FAILED",
    "HELD",
    "PreconditionFailed",
    "RateLimited",
    "ReplyMisread",
    "RunCrashed",
    "Task",
    "ToolClients",
    "ToolError",
    "ToolMalformed",
    "ToolRejected",
    "ToolTimeout",
    "Tools",
]


class ToolError(Exception):
    """A tool call failed in a way the target can observe."""


class ToolTimeout(ToolError):
    """No reply in time: the call may or may not have taken effect."""


class ToolMalformed(ToolError):
    """A reply that could not be read: the call may or may not have taken effect."""


class ToolRejected(ToolError):
    """The tool refused the request; nothing was done."""


class RateLimited(ToolError):
    """Too many calls; nothing was done. Wait and try again."""


class PreconditionFailed(ToolError):
    """The `expected_version` no longer holds; nothing was done."""


class ReplyMisread(LookupError):
    """A tool's reply was read for a key (or in a form) it never has: a bug in the target, never
    a fault of the sandbox. The message names the key, the reply's documented shape and, where
    the key is the HTTP reply's wrapper (`{"policy": ...}`), that the method returns what it
    wraps. A python target's task fails with it even if the target catches it
    (docs/targets.md, "What each tool returns")."""


class RunCrashed(BaseException):
    """The run's process died; the harness restarts the target from its checkpoint.

    A BaseException so that a target's `except Exception` cannot swallow its own crash.
    """


# What `respond` releases: the claim's status.
COMPLETED = "completed"
DENIED = "denied"
HELD = "held"
FAILED = "failed"
CLAIM_STATUSES = frozenset({COMPLETED, DENIED, HELD, FAILED})


class Task:
    """One trial's refund request."""

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
        self.amount = amount  # pence
        self.grant_id = grant_id
        self.actor = actor
        self.purpose = "customer_refund"
        # Declared controls this run must switch off (a counterfactual containment pair).
        self.disabled_controls = disabled_controls

    @property
    def action_id(self) -> str:
        """The logical action id of the task's refund, `order_id:refund:run_id`: the same across
        retries, restarts and forks of the run, and what `/v1/payments/lookup` reads the ledger
        by. The http protocol sends it as the task request's `action_id` and
        `Assaygate-Action-Id`."""
        return f"{self.order_id}:refund:{self.run_id}"

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


class Tools(Protocol):
    """The tools a target is handed; every call crosses the injector and may raise a `ToolError`."""

    def now(self) -> int: ...
    def sleep(self, ms: int) -> None: ...
    def new_trace(self) -> str: ...
    def request_id(self) -> str: ...
    def crm_read(self, order_id: str) -> dict[str, Any] | None: ...
    def orders_read(self, order_id: str) -> dict[str, Any] | None: ...
    def policy_read(self) -> dict[str, Any]: ...
    def capability_check(self, grant_id: str) -> dict[str, Any] | None: ...
    def propose(self, order_id: str, tenant: str, grant_id: str, amount: int) -> dict[str, Any]: ...
    def refund(
        self,
        subject: str,
        tenant: str,
        amount: int,
        idempotency_key: str,
        action_id: str,
        trace_id: str | None,
        grant_id: str,
        expected_version: int | None = None,
    ) -> dict[str, Any]: ...
    def lookup(self, action_id: str) -> list[dict[str, Any]]: ...
    def record(
        self,
        kind: str,
        action_id: str,
        trace_id: str | None,
        ledger_ref: str | None,
        detail: str = "",
    ) -> None: ...
    def evidence_read(self, action_id: str) -> list[dict[str, Any]]: ...
    def checkpoint_save(self, run_id: str, stage: str, data: dict[str, Any]) -> None: ...
    def checkpoint_load(self, run_id: str) -> dict[str, Any] | None: ...
    def respond(self, status: str, action_id: str | None, ledger_ref: str | None) -> None: ...


# -- the claim helpers: namespaced clients that add no behaviour -----------------------------------
# Each method is the call it names, so the injector sees exactly what it would see from a target
# that calls `Tools` directly.


class Orders:
    __slots__ = ("_t",)

    def __init__(self, tools: Tools) -> None:
        self._t = tools

    def read(self, order_id: str) -> dict[str, Any] | None:
        return self._t.orders_read(order_id)

    def read_cached(self, order_id: str) -> dict[str, Any] | None:
        """The CRM's cached eligibility record: fast, not authoritative."""
        return self._t.crm_read(order_id)


class Policy:
    __slots__ = ("_t",)

    def __init__(self, tools: Tools) -> None:
        self._t = tools

    def read(self) -> dict[str, Any]:
        return self._t.policy_read()


class Capabilities:
    __slots__ = ("_t",)

    def __init__(self, tools: Tools) -> None:
        self._t = tools

    def check(self, grant_id: str) -> dict[str, Any] | None:
        return self._t.capability_check(grant_id)


class Payments:
    __slots__ = ("_t",)

    def __init__(self, tools: Tools) -> None:
        self._t = tools

    def refund(
        self,
        subject: str,
        tenant: str,
        amount: int,
        idempotency_key: str,
        action_id: str,
        trace_id: str | None,
        grant_id: str,
        expected_version: int | None = None,
    ) -> dict[str, Any]:
        return self._t.refund(
            subject,
            tenant,
            amount,
            idempotency_key,
            action_id,
            trace_id,
            grant_id,
            expected_version,
        )

    def lookup(self, action_id: str) -> list[dict[str, Any]]:
        return self._t.lookup(action_id)


class Evidence:
    __slots__ = ("_t",)

    def __init__(self, tools: Tools) -> None:
        self._t = tools

    def record(
        self,
        kind: str,
        action_id: str,
        trace_id: str | None,
        ledger_ref: str | None,
        detail: str = "",
    ) -> None:
        self._t.record(kind, action_id, trace_id, ledger_ref, detail)

    def read(self, action_id: str) -> list[dict[str, Any]]:
        return self._t.evidence_read(action_id)


class ToolClients:
    """`orders`, `policy`, `capabilities`, `payments`, `evidence`, plus the run's own calls."""

    __slots__ = ("capabilities", "evidence", "orders", "payments", "policy", "tools")

    def __init__(self, tools: Tools) -> None:
        self.tools = tools
        self.orders = Orders(tools)
        self.policy = Policy(tools)
        self.capabilities = Capabilities(tools)
        self.payments = Payments(tools)
        self.evidence = Evidence(tools)

    def propose(self, order_id: str, tenant: str, grant_id: str, amount: int) -> dict[str, Any]:
        return self.tools.propose(order_id, tenant, grant_id, amount)

    def respond(self, status: str, action_id: str | None, ledger_ref: str | None) -> None:
        """Release the run's one claim (`COMPLETED`, `DENIED`, `HELD` or `FAILED`)."""
        self.tools.respond(status, action_id, ledger_ref)
