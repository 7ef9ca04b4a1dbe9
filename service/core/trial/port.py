"""The port the compiled reference workflow calls its tools through.

Compiled, a call through a protocol (`ToolPort`) is a generic Python method call: the method is
looked up by name and its arguments are boxed and parsed, about fifteen times a run (a tenth of a
compiled trial). `NativePort` is a native class with the same methods, so a call through it is
direct. The sandbox's `Tools` is one; any other `ToolPort` (a `python` target's stand-in, which
crosses the HTTP target protocol) is handed to the workflow behind `ForwardingPort`, which calls
it by name as before. The methods are the public protocol's, `assaygate.target.Tools`
(tests/core/trial/test_port.py holds the three lists to one).
"""

from __future__ import annotations

from typing import Any

from assaygate.target import Tools as ToolPort


class NativePort:
    """The tool methods a target may call, as a native class (the sandbox's `Tools` is one)."""

    __slots__ = ()

    def now(self) -> int:
        raise NotImplementedError

    def sleep(self, ms: int) -> None:
        raise NotImplementedError

    def new_trace(self) -> str:
        raise NotImplementedError

    def request_id(self) -> str:
        raise NotImplementedError

    def crm_read(self, order_id: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def orders_read(self, order_id: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def policy_read(self) -> dict[str, Any]:
        raise NotImplementedError

    def capability_check(self, grant_id: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def propose(self, order_id: str, tenant: str, grant_id: str, amount: int) -> dict[str, Any]:
        raise NotImplementedError

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
        raise NotImplementedError

    def lookup(self, action_id: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    def record(
        self,
        kind: str,
        action_id: str,
        trace_id: str | None,
        ledger_ref: str | None,
        detail: str = "",
    ) -> None:
        raise NotImplementedError

    def evidence_read(self, action_id: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    def checkpoint_save(self, run_id: str, stage: str, data: dict[str, Any]) -> None:
        raise NotImplementedError

    def checkpoint_load(self, run_id: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def respond(self, status: str, action_id: str | None, ledger_ref: str | None) -> None:
        raise NotImplementedError


class ForwardingPort(NativePort):
    """Any other `ToolPort`, behind the native methods: each call goes on to it unchanged."""

    __slots__ = ("port",)

    def __init__(self, port: ToolPort) -> None:
        self.port = port

    def now(self) -> int:
        return self.port.now()

    def sleep(self, ms: int) -> None:
        self.port.sleep(ms)

    def new_trace(self) -> str:
        return self.port.new_trace()

    def request_id(self) -> str:
        return self.port.request_id()

    def crm_read(self, order_id: str) -> dict[str, Any] | None:
        return self.port.crm_read(order_id)

    def orders_read(self, order_id: str) -> dict[str, Any] | None:
        return self.port.orders_read(order_id)

    def policy_read(self) -> dict[str, Any]:
        return self.port.policy_read()

    def capability_check(self, grant_id: str) -> dict[str, Any] | None:
        return self.port.capability_check(grant_id)

    def propose(self, order_id: str, tenant: str, grant_id: str, amount: int) -> dict[str, Any]:
        return self.port.propose(order_id, tenant, grant_id, amount)

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
        port = self.port
        key, version = idempotency_key, expected_version
        return port.refund(subject, tenant, amount, key, action_id, trace_id, grant_id, version)

    def lookup(self, action_id: str) -> list[dict[str, Any]]:
        return self.port.lookup(action_id)

    def record(
        self,
        kind: str,
        action_id: str,
        trace_id: str | None,
        ledger_ref: str | None,
        detail: str = "",
    ) -> None:
        self.port.record(kind, action_id, trace_id, ledger_ref, detail)

    def evidence_read(self, action_id: str) -> list[dict[str, Any]]:
        return self.port.evidence_read(action_id)

    def checkpoint_save(self, run_id: str, stage: str, data: dict[str, Any]) -> None:
        self.port.checkpoint_save(run_id, stage, data)

    def checkpoint_load(self, run_id: str) -> dict[str, Any] | None:
        return self.port.checkpoint_load(run_id)

    def respond(self, status: str, action_id: str | None, ledger_ref: str | None) -> None:
        self.port.respond(status, action_id, ledger_ref)
