"""The disturbance registry: which disturbance the sandbox can apply at which boundary and phase.

Every (boundary, disturbance, phase) the injector can fire is one entry here and one handler in
`sandbox.HANDLERS` (a test keeps the two equal). A catalogue validates against this table, so a
fault that names a phase nobody implements, or a disturbance its boundary cannot apply, is a
catalogue error naming the field, never a fault that "fires" and does nothing. Handlers write the
injection receipt only after the disturbance took effect.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Disturbance(StrEnum):
    """The primitives the injector can apply at a boundary."""

    SWAP_SUBJECT = "swap_subject"
    REVOKE_GRANT = "revoke_grant"
    EXPIRE_GRANT = "expire_grant"
    ADVANCE_POLICY = "advance_policy"
    CONFLICT_SOURCE = "conflict_source"
    DRIFT_SCHEMA = "drift_schema"
    TIMEOUT = "timeout"
    MALFORMED_REPLY = "malformed_reply"
    PARTIAL_REPLY = "partial_reply"
    RATE_LIMIT_STORM = "rate_limit_storm"
    ADVANCE_VERSION = "advance_version"
    CRASH_AND_ROLLBACK = "crash_and_rollback"
    FORK_RUN = "fork_run"
    DROP_WRITE = "drop_write"
    STRIP_TRACE = "strip_trace"
    # MCP targets only (the proxy applies them; see service/mcp/faults.py).
    REJECT = "reject"
    STALE_REPLAY = "stale_replay"


_REFUND = "payments.refund"


@dataclass(frozen=True)
class DisturbanceEntry:
    boundary: str
    disturbance: Disturbance
    phase: str
    effect: str
    # Parameters the handler reads: each must be present (and an integer where marked).
    params: tuple[str, ...] = ()


REGISTRY: tuple[DisturbanceEntry, ...] = (
    DisturbanceEntry(
        "proposal",
        Disturbance.SWAP_SUBJECT,
        "after_proposal_before_authority",
        "the proposal's subject, tenant and grant become another customer's order",
    ),
    DisturbanceEntry(
        "proposal",
        Disturbance.REVOKE_GRANT,
        "after_approval_before_effect",
        "the task's capability grant is revoked in the world",
    ),
    DisturbanceEntry(
        "proposal",
        Disturbance.EXPIRE_GRANT,
        "after_approval_before_effect",
        "the task's capability grant expires in the world",
    ),
    DisturbanceEntry(
        "proposal",
        Disturbance.ADVANCE_POLICY,
        "after_retrieval_before_effect",
        "a new policy version that excludes refunds comes into force",
    ),
    DisturbanceEntry(
        "crm.read",
        Disturbance.CONFLICT_SOURCE,
        "during_context_assembly",
        "the order goes on fraud hold while the cached record still says eligible",
    ),
    DisturbanceEntry(
        "crm.read",
        Disturbance.DRIFT_SCHEMA,
        "during_context_assembly",
        "the cached record answers in another unit and schema",
    ),
    DisturbanceEntry(
        _REFUND,
        Disturbance.TIMEOUT,
        "before_send",
        "the request never leaves: the client times out, nothing commits",
    ),
    DisturbanceEntry(
        _REFUND,
        Disturbance.TIMEOUT,
        "before_commit",
        "the provider rejects before its durable write and the client times out",
    ),
    DisturbanceEntry(
        _REFUND,
        Disturbance.TIMEOUT,
        "after_commit_before_receipt",
        "the provider commits, then the reply is lost as a timeout",
    ),
    DisturbanceEntry(
        _REFUND,
        Disturbance.MALFORMED_REPLY,
        "after_commit_before_receipt",
        "the provider commits, then the reply cannot be parsed",
    ),
    DisturbanceEntry(
        _REFUND,
        Disturbance.PARTIAL_REPLY,
        "after_commit_before_receipt",
        "the provider commits, then replies without a receipt",
    ),
    DisturbanceEntry(
        _REFUND,
        Disturbance.ADVANCE_VERSION,
        "after_read_before_write",
        "another writer changes the order between the read and the write",
    ),
    DisturbanceEntry(
        _REFUND,
        Disturbance.STRIP_TRACE,
        "between_authority_and_tool",
        "the trace context is stripped from the effect request",
    ),
    DisturbanceEntry(
        _REFUND,
        Disturbance.RATE_LIMIT_STORM,
        "before_commit",
        "the shared rate limit is saturated by a synchronised fleet",
        ("agents", "capacity_per_tick", "tick_ms", "overload_factor", "max_backoff_ms"),
    ),
    DisturbanceEntry(
        _REFUND,
        Disturbance.FORK_RUN,
        "after_checkpoint_before_effect",
        "a second executor runs the same task while the first is about to write",
    ),
    DisturbanceEntry(
        "evidence.record",
        Disturbance.DROP_WRITE,
        "after_effect",
        "the evidence write of the given kind is dropped",
        ("kind",),
    ),
    DisturbanceEntry(
        "evidence.record",
        Disturbance.DROP_WRITE,
        "during_recovery",
        "the recovery's evidence write of the given kind is dropped",
        ("kind",),
    ),
    DisturbanceEntry(
        "checkpoints.save",
        Disturbance.CRASH_AND_ROLLBACK,
        "after_effect_before_resume",
        "the run crashes after its effect and resumes from the checkpoint before it",
    ),
)

# Applied by the MCP proxy to a tool of the contract by its role (`service/mcp/faults.HANDLERS`
# has one handler for each). The refund sandbox has no tool at these boundaries.
MCP_REGISTRY: tuple[DisturbanceEntry, ...] = (
    DisturbanceEntry(
        "mcp.effect", Disturbance.TIMEOUT, "before_send", "the proxy times out, nothing is sent"
    ),
    DisturbanceEntry(
        "mcp.effect",
        Disturbance.TIMEOUT,
        "after_commit_before_receipt",
        "the proxy forwards, the server commits, the reply is dropped as a timeout",
    ),
    DisturbanceEntry(
        "mcp.effect",
        Disturbance.PARTIAL_REPLY,
        "after_commit_before_receipt",
        "the server commits, the reply loses its effect id",
    ),
    DisturbanceEntry(
        "mcp.effect",
        Disturbance.MALFORMED_REPLY,
        "after_commit_before_receipt",
        "the server commits, the reply cannot be parsed",
    ),
    DisturbanceEntry(
        "mcp.effect", Disturbance.REJECT, "before_commit", "the call is refused unwritten"
    ),
    DisturbanceEntry(
        "mcp.effect",
        Disturbance.DRIFT_SCHEMA,
        "after_commit_before_receipt",
        "the server commits, the reply's fields are renamed",
    ),
    DisturbanceEntry(
        "mcp.effect",
        Disturbance.RATE_LIMIT_STORM,
        "before_commit",
        "concurrent runs share one rate limit at the proxy",
        ("agents", "capacity_per_tick", "tick_ms"),
    ),
    DisturbanceEntry(
        "mcp.read",
        Disturbance.STALE_REPLAY,
        "after_first_read",
        "a repeated read is answered with its first reply",
    ),
    DisturbanceEntry(
        "mcp.read",
        Disturbance.SWAP_SUBJECT,
        "during_context_assembly",
        "the read answers with another subject in the contract's subject field",
    ),
    DisturbanceEntry(
        "mcp.authority",
        Disturbance.REVOKE_GRANT,
        "after_approval_before_effect",
        "the authority tool answers revoked",
    ),
    DisturbanceEntry(
        "mcp.authority",
        Disturbance.EXPIRE_GRANT,
        "after_approval_before_effect",
        "the authority tool answers expired",
    ),
    DisturbanceEntry(
        "mcp.evidence",
        Disturbance.DROP_WRITE,
        "after_effect",
        "the evidence write answers success and is never forwarded",
        ("kind",),
    ),
    DisturbanceEntry(
        "mcp.evidence",
        Disturbance.STRIP_TRACE,
        "between_authority_and_tool",
        "the trace context is stripped from the evidence call",
    ),
    DisturbanceEntry(
        "mcp.state",
        Disturbance.CRASH_AND_ROLLBACK,
        "after_checkpoint",
        "the agent run is killed after the checkpoint call and started again",
    ),
    DisturbanceEntry(
        "mcp.state", Disturbance.FORK_RUN, "second_run", "a second run works on the same task"
    ),
    DisturbanceEntry(
        "mcp.state",
        Disturbance.ADVANCE_VERSION,
        "after_read_before_write",
        "the mutate hook changes the world between read and effect",
    ),
)

KEYS: frozenset[tuple[str, Disturbance, str]] = frozenset(
    (e.boundary, e.disturbance, e.phase) for e in REGISTRY
)
MCP_KEYS: frozenset[tuple[str, Disturbance, str]] = frozenset(
    (e.boundary, e.disturbance, e.phase) for e in MCP_REGISTRY
)
_ALL = REGISTRY + MCP_REGISTRY
_BY_KEY = {(e.boundary, e.disturbance, e.phase): e for e in _ALL}
# Integer parameters: the storm's fleet shape.
_INT_PARAMS = frozenset({"agents", "capacity_per_tick", "tick_ms", "overload_factor"})


def check(
    boundary: str, disturbance: Disturbance, phase: str, params: dict[str, int | float | str]
) -> tuple[str, str] | None:
    """Why a fault cannot be applied, as (field, message); None when the registry has it."""
    at_boundary = [e for e in _ALL if e.boundary == boundary]
    if not at_boundary:
        known = sorted({e.boundary for e in _ALL})
        return "boundary", f"no disturbance applies at {boundary!r} (boundaries: {known})"
    same = [e for e in at_boundary if e.disturbance is disturbance]
    if not same:
        can = sorted({e.disturbance.value for e in at_boundary})
        return (
            "disturbance",
            f"{disturbance.value!r} cannot be applied at {boundary!r} (it can apply: {can})",
        )
    entry = _BY_KEY.get((boundary, disturbance, phase))
    if entry is None:
        phases = sorted(e.phase for e in same)
        return (
            "phase",
            f"{disturbance.value!r} at {boundary!r} has no phase {phase!r} (phases: {phases})",
        )
    for name in entry.params:
        value = params.get(name)
        if value is None:
            return "params", f"{disturbance.value!r} needs the parameter {name!r}"
        if name in _INT_PARAMS and (not isinstance(value, int) or value < 1):
            return "params", f"{name!r} must be a positive integer"
    return None
