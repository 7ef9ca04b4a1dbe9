"""The eight controls a configured system may declare."""

from __future__ import annotations

from enum import StrEnum


class Control(StrEnum):
    BIND_IDENTITY = "bind_identity"
    PRE_EFFECT_AUTHORITY = "pre_effect_authority"
    REFRESH_CONTEXT = "refresh_context"
    STATE_PRECONDITION = "state_precondition"
    IDEMPOTENCY = "idempotency"
    EFFECT_READBACK = "effect_readback"
    EVIDENCE_GATE = "evidence_gate"
    # Beyond the paper: re-derive a broken trace lineage by joining the decision receipt to the
    # authoritative ledger entry through the logical action identity.
    EVIDENCE_REPAIR = "evidence_repair"
