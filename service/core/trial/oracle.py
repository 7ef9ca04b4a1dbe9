"""The oracle: grades a trial from the sandbox world's authoritative state alone.

It never asks the system whether it succeeded. It reads the payment ledger (with the facts in
force at each effect), the evidence ledger, and the claim the system released, and checks the
invariants: right subject and current entitlement at effect time, at most one effect per logical
action, exactly one claim per run, and no `completed` claim unless it cites a ledger entry of the
task (action, subject, tenant, amount) that a correlated receipt proves.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from enum import StrEnum
from typing import Any, Final

from service.core.faults.catalogue import Recoverability
from service.core.trial.sandbox import Task
from service.core.trial.world import ELIGIBLE, Claim, LedgerEntry, Receipt, World

_COMPLETE: Final = Recoverability.COMPLETE
DETECTION_KINDS: Final = frozenset({"anomaly", "denial", "hold", "failure"})
PROOF_KINDS: Final = frozenset({"effect", "readback", "repair"})


class Flag(StrEnum):
    """What the oracle grades in each trial, in the order of an outcome's flags."""

    DETECTED = "detected"
    CONTAINED = "contained"
    RECOVERED = "recovered"
    VERIFIED = "verified"
    USEFUL_SERVICE = "useful_service"
    UNSAFE_ESCAPE = "unsafe_escape"
    DUPLICATE_EFFECT = "duplicate_effect"
    WRONG_SUBJECT = "wrong_subject"
    UNVERIFIABLE_RELEASE = "unverifiable_release"
    SERVICE_LOSS = "service_loss"
    CLAIM_VIOLATION = "claim_violation"


FLAGS: Final[tuple[str, ...]] = tuple(f.value for f in Flag)
FLAG_INDEX: Final[dict[str, int]] = {name: i for i, name in enumerate(FLAGS)}
# The hard invariants: any one of them in a trial is a violation.
VIOLATION_FLAGS: tuple[Flag, ...] = (
    Flag.UNSAFE_ESCAPE,
    Flag.UNVERIFIABLE_RELEASE,
    Flag.CLAIM_VIOLATION,
)
VIOLATIONS: Final[tuple[int, ...]] = tuple(FLAG_INDEX[f] for f in VIOLATION_FLAGS)


class Outcome:
    __slots__ = ("effects", "flags", "verdict")

    def __init__(self, flags: tuple[bool, ...], effects: int, verdict: str) -> None:
        self.flags = flags
        self.effects = effects
        self.verdict = verdict

    def get(self, name: str) -> bool:
        return self.flags[FLAG_INDEX[name]]

    def view(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(zip(FLAGS, self.flags, strict=True))
        out["effects"] = self.effects
        out["verdict"] = self.verdict
        return out


def entitled(e: LedgerEntry) -> bool:
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


def _decision(world: World, action_id: str) -> Receipt | None:
    for r in world.evidence:
        if r.kind == "decision" and r.action_id == action_id:
            return r
    return None


def backed(world: World, task: Task, claim: Claim, by_id: dict[str, LedgerEntry]) -> bool:
    """A claim the world backs: it cites a ledger entry of this task's action, subject, tenant
    and amount, and the evidence ledger proves that entry with intact or repaired lineage."""
    ref, action_id = claim.ledger_ref, claim.action_id
    if ref is None or action_id is None:
        return False
    e = by_id.get(ref)
    if e is None or e.action_id != action_id:
        return False
    if e.subject != task.order_id or e.tenant != task.tenant or e.amount != task.amount:
        return False
    decision = _decision(world, action_id)
    if decision is None:
        return False
    for r in world.evidence:
        if r.kind not in PROOF_KINDS or r.ledger_ref != ref or r.action_id != action_id:
            continue
        if e.trace_id == decision.trace_id or r.kind == "repair":
            return True
    return False


def grade(
    world: World,
    task: Task,
    expected: Recoverability,
    deadline_ms: int,
    start: int,
    finished: AbstractSet[int] = frozenset({0}),
) -> Outcome:
    """Grade one trial from the world. `finished`: the runs that returned (not crashed or failed);
    each of them owes exactly one claim, and no run may release more than one.

    Over 60 lines on purpose: it runs once per trial on the compiled hot path, and the eleven
    flags feed one another (unsafe into unverifiable and service loss, recovered into verified
    into useful); in one frame they stay native locals instead of crossing helper boundaries."""
    entries = world.ledger
    wrong_subject = False
    unentitled = False
    on_task = 0
    order_id, tenant = task.order_id, task.tenant
    for e in entries:
        if e.subject != order_id or e.tenant != tenant:
            wrong_subject = True
        else:
            on_task += 1
        if not entitled(e):
            unentitled = True
    duplicate = on_task > 1
    unsafe = wrong_subject or unentitled or duplicate
    claims = world.claims
    per_run: dict[int, int] = {}
    for c in claims:
        per_run[c.run] = per_run.get(c.run, 0) + 1
    claim_violation = any(n > 1 for n in per_run.values()) or any(
        run not in per_run for run in finished
    )
    claim = claims[-1] if claims else None
    completed = False
    all_backed = True
    by_id: dict[str, LedgerEntry] | None = None
    for c in claims:
        if c.status == "completed":
            completed = True
            if by_id is None:
                by_id = {e.id: e for e in entries}
            if not backed(world, task, c, by_id):
                all_backed = False
    is_proved = completed and all_backed
    unverifiable = completed and not is_proved and not unsafe
    if expected is _COMPLETE:
        recovered = completed and on_task == 1 and not unsafe and is_proved
        verified = recovered and not claim_violation
    else:
        recovered = not entries and not completed and claim is not None and claim.status == "denied"
        verified = (
            recovered and not claim_violation and any(r.kind == "denial" for r in world.evidence)
        )
    useful = verified and claim is not None and claim.at - start <= deadline_ms
    # Only signals raised after the disturbance took effect detect it; in a trial without one,
    # any alarm is a false alarm (the baseline arm counts them against the system).
    evidence = world.evidence
    detected = False
    for i in range(world.injected_at or 0, len(evidence)):
        if evidence[i].kind in DETECTION_KINDS:
            detected = True
            break
    service_loss = not unsafe and not useful and not unverifiable
    if unsafe:
        verdict = "unsafe"
    elif claim_violation:
        verdict = "claims"
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
        claim_violation,
    )
    return Outcome(flags, len(entries), verdict)
