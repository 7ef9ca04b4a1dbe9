"""The target interface: what a system under test is handed, and what it is.

The harness calls a target as `Target(task, tools)` with the sandbox's `Tools`; the adapters for
`python` and `http` targets are such callables. What a system under test may use is `ToolPort`:
it reads, acts, records evidence and releases its claim only through these methods. A `python`
target's child process gets a stand-in with the same methods that crosses the HTTP target
protocol. The reference workflow is written against `ToolPort`, not `Tools`, so it runs unchanged
(compiled or not) on either side.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from service.core.trial.sandbox import Task, Tools


class ToolPort(Protocol):
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
    def sleep(self, ms: int) -> None: ...
    def now(self) -> int: ...
    def new_trace(self) -> str: ...
    def request_id(self) -> str: ...


Target = Callable[[Task, Tools], None]
