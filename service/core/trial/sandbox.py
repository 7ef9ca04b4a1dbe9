"""Tool clients handed to the system under test, each call crossing the injector.

This is the target interface: a target is `Callable[[Task, Tools], None]`. It reads through the
clients, acts through them, records evidence through them and releases its final claim with
`respond`. The built-in Copperfin workflow uses nothing else, so a user's callable can do all it
does. Tool errors are typed, so a target can tell a timeout from a rejection from a malformed reply.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from service.core.faults.disturbance import Disturbance
from service.core.faults.injector import Armed, Injector
from service.core.trial.port import NativePort
from service.core.trial.storm import FleetLimit
from service.core.trial.task import Call as Call
from service.core.trial.task import PreconditionFailed as PreconditionFailed
from service.core.trial.task import RateLimited as RateLimited
from service.core.trial.task import RunCrashed as RunCrashed
from service.core.trial.task import Task as Task
from service.core.trial.task import ToolError as ToolError
from service.core.trial.task import ToolMalformed as ToolMalformed
from service.core.trial.task import ToolRejected as ToolRejected
from service.core.trial.task import ToolTimeout as ToolTimeout
from service.core.trial.task import Trace as Trace
from service.core.trial.world import FRAUD_HOLD, Claim, Receipt, World

TIMEOUT_MS: Final = 2_000
# Enum members read once: attribute access on an Enum class is slow on the hot path.
_TIMEOUT: Final = Disturbance.TIMEOUT
_MALFORMED: Final = Disturbance.MALFORMED_REPLY
_PARTIAL: Final = Disturbance.PARTIAL_REPLY
Args = dict[str, Any] | None  # a refund's arguments; None where no fault or trace sees them


class Tools(NativePort):
    __slots__ = (
        "_calls",
        "_fork",
        "_rollback",
        "_storm",
        "armed",
        "builds",
        "decoy",
        "inj",
        "latency",
        "run",
        "start",
        "storm_others",
        "trace",
        "world",
    )

    def __init__(
        self,
        world: World,
        inj: Injector,
        latency: int,
        decoy: str,
        trace: Trace | None = None,
    ) -> None:
        self.world = world
        self.inj = inj
        # The injector's live boundary map: one dict lookup per call decides whether to ask it.
        self.armed = inj.armed
        self.latency = latency
        self.decoy = decoy
        self.trace = trace
        self._calls = 0
        self._rollback = False
        self._fork: Callable[[], None] | None = None
        self._storm: FleetLimit | None = None
        # Under a storm: the other fleet copies' waits (None while this is one of those copies).
        self.storm_others: list[list[int]] | None = None
        # Which run of the task is executing (restarts and forks are runs of their own).
        self.run = 0
        # A remote target's adapter notes here what its endpoint reported with each reply:
        # (endpoint, build or None). The target itself never sees it.
        self.builds: list[tuple[str, str | None]] | None = None
        self.start = world.now

    def _log(self, call: str, args: dict[str, Any], result: Any) -> None:
        if self.trace is not None:
            self.trace.append({"at": self.world.now, "call": call, "args": args, "result": result})

    def _apply(self, boundary: str, call: Call, kind: str | None = None) -> None:
        """Hand an armed fault at this boundary to its handler, which fires it if it can."""
        self._calls += 1
        a = self.inj.take_armed(boundary, kind)
        if a is not None:
            HANDLERS[(boundary, a.disturbance, a.phase)](self, a, call)

    def _fire(self, spec: Armed) -> None:
        """The disturbance took effect: only now is there an injection receipt."""
        w = self.world
        self.inj.fire_armed(spec, f"{spec.boundary}#{self._calls}", w.now)
        if w.injected_at is None:
            w.injected_at = len(w.evidence)
        if self.trace is not None:
            self.trace.append(
                {
                    "at": w.now,
                    "injection": spec.id,
                    "boundary": spec.boundary,
                    "phase": spec.phase,
                }
            )

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
        if "crm.read" in self.armed:
            call = Call({"order_id": order_id})
            self._apply("crm.read", call)
            if call.reply is not None:
                self._log("crm.read", {"order_id": order_id}, call.reply)
                return dict(call.reply)
        record = self.world.crm_record(order_id)
        if self.trace is not None:
            self._log("crm.read", {"order_id": order_id}, record)
        return record

    def orders_read(self, order_id: str) -> dict[str, Any] | None:
        """The authoritative order system."""
        order = self.world.orders.get(order_id)
        view = order.view() if order else None
        if view is not None:
            view["unit"] = "pence"
        if self.trace is not None:
            self._log("orders.read", {"order_id": order_id}, view)
        return view

    def policy_read(self) -> dict[str, Any]:
        w = self.world
        view = {"version": w.policy_version, "refunds_allowed": w.policy_allows()}
        if self.trace is not None:
            self._log("policy.read", {}, view)
        return view

    def capability_check(self, grant_id: str) -> dict[str, Any] | None:
        grant = self.world.grants.get(grant_id)
        view = grant.view(self.world.now) if grant else None
        if self.trace is not None:
            self._log("capabilities.check", {"grant_id": grant_id}, view)
        return view

    def propose(self, order_id: str, tenant: str, grant_id: str, amount: int) -> dict[str, Any]:
        """The model's proposal: the action it would take. Assaygate tests the loop around it."""
        action = {"subject": order_id, "tenant": tenant, "grant_id": grant_id, "amount": amount}
        if "proposal" in self.armed:
            call = Call(action)
            self._apply("proposal", call)
            action = call.args
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
        # The call's arguments, built only for a fault's handler or the trace: most refunds meet
        # neither, and building a dictionary is much of what a call costs compiled.
        args: Args = None
        if self.trace is not None or "payments.refund" in self.armed:
            args = {
                "subject": subject,
                "amount": amount,
                "idempotency_key": idempotency_key,
                "action_id": action_id,
                "trace_id": trace_id,
                "expected_version": expected_version,
            }
        if not subject.startswith(w.subject_namespace):
            self._refuse_outside(subject, args)
        after: Armed | None = None
        if args is not None and "payments.refund" in self.armed:
            call = Call(args)
            self._apply("payments.refund", call)
            if call.error is not None:
                raise call.error
            trace_id = args["trace_id"]
            after = call.after
        if self._storm is not None:
            self._storm_gate(args)
        w.now += self.latency
        # Like real payment APIs, a known idempotency key replays its result before any check.
        if (
            expected_version is not None
            and w.replay(idempotency_key) is None
            and not self._precondition_holds(subject, idempotency_key, expected_version, args)
        ):
            raise PreconditionFailed("order version changed")
        entry, replayed = w.commit_refund(
            subject, tenant, amount, idempotency_key, action_id, trace_id, grant_id
        )
        w.provider_log.append((idempotency_key, "replayed" if replayed else "committed", w.now))
        reply: dict[str, Any] = {
            "status": "committed",
            "ledger_ref": entry.id,
            "trace_id": entry.trace_id,
            "replayed": replayed,
        }
        if after is not None:
            lost = self._disturb_reply(after, args)
            if lost is not None:
                raise lost
            if after.disturbance is _PARTIAL:
                reply = {"status": "ok"}
        if self.trace is not None and args is not None:
            self._log("payments.refund", args, reply)
        return reply

    def _refuse_outside(self, subject: str, args: Args) -> None:
        w = self.world
        w.refusals.append(f"effect on {subject} refused: outside {w.subject_namespace}")
        if self.trace is not None and args is not None:
            self._log("payments.refund", args, "refused: outside the synthetic namespace")
        raise ToolRejected("subject outside the synthetic namespace")

    def _precondition_holds(self, subject: str, key: str, expected: int, args: Args) -> bool:
        """Whether the caller's expected order version still holds at the write; when it does
        not, the provider logs the refusal and `refund` raises."""
        w = self.world
        order = w.orders.get(subject)
        if order is None or order.version != expected:
            w.provider_log.append((key, "precondition_failed", w.now))
            if self.trace is not None and args is not None:
                self._log("payments.refund", args, "precondition_failed")
            return False
        return True

    def _disturb_reply(self, after: Armed, args: Args) -> ToolError | None:
        """The effect committed: its reply lost, cut off or emptied; the error to raise, if any."""
        self._fire(after)
        d = after.disturbance
        if d is _TIMEOUT:
            self.world.now += TIMEOUT_MS
            if self.trace is not None and args is not None:
                self._log("payments.refund", args, "timeout")
            return ToolTimeout("refund timed out")
        if d is _MALFORMED:
            if self.trace is not None and args is not None:
                self._log("payments.refund", args, "malformed reply")
            return ToolMalformed("refund reply could not be parsed")
        return None

    def _storm_gate(self, args: Args) -> None:
        storm = self._storm
        assert storm is not None
        if not storm.admit(self.world.now):
            self.world.now += self.latency
            if self.trace is not None and args is not None:
                self._log("payments.refund", args, "429 rate limited")
            raise RateLimited("shared rate limit exceeded")

    def lookup(self, action_id: str) -> list[dict[str, Any]]:
        """Read the provider's ledger by logical action id (independent readback)."""
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
        if "evidence.record" in self.armed:
            call = Call({"kind": kind, "action_id": action_id})
            self._apply("evidence.record", call, kind)
            if call.reply == "dropped":
                self._log("evidence.record", call.args, "dropped")
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
        checkpoints = self.world.checkpoints
        saved = checkpoints.get(run_id)
        if saved is None:
            saved = checkpoints[run_id] = []
        saved.append({"stage": stage, **data})
        if self.trace is not None:
            self._log("checkpoints.save", {"run_id": run_id, "stage": stage}, "ok")
        if stage == "effect_done" and "checkpoints.save" in self.armed:
            call = Call({"run_id": run_id, "stage": stage})
            self._apply("checkpoints.save", call)
            if call.error is not None:
                raise call.error

    def checkpoint_load(self, run_id: str) -> dict[str, Any] | None:
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
        """Release a claim. Every claim is kept: the oracle decides what several of them mean."""
        self.world.claims.append(Claim(status, action_id, ledger_ref, self.world.now, self.run))
        if self.trace is not None:
            self._log("respond", {"status": status, "ledger_ref": ledger_ref}, "released")


# -- disturbance handlers: one per registry entry; each fires only once its disturbance is real --

Handler = Callable[[Tools, Armed, Call], None]


def _swap_subject(t: Tools, spec: Armed, call: Call) -> None:
    decoy = t.world.orders.get(t.decoy)
    if decoy is None:
        return
    call.args = {
        "subject": decoy.id,
        "tenant": decoy.tenant,
        "grant_id": "G-" + decoy.id,
        "amount": call.args["amount"],
    }
    t._fire(spec)


def _revoke_grant(t: Tools, spec: Armed, call: Call) -> None:
    grant = t.world.grants.get(call.args["grant_id"])
    if grant is None or not grant.valid_at(t.world.now):
        return
    grant.revoked_at = t.world.now
    t._fire(spec)


def _expire_grant(t: Tools, spec: Armed, call: Call) -> None:
    grant = t.world.grants.get(call.args["grant_id"])
    if grant is None or not grant.valid_at(t.world.now):
        return
    grant.expires_at = t.world.now
    t._fire(spec)


def _advance_policy(t: Tools, spec: Armed, call: Call) -> None:
    w = t.world
    w.policy_version += 1
    w.policies[w.policy_version] = False
    t._fire(spec)


def _conflict_source(t: Tools, spec: Armed, call: Call) -> None:
    w = t.world
    order_id = call.args["order_id"]
    order = w.orders.get(order_id)
    if order is None:
        return
    w.crm[order_id] = w.crm_record(order_id) or {}
    order.status = FRAUD_HOLD
    order.version += 1
    t._fire(spec)


def _drift_schema(t: Tools, spec: Armed, call: Call) -> None:
    drifted = t.world.crm_record(call.args["order_id"])
    if drifted is None:
        return
    drifted["amount"] = drifted.get("amount", 0) * 100
    drifted["unit"] = "1/100 pence"
    drifted["schema"] = 2
    call.reply = drifted
    t._fire(spec)


def _timeout_before_send(t: Tools, spec: Armed, call: Call) -> None:
    t._fire(spec)
    t.world.now += TIMEOUT_MS
    t._log("payments.refund", call.args, "timeout")
    call.error = ToolTimeout("refund timed out")


def _reject_before_write(t: Tools, spec: Armed, call: Call) -> None:
    w = t.world
    w.now += t.latency
    w.provider_log.append((call.args["idempotency_key"], "rejected_before_write", w.now))
    t._fire(spec)
    w.now += TIMEOUT_MS
    t._log("payments.refund", call.args, "timeout")
    call.error = ToolTimeout("refund timed out")


def _after_commit(t: Tools, spec: Armed, call: Call) -> None:
    # Fired by `refund` once the effect committed; a refused write leaves it unfired.
    call.after = spec


def _advance_version(t: Tools, spec: Armed, call: Call) -> None:
    order = t.world.orders.get(call.args["subject"])
    if order is None:
        return
    order.refunded = order.amount
    order.version += 1
    t._fire(spec)


def _strip_trace(t: Tools, spec: Armed, call: Call) -> None:
    call.args["trace_id"] = None
    t._fire(spec)


def _rate_limit_storm(t: Tools, spec: Armed, call: Call) -> None:
    p = spec.params
    t._storm = FleetLimit(
        int(p["agents"]), int(p["capacity_per_tick"]), int(p["tick_ms"]), t.storm_others
    )
    t._fire(spec)


def _fork_run(t: Tools, spec: Armed, call: Call) -> None:
    fork = t._fork
    if fork is None:
        return
    # The second executor starts now; its run happens inside this call, before the write.
    t._fire(spec)
    fork()


def _drop_write(t: Tools, spec: Armed, call: Call) -> None:
    call.reply = "dropped"
    t._fire(spec)


def _crash_and_rollback(t: Tools, spec: Armed, call: Call) -> None:
    t._rollback = True
    t._fire(spec)
    call.error = RunCrashed("the run crashed after its effect")


_D = Disturbance
_R: Final = "payments.refund"
HANDLERS: Final[dict[tuple[str, Disturbance, str], Handler]] = {
    ("proposal", _D.SWAP_SUBJECT, "after_proposal_before_authority"): _swap_subject,
    ("proposal", _D.REVOKE_GRANT, "after_approval_before_effect"): _revoke_grant,
    ("proposal", _D.EXPIRE_GRANT, "after_approval_before_effect"): _expire_grant,
    ("proposal", _D.ADVANCE_POLICY, "after_retrieval_before_effect"): _advance_policy,
    ("crm.read", _D.CONFLICT_SOURCE, "during_context_assembly"): _conflict_source,
    ("crm.read", _D.DRIFT_SCHEMA, "during_context_assembly"): _drift_schema,
    (_R, _D.TIMEOUT, "before_send"): _timeout_before_send,
    (_R, _D.TIMEOUT, "before_commit"): _reject_before_write,
    (_R, _D.TIMEOUT, "after_commit_before_receipt"): _after_commit,
    (_R, _D.MALFORMED_REPLY, "after_commit_before_receipt"): _after_commit,
    (_R, _D.PARTIAL_REPLY, "after_commit_before_receipt"): _after_commit,
    (_R, _D.ADVANCE_VERSION, "after_read_before_write"): _advance_version,
    (_R, _D.STRIP_TRACE, "between_authority_and_tool"): _strip_trace,
    (_R, _D.RATE_LIMIT_STORM, "before_commit"): _rate_limit_storm,
    (_R, _D.FORK_RUN, "after_checkpoint_before_effect"): _fork_run,
    ("evidence.record", _D.DROP_WRITE, "after_effect"): _drop_write,
    ("evidence.record", _D.DROP_WRITE, "during_recovery"): _drop_write,
    ("checkpoints.save", _D.CRASH_AND_ROLLBACK, "after_effect_before_resume"): _crash_and_rollback,
}
