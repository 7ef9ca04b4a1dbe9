"""Tool clients handed to the system under test, each call crossing the injector.

This is the target interface: a target is `Callable[[Task, Tools], None]`. It reads through the
clients, acts through them, records evidence through them and releases its final claim with
`respond`. The built-in Copperfin workflow uses nothing else, so a user's callable can do all it
does. Tool errors are typed, so a target can tell a timeout from a rejection from a malformed reply.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from service.core.catalogue import Disturbance, FaultSpec
from service.core.injector import Injector
from service.core.manifest import RetryPolicy
from service.core.rng import Stream
from service.core.storm import simulate
from service.core.world import FRAUD_HOLD, Claim, Receipt, World


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


class _Storm:
    __slots__ = ("accept_attempt", "accept_ms", "attempts", "peak_retries")

    def __init__(self, accept_attempt: int | None, accept_ms: int | None, peak: int) -> None:
        self.accept_attempt = accept_attempt
        self.accept_ms = accept_ms
        self.attempts = 0
        self.peak_retries = peak


TIMEOUT_MS = 2_000
# Enum members read once: attribute access on an Enum class is slow on the hot path.
_TIMEOUT = Disturbance.TIMEOUT.value
_MALFORMED = Disturbance.MALFORMED_REPLY.value
_PARTIAL = Disturbance.PARTIAL_REPLY.value


class Tools:
    __slots__ = (
        "_calls",
        "_fork",
        "_rollback",
        "_storm",
        "armed",
        "decoy",
        "inj",
        "latency",
        "retry",
        "start",
        "storm_stream",
        "trace",
        "world",
    )

    def __init__(
        self,
        world: World,
        inj: Injector,
        latency: int,
        decoy: str,
        retry: RetryPolicy,
        storm_stream: Stream,
        trace: Trace | None = None,
    ) -> None:
        self.world = world
        self.inj = inj
        # The injector's live boundary map: one dict lookup per call decides whether to ask it.
        self.armed = inj.armed
        self.latency = latency
        self.decoy = decoy
        self.retry = retry
        self.storm_stream = storm_stream
        self.trace = trace
        self._calls = 0
        self._rollback = False
        self._fork: Callable[[], None] | None = None
        self._storm: _Storm | None = None
        self.start = world.now

    def _log(self, call: str, args: dict[str, Any], result: Any) -> None:
        if self.trace is not None:
            self.trace.append({"at": self.world.now, "call": call, "args": args, "result": result})

    def _take(self, boundary: str, kind: str | None = None) -> FaultSpec | None:
        self._calls += 1
        spec = self.inj.take(boundary, f"{boundary}#{self._calls}", self.world.now, kind)
        if spec is not None and self.trace is not None:
            self.trace.append(
                {
                    "at": self.world.now,
                    "injection": spec.id,
                    "boundary": boundary,
                    "phase": spec.phase,
                }
            )
        return spec

    # -- clock --------------------------------------------------------------------------------
    def now(self) -> int:
        return self.world.now

    def sleep(self, ms: int) -> None:
        self.world.now += ms

    def new_trace(self) -> str:
        return self.world.next_id("tr")

    def request_id(self) -> str:
        return self.world.next_id("req")

    # -- context sources ----------------------------------------------------------------------
    def crm_read(self, order_id: str) -> dict[str, Any] | None:
        """The cached eligibility assertion (fast, not authoritative)."""
        w = self.world
        spec = self._take("crm.read") if "crm.read" in self.armed else None
        if spec is not None:
            order = w.orders.get(order_id)
            if order is not None and spec.disturbance is Disturbance.CONFLICT_SOURCE:
                w.crm[order_id] = w.crm_record(order_id) or {}
                order.status = FRAUD_HOLD
                order.version += 1
            elif order is not None and spec.disturbance is Disturbance.DRIFT_SCHEMA:
                drifted = w.crm_record(order_id) or {}
                drifted["amount"] = drifted.get("amount", 0) * 100
                drifted["unit"] = "1/100 pence"
                drifted["schema"] = 2
                if self.trace is not None:
                    self._log("crm.read", {"order_id": order_id}, drifted)
                return drifted
        record = w.crm_record(order_id)
        if self.trace is not None:
            self._log("crm.read", {"order_id": order_id}, record)
        return record

    def orders_read(self, order_id: str) -> dict[str, Any] | None:
        """The authoritative order system."""
        if "orders.read" in self.armed:
            self._take("orders.read")
        order = self.world.orders.get(order_id)
        view = order.view() if order else None
        if view is not None:
            view["unit"] = "pence"
        if self.trace is not None:
            self._log("orders.read", {"order_id": order_id}, view)
        return view

    def policy_read(self) -> dict[str, Any]:
        if "policy.read" in self.armed:
            self._take("policy.read")
        w = self.world
        view = {"version": w.policy_version, "refunds_allowed": w.policy_allows()}
        if self.trace is not None:
            self._log("policy.read", {}, view)
        return view

    def capability_check(self, grant_id: str) -> dict[str, Any] | None:
        if "capabilities.check" in self.armed:
            self._take("capabilities.check")
        grant = self.world.grants.get(grant_id)
        view = grant.view(self.world.now) if grant else None
        if self.trace is not None:
            self._log("capabilities.check", {"grant_id": grant_id}, view)
        return view

    def propose(self, order_id: str, tenant: str, grant_id: str, amount: int) -> dict[str, Any]:
        """The model's proposal: the action it would take. Assaygate tests the loop around it."""
        w = self.world
        action = {"subject": order_id, "tenant": tenant, "grant_id": grant_id, "amount": amount}
        spec = self._take("proposal") if "proposal" in self.armed else None
        if spec is not None:
            d = spec.disturbance
            grant = w.grants.get(grant_id)
            if d is Disturbance.SWAP_SUBJECT:
                decoy = w.orders[self.decoy]
                action = {
                    "subject": decoy.id,
                    "tenant": decoy.tenant,
                    "grant_id": "G-" + decoy.id,
                    "amount": amount,
                }
            elif d is Disturbance.REVOKE_GRANT and grant is not None:
                grant.revoked_at = w.now
            elif d is Disturbance.EXPIRE_GRANT and grant is not None:
                grant.expires_at = w.now
            elif d is Disturbance.ADVANCE_POLICY:
                w.policy_version += 1
                w.policies[w.policy_version] = False
        if self.trace is not None:
            self._log("proposal", {"order_id": order_id, "amount": amount}, action)
        return action

    # -- payments -----------------------------------------------------------------------------
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
        w = self.world
        args = {
            "subject": subject,
            "amount": amount,
            "idempotency_key": idempotency_key,
            "action_id": action_id,
            "trace_id": trace_id,
            "expected_version": expected_version,
        }
        if not subject.startswith(w.subject_namespace):
            w.refusals.append(f"effect on {subject} refused: outside {w.subject_namespace}")
            if self.trace is not None:
                self._log("payments.refund", args, "refused: outside the synthetic namespace")
            raise ToolRejected("subject outside the synthetic namespace")
        spec = self._take("payments.refund") if "payments.refund" in self.armed else None
        if self._storm is not None:
            self._storm_gate(args)
        phase = ""
        if spec is not None:
            d = spec.disturbance
            if d is Disturbance.FORK_RUN and self._fork is not None:
                self._fork()
            elif d is Disturbance.ADVANCE_VERSION:
                order = w.orders.get(subject)
                if order is not None:
                    order.refunded = order.amount
                    order.version += 1
            elif d is Disturbance.STRIP_TRACE:
                trace_id = None
            elif d is Disturbance.RATE_LIMIT_STORM:
                self._start_storm(spec)
                self._storm_gate(args)
            elif d is Disturbance.TIMEOUT and spec.phase == "before_send":
                w.now += TIMEOUT_MS
                if self.trace is not None:
                    self._log("payments.refund", args, "timeout")
                raise ToolTimeout("refund timed out")
            elif d is Disturbance.TIMEOUT and spec.phase == "before_commit":
                w.now += self.latency
                w.provider_log.append((idempotency_key, "rejected_before_write", w.now))
                w.now += TIMEOUT_MS
                if self.trace is not None:
                    self._log("payments.refund", args, "timeout")
                raise ToolTimeout("refund timed out")
            else:
                phase = d.value
        w.now += self.latency
        # Like real payment APIs, a known idempotency key replays its result before any check.
        if expected_version is not None and w.replay(idempotency_key) is None:
            order = w.orders.get(subject)
            if order is None or order.version != expected_version:
                w.provider_log.append((idempotency_key, "precondition_failed", w.now))
                if self.trace is not None:
                    self._log("payments.refund", args, "precondition_failed")
                raise PreconditionFailed("order version changed")
        entry, replayed = w.commit_refund(
            subject, tenant, amount, idempotency_key, action_id, trace_id, grant_id
        )
        w.provider_log.append((idempotency_key, "replayed" if replayed else "committed", w.now))
        if phase == _TIMEOUT:
            w.now += TIMEOUT_MS
            if self.trace is not None:
                self._log("payments.refund", args, "timeout")
            raise ToolTimeout("refund timed out")
        if phase == _MALFORMED:
            if self.trace is not None:
                self._log("payments.refund", args, "malformed reply")
            raise ToolMalformed("refund reply could not be parsed")
        reply: dict[str, Any] = {
            "status": "committed",
            "ledger_ref": entry.id,
            "trace_id": entry.trace_id,
            "replayed": replayed,
        }
        if phase == _PARTIAL:
            reply = {"status": "ok"}
        if self.trace is not None:
            self._log("payments.refund", args, reply)
        return reply

    def _start_storm(self, spec: FaultSpec) -> None:
        p = spec.params
        result = simulate(
            self.retry,
            self.storm_stream,
            int(p["agents"]),
            int(p["capacity_per_tick"]),
            int(p["tick_ms"]),
            int(p["overload_factor"]),
            int(p["max_backoff_ms"]),
        )
        self._storm = _Storm(result.accept_attempt, result.accept_ms, result.peak_retries)

    def _storm_gate(self, args: dict[str, Any]) -> None:
        storm = self._storm
        assert storm is not None
        storm.attempts += 1
        if storm.accept_attempt is None or storm.attempts < storm.accept_attempt:
            self.world.now += self.latency
            if self.trace is not None:
                self._log("payments.refund", args, "429 rate limited")
            raise RateLimited("shared rate limit exceeded")
        if storm.accept_ms is not None:
            # The fleet simulation decides when this agent's request gets through.
            self.world.now = max(self.world.now, self.start + storm.accept_ms)

    def lookup(self, action_id: str) -> list[dict[str, Any]]:
        """Read the provider's ledger by logical action id (independent readback)."""
        if "payments.lookup" in self.armed:
            self._take("payments.lookup")
        self.world.now += self.latency
        found = [e.view() for e in self.world.entries_for(action_id)]
        if self.trace is not None:
            self._log("payments.lookup", {"action_id": action_id}, found)
        return found

    # -- evidence, checkpoints, claims ---------------------------------------------------------
    def record(
        self,
        kind: str,
        action_id: str,
        trace_id: str | None,
        ledger_ref: str | None,
        detail: str = "",
    ) -> None:
        spec = self._take("evidence.record", kind) if "evidence.record" in self.armed else None
        if spec is not None and spec.disturbance is Disturbance.DROP_WRITE:
            if self.trace is not None:
                self._log("evidence.record", {"kind": kind, "action_id": action_id}, "dropped")
            return
        self.world.evidence.append(
            Receipt(kind, action_id, trace_id, ledger_ref, self.world.now, detail)
        )
        if self.trace is not None:
            self._log(
                "evidence.record",
                {"kind": kind, "action_id": action_id, "ledger_ref": ledger_ref, "detail": detail},
                "ok",
            )

    def evidence_read(self, action_id: str) -> list[dict[str, Any]]:
        return [r.view() for r in self.world.evidence if r.action_id == action_id]

    def checkpoint_save(self, run_id: str, stage: str, data: dict[str, Any]) -> None:
        saved = self.world.checkpoints.setdefault(run_id, [])
        saved.append({"stage": stage, **data})
        if self.trace is not None:
            self._log("checkpoints.save", {"run_id": run_id, "stage": stage}, "ok")
        if stage == "effect_done":
            spec = self._take("checkpoints.save") if "checkpoints.save" in self.armed else None
            if spec is not None and spec.disturbance is Disturbance.CRASH_AND_ROLLBACK:
                self._rollback = True
                raise RunCrashed("the run crashed after its effect")

    def checkpoint_load(self, run_id: str) -> dict[str, Any] | None:
        if "checkpoints.load" in self.armed:
            self._take("checkpoints.load")
        saved = self.world.checkpoints.get(run_id)
        if not saved:
            return None
        cp = saved[-1]
        if self._rollback:
            # The restored checkpoint predates the effect: the world moved, the checkpoint did not.
            self._rollback = False
            cp = saved[-2] if len(saved) > 1 else saved[0]
        if self.trace is not None:
            self._log("checkpoints.load", {"run_id": run_id}, cp.get("stage"))
        return dict(cp)

    def respond(self, status: str, action_id: str | None, ledger_ref: str | None) -> None:
        self.world.claims.append(Claim(status, action_id, ledger_ref, self.world.now))
        if self.trace is not None:
            self._log("respond", {"status": status, "ledger_ref": ledger_ref}, "released")
