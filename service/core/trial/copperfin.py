"""Copperfin Returns: the built-in refund workflow, executed, its behaviour set by the manifest.

It is written against the same target interface a user implements (`Task`, `ToolPort`): it reads,
proposes, checks authority, acts, records evidence and releases a claim only through the tool
clients. Each declared control changes what it does, never what it is graded on. It holds its
tools as a `NativePort` (port.py), the same methods the compiled core calls directly.
"""

from __future__ import annotations

from typing import Any, Final

from service.core.system.control import Control
from service.core.system.manifest import Manifest, RetryPolicy
from service.core.trial.port import ForwardingPort, NativePort
from service.core.trial.rng import Stream, stream_key
from service.core.trial.sandbox import (
    PreconditionFailed,
    RateLimited,
    Task,
    ToolError,
    ToolRejected,
)
from service.core.trial.target import Target, ToolPort
from service.core.trial.world import ELIGIBLE

BIND: Final = Control.BIND_IDENTITY.value
AUTHORITY: Final = Control.PRE_EFFECT_AUTHORITY.value
REFRESH: Final = Control.REFRESH_CONTEXT.value
PRECONDITION: Final = Control.STATE_PRECONDITION.value
IDEMPOTENCY: Final = Control.IDEMPOTENCY.value
READBACK: Final = Control.EFFECT_READBACK.value
GATE: Final = Control.EVIDENCE_GATE.value
REPAIR: Final = Control.EVIDENCE_REPAIR.value


class _Run:
    """One execution of the workflow for one task.

    A denial, a hold or a failure ends the run: the method that releases it returns True (or, for
    the ones that return a reply, None), and every caller returns at once. No exception unwinds
    the run: compiled, each native frame an exception crosses builds a traceback frame, and most
    runs under a fault end in a denial (raising cost about a tenth of a compiled trial)."""

    __slots__ = (
        "action",
        "action_id",
        "c",
        "deny_on_warning",
        "grant_id",
        "jitter",
        "order_id",
        "retry",
        "run_id",
        "stopped",
        "t",
        "tenant",
        "trace_id",
        "version",
    )

    def __init__(
        self,
        task: Task,
        tools: NativePort,
        controls: frozenset[str],
        retry: RetryPolicy,
        deny_on_warning: bool,
    ) -> None:
        # The task's fields, read once: it is the public package's (interpreted) class, so each
        # read of it is a generic attribute lookup, where these are native.
        self.order_id = task.order_id
        self.run_id = task.run_id
        self.tenant = task.tenant
        self.grant_id = task.grant_id
        self.t = tools
        # Only a counterfactual pair disables controls: no new set for every other run.
        disabled = task.disabled_controls
        self.c = controls - disabled if disabled else controls
        self.retry = retry
        self.deny_on_warning = deny_on_warning
        self.action: dict[str, Any] = {}
        self.action_id = task.action_id
        self.trace_id: str | None = None
        self.version: int | None = None
        self.jitter: Stream | None = None
        # A claim other than `completed` was released: the run is over.
        self.stopped = False

    # -- outcomes (each True: the run ends) ---------------------------------------------------
    def deny(self, reason: str) -> bool:
        self.t.record("denial", self.action_id, self.trace_id, None, reason)
        self.t.respond("denied", self.action_id, None)
        self.stopped = True
        return True

    def hold(self, reason: str) -> bool:
        self.t.record("hold", self.action_id, self.trace_id, None, reason)
        self.t.respond("held", self.action_id, None)
        self.stopped = True
        return True

    def warn(self, signal: str) -> bool:
        """Record the anomaly; True when the manifest denies on any warning."""
        self.t.record("anomaly", self.action_id, self.trace_id, None, signal)
        if self.deny_on_warning:
            return self.deny(f"refused after warning: {signal}")
        return False

    # -- the workflow -------------------------------------------------------------------------
    def run(self) -> None:
        cp = self.t.checkpoint_load(self.run_id)
        reply = None
        if cp is None:
            if self.assemble_and_authorise():
                return
        else:
            self.action = cp["action"]
            self.trace_id = cp["trace_id"]
            self.version = cp["version"]
            # A resumed run cannot know whether its effect already happened: read it back.
            if READBACK in self.c:
                reply = self.find_prior_effect()
                if self.stopped:
                    return
        if reply is None:
            reply = self.effect()
            if reply is None:
                return
        self.t.checkpoint_save(self.run_id, "effect_done", {"ledger_ref": reply.get("ledger_ref")})
        self.release(reply)

    def assemble_and_authorise(self) -> bool:
        """Read, propose and authorise; True when the run ended here."""
        t, c = self.t, self.c
        record = t.crm_read(self.order_id)
        if record is None:
            return self.deny("order not found")
        status, version, amount = record["status"], record["version"], record["amount"]
        policy = t.policy_read()
        if REFRESH in c:
            auth = t.orders_read(self.order_id)
            if auth is None:
                return self.deny("order not found in the authoritative source")
            differ = (auth["status"], auth["version"], auth["amount"]) != (status, version, amount)
            if differ and self.warn(
                "eligibility sources conflict; the order system takes precedence"
            ):
                return True
            status, version, amount = auth["status"], auth["version"], auth["amount"]
        if status != ELIGIBLE:
            return self.deny(f"order is {status}")
        if not policy["refunds_allowed"]:
            return self.deny(f"policy v{policy['version']} excludes refunds")
        approval = t.capability_check(self.grant_id)
        if approval is None or not approval["valid"]:
            return self.deny("no valid capability at approval")
        self.version = version
        action = t.propose(self.order_id, self.tenant, self.grant_id, amount)
        self.action = action
        self.trace_id = t.new_trace()
        t.record(
            "decision",
            self.action_id,
            self.trace_id,
            None,
            f"refund {action['amount']} on {action['subject']}",
        )
        if BIND in c and (action["subject"], action["tenant"], action["grant_id"]) != (
            self.order_id,
            self.tenant,
            self.grant_id,
        ):
            if self.warn("proposal does not match the bound action contract"):
                return True
            return self.deny("subject binding mismatch")
        if AUTHORITY in c:
            grant = t.capability_check(action["grant_id"])
            if grant is None or not grant["valid"]:
                return self.deny("capability not valid at effect time")
            if grant["subject"] != action["subject"] or grant["amount"] < action["amount"]:
                return self.deny("capability does not cover this subject and amount")
        if REFRESH in c:
            current = t.policy_read()
            if not current["refunds_allowed"]:
                return self.deny(f"policy v{current['version']} excludes refunds")
        t.checkpoint_save(
            self.run_id,
            "authorised",
            {"action": action, "trace_id": self.trace_id, "version": self.version},
        )
        return False

    def find_prior_effect(self) -> dict[str, Any] | None:
        """The committed effect of this action, if the ledger has one (None also when the
        warning about it ended the run: `stopped`)."""
        found = self.t.lookup(self.action_id)
        if not found:
            return None
        if self.warn("an effect for this action already exists"):
            return None
        e = found[0]
        return {"status": "committed", "ledger_ref": e["id"], "trace_id": e["trace_id"]}

    def effect(self) -> dict[str, Any] | None:
        """The refund's reply, or None when the run ended here."""
        t, c, a = self.t, self.c, self.action
        attempt = 0
        while True:
            attempt += 1
            key = self.action_id if IDEMPOTENCY in c else t.request_id()
            try:
                reply = t.refund(
                    a["subject"],
                    a["tenant"],
                    a["amount"],
                    key,
                    self.action_id,
                    self.trace_id,
                    a["grant_id"],
                    self.version if PRECONDITION in c else None,
                )
                if reply.get("replayed") and self.warn(
                    "the provider replayed an earlier result for this key"
                ):
                    return None
                return reply
            except PreconditionFailed:
                if self.warn("state version changed before the write"):
                    return None
                self.deny("order changed since it was read")
                return None
            except ToolRejected as rejected:
                self.deny(f"rejected: {rejected}")
                return None
            except ToolError as exc:
                if self.warn(f"{type(exc).__name__}: {exc}"):
                    return None
                if READBACK in c and not isinstance(exc, RateLimited):
                    prior = self.find_prior_effect()
                    if self.stopped:
                        return None
                    if prior is not None:
                        return prior
                if attempt >= self.retry.max_attempts:
                    t.record("failure", self.action_id, self.trace_id, None, "retries exhausted")
                    t.respond("failed", self.action_id, None)
                    self.stopped = True
                    return None
                t.sleep(self.backoff(attempt))

    def backoff(self, attempt: int) -> int:
        """Exponential back-off, with full jitter when the retry policy asks for it.

        The jitter is this run's own: drawn from a stream keyed by the run and the order, as a
        fleet member's random source is its own, so two members of one fleet do not retry in
        lockstep, and a replayed trial draws the same waits.
        """
        cap = min(8_000, self.retry.backoff_ms * (1 << (attempt - 1)))
        if self.retry.jitter != "full":
            return cap
        if self.jitter is None:
            self.jitter = Stream(stream_key("jitter", self.run_id, self.order_id))
        return self.jitter.randint(0, cap)

    def release(self, reply: dict[str, Any]) -> None:
        t, c = self.t, self.c
        ledger_ref = reply.get("ledger_ref")
        unreceipted = ledger_ref is None and (READBACK in c or GATE in c)
        if unreceipted and self.warn("the reply carries no receipt"):
            return
        t.record("effect", self.action_id, reply.get("trace_id"), ledger_ref, "refund committed")
        entry: dict[str, Any] | None = None
        if READBACK in c:
            found = t.lookup(self.action_id)
            if len(found) > 1 and self.warn("more than one effect for one logical action"):
                return
            if found:
                entry = found[0]
                ledger_ref = entry["id"]
                t.record(
                    "readback",
                    self.action_id,
                    entry["trace_id"],
                    ledger_ref,
                    "ledger entry read back",
                )
        if GATE in c:
            receipts = t.evidence_read(self.action_id)
            has_effect = proved = referenced = False
            for r in receipts:
                kind, ref = r["kind"], r["ledger_ref"]
                if kind == "effect":
                    has_effect = True
                if ref is not None:
                    referenced = True
                    if kind in ("effect", "readback") and r["trace_id"] == self.trace_id:
                        proved = True
            if not has_effect and self.warn(
                "the effect receipt is missing from the evidence ledger"
            ):
                return
            if not proved and referenced:
                if self.warn("trace lineage from decision to effect is broken"):
                    return
                if REPAIR in c:
                    proved = self.repair()
            if not proved:
                self.hold("success cannot be proved")
                return
        t.respond("completed", self.action_id, ledger_ref)

    def repair(self) -> bool:
        """Re-derive lineage: join the decision to the ledger entry by logical action id."""
        found = self.t.lookup(self.action_id)
        matches = [
            e
            for e in found
            if e["action_id"] == self.action_id and e["subject"] == self.action["subject"]
        ]
        if len(matches) != 1:
            return False
        self.t.record(
            "repair",
            self.action_id,
            self.trace_id,
            matches[0]["id"],
            "decision joined to ledger entry through the logical action id",
        )
        return True


def copperfin(manifest: Manifest) -> Target:
    """The reference target configured by a manifest's controls, retry and orchestration."""
    controls = frozenset(c.value for c in manifest.controls.enabled())
    retry = manifest.retry
    deny_on_warning = manifest.orchestration.on_warning == "deny"

    def target(task: Task, tools: ToolPort) -> None:
        # The sandbox's tools are called natively; any other port through `ForwardingPort`.
        port = tools if isinstance(tools, NativePort) else ForwardingPort(tools)
        _Run(task, port, controls, retry, deny_on_warning).run()

    return target
