"""Namespaced tool clients over the core `Tools`, for targets that prefer `payments.refund(...)`.

They add no behaviour: each method is the core call it names, so the injector sees exactly what it
would see from a target that calls `Tools` directly.
"""

from __future__ import annotations

from typing import Any

from service.core.trial.sandbox import Tools


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
        self.tools.respond(status, action_id, ledger_ref)
