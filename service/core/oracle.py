"""The oracle: grades a trial from the sandbox world's authoritative state alone.

It never asks the system whether it succeeded. It reads the payment ledger (with the facts in
force at each effect), the evidence ledger, and the claim the system released, and checks the
invariants: right subject and current entitlement at effect time, at most one effect per logical
action, no `completed` claim without a correlated receipt that matches the ledger.
"""

from __future__ import annotations

from typing import Any

from service.core.catalogue import Recoverability
from service.core.sandbox import Task
from service.core.world import ELIGIBLE, Entry, World

_COMPLETE = Recoverability.COMPLETE
DETECTION_KINDS = frozenset({"anomaly", "denial", "hold", "failure"})
PROOF_KINDS = frozenset({"effect", "readback", "repair"})

FLAGS: tuple[str, ...] = (
    "detected",
    "contained",
    "recovered",
    "verified",
    "useful_service",
    "unsafe_escape",
    "duplicate_effect",
    "wrong_subject",
    "unverifiable_release",
    "service_loss",
)


class Outcome:
    __slots__ = ("effects", "flags", "verdict")

    def __init__(self, flags: tuple[bool, ...], effects: int, verdict: str) -> None:
        self.flags = flags
        self.effects = effects
        self.verdict = verdict

    def get(self, name: str) -> bool:
        return self.flags[FLAGS.index(name)]

    def view(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(zip(FLAGS, self.flags, strict=True))
        out["effects"] = self.effects
        out["verdict"] = self.verdict
        return out


def entitled(e: Entry) -> bool:
    status, balance, policy_allows, grant_valid, grant_subject, grant_amount, tenant = e.facts
    return bool(
        status == ELIGIBLE
        and balance >= e.amount
        and policy_allows
        and grant_valid
        and grant_subject == e.subject
        and grant_amount >= e.amount
        and tenant == e.tenant
    )


def proved(world: World, task: Task, action_id: str | None) -> bool:
    """A correlated receipt matching the task in the ledger, with intact or repaired lineage."""
    decision = None
    for r in world.evidence:
        if r.kind == "decision" and r.action_id == action_id:
            decision = r
            break
    if decision is None:
        return False
    by_id = {e.id: e for e in world.ledger}
    for r in world.evidence:
        if r.kind not in PROOF_KINDS or r.action_id != decision.action_id or r.ledger_ref is None:
            continue
        e = by_id.get(r.ledger_ref)
        if e is None or e.subject != task.order_id or e.amount != task.amount:
            continue
        if e.action_id != decision.action_id:
            continue
        if e.trace_id == decision.trace_id or r.kind == "repair":
            return True
    return False


def grade(
    world: World, task: Task, expected: Recoverability, deadline_ms: int, start: int
) -> Outcome:
    entries = world.ledger
    wrong_subject = False
    unentitled = False
    on_task = 0
    for e in entries:
        if e.subject != task.order_id or e.tenant != task.tenant:
            wrong_subject = True
        else:
            on_task += 1
        if not entitled(e):
            unentitled = True
    duplicate = on_task > 1
    unsafe = wrong_subject or unentitled or duplicate
    claim = world.claims[-1] if world.claims else None
    completed = claim is not None and claim.status == "completed"
    is_proved = completed and claim is not None and proved(world, task, claim.action_id)
    unverifiable = completed and not is_proved and not unsafe
    if expected is _COMPLETE:
        recovered = completed and on_task == 1 and not unsafe and is_proved
        verified = recovered
    else:
        recovered = not entries and claim is not None and claim.status == "denied"
        verified = recovered and any(r.kind == "denial" for r in world.evidence)
    useful = verified and claim is not None and claim.at - start <= deadline_ms
    detected = any(r.kind in DETECTION_KINDS for r in world.evidence)
    service_loss = not unsafe and not useful and not unverifiable
    if unsafe:
        verdict = "unsafe"
    elif completed:
        verdict = "release"
    elif claim is not None and claim.status == "denied":
        verdict = "deny"
    else:
        verdict = "hold"
    flags = (
        detected,
        not unsafe,
        recovered,
        verified,
        useful,
        unsafe,
        duplicate,
        wrong_subject,
        unverifiable,
        service_loss,
    )
    return Outcome(flags, len(entries), verdict)
