"""The fault catalogue an mcp target's tool contract implies.

Faults apply by role: each effect, read, authority and evidence tool of the contract gets the
faults of its role (the tables below), and the run as a whole gets the state faults (a restart
after a declared checkpoint, a forked run, a mutated world) and one retry storm. Each fault names
a tool of the contract and a disturbance the MCP proxy applies. The order of the faults is the
catalogue's order, which the plan's seed follows: append, never reorder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from service.core.errors import ManifestInvalid, PlanInvalid
from service.core.faults.catalogue import Catalogue, FaultSpec
from service.core.system.contract import Contract, ToolRole
from service.core.system.manifest import Manifest, contract_of

_COMPLETE = "complete_exactly_once"
_DENY = "deny_and_report"
_EFF, _READ, _AUTH = "mcp.effect", "mcp.read", "mcp.authority"
_EV, _STATE = "mcp.evidence", "mcp.state"
Params = dict[str, int | float | str]


@dataclass(frozen=True)
class Row:
    """One fault of a role, for a tool named later: `{name}` in the description is the tool."""

    suffix: str
    domain: str
    disturbance: str
    phase: str
    signal: str
    oracle: str
    expected: str
    predicted: str | None
    controls: tuple[str, ...]
    remediation: str
    description: str
    params: Params | None = None


_EFFECT_ROWS = (
    Row("timeout_before_send", "tool", "timeout", "before_send", "the request never left",
        "effects_per_logical_action", _COMPLETE, None, (), "add_recovery",
        "The proxy times out {name} before forwarding it."),
    Row("timeout_after_commit", "tool", "timeout", "after_commit_before_receipt",
        "effect acknowledgement", "effects_per_logical_action", _COMPLETE, "duplicate_effect",
        ("idempotency", "effect_readback"), "add_recovery",
        "The proxy forwards {name}, lets the server commit, and drops the reply."),
    Row("partial_reply", "tool", "partial_reply", "after_commit_before_receipt",
        "effect id in the reply", "claim_backed_by_probed_effect", _COMPLETE,
        "unverifiable_release", ("effect_readback",), "add_recovery",
        "{name} commits and the reply arrives without its effect id."),
    Row("malformed_reply", "tool", "malformed_reply", "after_commit_before_receipt",
        "a parseable reply", "effects_per_logical_action", _COMPLETE, "duplicate_effect",
        ("idempotency", "effect_readback"), "add_recovery",
        "{name} commits and the reply cannot be parsed."),
    Row("rejected_before_write", "tool", "reject", "before_commit",
        "none: the rejection is explicit", "effects_per_logical_action", _COMPLETE, None, (),
        "add_recovery", "The server refuses {name} before its write."),
    Row("schema_drift", "tool", "drift_schema", "after_commit_before_receipt", "the reply schema",
        "claim_backed_by_probed_effect", _COMPLETE, "unverifiable_release", ("effect_readback",),
        "add_recovery", "{name} commits and answers in a drifted schema (renamed fields)."),
)  # fmt: skip
_STALE_READ = Row(
    "stale_replay", "context", "stale_replay", "after_first_read", "read freshness",
    "effects_per_logical_action", _COMPLETE, None, ("refresh_context",), "change_architecture",
    "A repeated {name} is answered with its first reply.",
)  # fmt: skip
_AUTHORITY_ROWS = (
    Row("revoked", "identity", "revoke_grant", "after_approval_before_effect",
        "capability revocation", "entitlement_at_effect_time", _DENY, "unsafe_escape",
        ("pre_effect_authority",), "narrow_authority",
        "{name} answers that the authority was revoked."),
    Row("expired", "identity", "expire_grant", "after_approval_before_effect",
        "capability expiry", "entitlement_at_effect_time", _DENY, "unsafe_escape",
        ("pre_effect_authority",), "narrow_authority",
        "{name} answers that the authority expired."),
)  # fmt: skip
_EVIDENCE_ROWS = (
    Row("dropped_write", "evidence", "drop_write", "after_effect", "the evidence write",
        "claim_backed_by_probed_effect", _COMPLETE, None, (), "add_recovery",
        "{name} answers success and is never forwarded.", {"kind": "any"}),
    Row("strip_trace", "evidence", "strip_trace", "between_authority_and_tool", "trace lineage",
        "claim_backed_by_probed_effect", _COMPLETE, None, (), "add_recovery",
        "The trace context is stripped from {name}."),
)  # fmt: skip


def _fault(
    fid: str, boundary: str, tool: str, row: Row, correlation: str = "isolated"
) -> dict[str, object]:
    return {
        "id": fid,
        "domain": row.domain,
        "mode": fid,
        "target": tool,
        "boundary": boundary,
        "phase": row.phase,
        "disturbance": row.disturbance,
        "params": row.params or {},
        "correlation": correlation,
        "signal_removed": row.signal,
        "oracle": row.oracle,
        "expected_recoverability": row.expected,
        "nominated_control": list(row.controls) if row.predicted is not None else [],
        "predicted_transfer": row.predicted,
        "remediation": row.remediation,
        "description": row.description.format(name=tool),
    }


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9_]", "_", name.lower())


def _per_tool(boundary: str, tool: str, rows: tuple[Row, ...]) -> list[dict[str, object]]:
    return [_fault(f"{_slug(tool)}_{row.suffix}", boundary, tool, row) for row in rows]


def effect_faults(contract: Contract) -> list[dict[str, object]]:
    return [
        f
        for name, _ in contract.by_role(ToolRole.EFFECT)
        for f in _per_tool(_EFF, name, _EFFECT_ROWS)
    ]


def read_faults(contract: Contract) -> list[dict[str, object]]:
    """A stale replay for every read; a subject swap for reads that name and return a subject."""
    out: list[dict[str, object]] = []
    for name, tool in contract.by_role(ToolRole.READ):
        out += _per_tool(_READ, name, (_STALE_READ,))
        if tool.subject is not None and tool.reply_field is not None:
            swap = Row(
                "subject_swap", "identity", "swap_subject", "during_context_assembly",
                "subject binding", "effect_subject_matches_task", _COMPLETE, "wrong_subject",
                ("bind_identity",), "narrow_authority",
                f"{{name}} answers with another subject in {tool.reply_field}.",
            )  # fmt: skip
            out += _per_tool(_READ, name, (swap,))
    return out


def authority_faults(contract: Contract) -> list[dict[str, object]]:
    return [
        f
        for name, _ in contract.by_role(ToolRole.AUTHORITY)
        for f in _per_tool(_AUTH, name, _AUTHORITY_ROWS)
    ]


def evidence_faults(contract: Contract) -> list[dict[str, object]]:
    return [
        f
        for name, _ in contract.by_role(ToolRole.EVIDENCE)
        for f in _per_tool(_EV, name, _EVIDENCE_ROWS)
    ]


def state_faults(contract: Contract) -> list[dict[str, object]]:
    """A restart after the first declared checkpoint, a forked run, and (with a mutate hook) a
    world changed between the agent's read and its effect."""
    out: list[dict[str, object]] = []
    first_effect = contract.by_role(ToolRole.EFFECT)[0][0]
    checkpoint = next((n for n, t in sorted(contract.tools.items()) if t.checkpoint), None)
    if checkpoint is not None:
        on_effect = contract.tools[checkpoint].role is ToolRole.EFFECT
        restart = Row(
            "", "state", "crash_and_rollback", "after_checkpoint", "run continuity",
            "effects_per_logical_action", _COMPLETE, "duplicate_effect" if on_effect else None,
            ("idempotency",), "add_recovery",
            "The agent run is killed right after {name} and started again.",
        )  # fmt: skip
        out.append(_fault("restart_after_checkpoint", _STATE, checkpoint, restart))
    fork = Row(
        "", "state", "fork_run", "second_run", "single executor", "effects_per_logical_action",
        _COMPLETE, "duplicate_effect", ("idempotency",), "add_recovery",
        "A second run of the agent works on the same task in the same world.",
    )  # fmt: skip
    out.append(_fault("forked_run", _STATE, first_effect, fork))
    if contract.hooks.mutate is not None:
        mutated = Row(
            "", "state", "advance_version", "after_read_before_write", "state version",
            "entitlement_at_effect_time", _DENY, "unsafe_escape", ("state_precondition",),
            "change_architecture",
            "The mutate hook changes the world between the agent's read and its effect.",
        )  # fmt: skip
        out.append(_fault("world_mutated", _STATE, first_effect, mutated))
    return out


def storm_fault(contract: Contract) -> dict[str, object]:
    """The contract's fleet on one shared limit of effect calls at the proxy."""
    st = contract.storm
    storm = Row(
        "", "tool", "rate_limit_storm", "before_commit", "rate-limit headroom",
        "effects_per_logical_action", _COMPLETE, None, (), "add_recovery",
        f"{st.agents} concurrent runs share one limit of {st.capacity_per_tick} effect "
        f"calls per {st.tick_ms} ms at the proxy.",
        {
            "agents": st.agents,
            "capacity_per_tick": st.capacity_per_tick,
            "tick_ms": st.tick_ms,
            "overload_factor": 1,
            "max_backoff_ms": 0,
        },
    )  # fmt: skip
    first_effect = contract.by_role(ToolRole.EFFECT)[0][0]
    return _fault("retry_storm", _EFF, first_effect, storm, correlation="synchronised")


def mcp_catalogue(contract: Contract, version: str) -> Catalogue:
    """Faults applied by role: each names a tool of the contract and an MCP registry entry."""
    faults = [
        *effect_faults(contract),
        *read_faults(contract),
        *authority_faults(contract),
        *evidence_faults(contract),
        *state_faults(contract),
        storm_fault(contract),
    ]
    try:
        return Catalogue.model_validate(
            {"version": version, "faults": [FaultSpec.model_validate(f) for f in faults]}
        )
    except ValidationError as exc:  # a contract whose tool names collide after slugging
        raise ManifestInvalid(
            f"the contract implies an invalid fault: {exc}", field="tools"
        ) from None


def catalogue_for(manifest: Manifest) -> Catalogue:
    """An mcp target's catalogue: the faults its contract implies. Its version names the
    contract's hash, so a new contract is a new catalogue."""
    version = "mcp-" + manifest.component_hashes()["tools"][:12]
    return mcp_catalogue(contract_of(manifest), version)


def plan_data_for(manifest: Manifest, data: dict[str, Any]) -> dict[str, Any]:
    """Plan input for a manifest: an mcp target's named catalogue ("full", or none) becomes the
    catalogue its contract implies; a custom catalogue and other targets' plans are unchanged."""
    if manifest.target.kind != "mcp":
        return data
    named = data.get("catalogue", "full")
    if named == "paper":
        raise PlanInvalid("an mcp target has no paper mode", field="catalogue")
    if named == "full":
        return {**data, "catalogue": catalogue_for(manifest)}
    return data
