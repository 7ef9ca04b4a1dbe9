"""FaultSpec and the versioned fault catalogues.

A catalogue is data: each entry names where a disturbance enters (boundary and phase), which
primitive disturbance the injector applies there, what signal it removes, which oracle grades it,
which recovery the system owes, and which control should break the transfer. The injector knows
the primitives; the catalogue composes them. Adding a fault is adding data.

Over 500 lines because it is a data table: some 330 of them are the shipped fault entries
(`_PAPER`, `_MORE`, `_STEPS`), one dict per fault, which read best beside the model they fill.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from service.core.errors import CatalogueInvalid, FaultUnknown
from service.core.faults.disturbance import Disturbance, check
from service.core.system.control import Control


class Domain(StrEnum):
    IDENTITY = "identity"
    CONTEXT = "context"
    TOOL = "tool"
    STATE = "state"
    EVIDENCE = "evidence"


DOMAINS: tuple[Domain, ...] = tuple(Domain)


class Persistence(StrEnum):
    TRANSIENT = "transient"
    PERSISTENT = "persistent"


class Correlation(StrEnum):
    ISOLATED = "isolated"
    REPEATED = "repeated"
    SYNCHRONISED = "synchronised"
    SHARED = "shared"


class Recoverability(StrEnum):
    """What the system owes the customer under this fault."""

    COMPLETE = "complete_exactly_once"
    DENY = "deny_and_report"


Violation = Literal["unsafe_escape", "duplicate_effect", "unverifiable_release", "wrong_subject"]


class _Inapplicable(ValueError):
    """A fault the disturbance registry cannot apply; names the FaultSpec field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class FaultSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$", max_length=64)]
    domain: Domain
    mode: Annotated[str, Field(min_length=1, max_length=64)]
    target: str
    boundary: str
    phase: str
    disturbance: Disturbance
    params: dict[str, int | float | str] = Field(default_factory=dict)
    persistence: Persistence = Persistence.TRANSIENT
    correlation: Correlation = Correlation.ISOLATED
    intensity: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0
    scope: str = "one synthetic order"
    signal_removed: str
    oracle: str
    expected_recoverability: Recoverability
    # Controls removed together for the counterfactual containment pair.
    nominated_control: tuple[Control, ...] = ()
    predicted_transfer: Violation | None = None
    # Ordered composition: faults armed once this one has fired, in order.
    then: tuple[str, ...] = ()
    remediation: Literal[
        "change_architecture", "narrow_authority", "add_recovery", "reject_scenario"
    ]
    description: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> FaultSpec:
        problem = check(self.boundary, self.disturbance, self.phase, self.params)
        if problem is not None:
            raise _Inapplicable(*problem)
        if self.nominated_control and self.predicted_transfer is None:
            raise ValueError("a nominated control needs a predicted_transfer")
        return self

    def coverage_key(self) -> str:
        return "/".join(
            (self.domain.value, self.boundary, self.phase, self.correlation.value, self.oracle)
        )


def baseline_group(spec: FaultSpec) -> str:
    """The faults that share a matched baseline under `baseline: shared`: those on one tool
    (the reset hook's task is the tool's, so their trials can run the same task)."""
    return spec.target


class Catalogue(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str
    faults: tuple[FaultSpec, ...]
    # Composition steps: armed only by a `then`, never scheduled as their own trials.
    steps: tuple[FaultSpec, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> Catalogue:
        ids = [f.id for f in self.faults + self.steps]
        if len(ids) != len(set(ids)):
            raise ValueError("fault ids must be unique")
        known = set(ids)
        for f in self.faults + self.steps:
            for nxt in f.then:
                if nxt not in known:
                    raise ValueError(f"fault {f.id} composes unknown fault {nxt}")
        return self

    def by_id(self, fault_id: str) -> FaultSpec:
        for f in self.faults + self.steps:
            if f.id == fault_id:
                return f
        raise FaultUnknown(f"unknown fault '{fault_id}' in catalogue {self.version}", field="modes")

    def in_domain(self, domain: Domain) -> tuple[FaultSpec, ...]:
        return tuple(f for f in self.faults if f.domain is domain)

    def coverage_keys(self) -> tuple[str, ...]:
        return tuple(sorted({f.coverage_key() for f in self.faults}))


_REFUND = "payments.refund"
_COMPLETE = Recoverability.COMPLETE.value
_DENY = Recoverability.DENY.value

# The paper's ten modes, in the reference script's order within each domain: paper mode draws a
# mode per trial with the script's generator from exactly these tuples.
_PAPER: tuple[dict[str, object], ...] = (
    dict(
        id="subject_swap",
        domain="identity",
        mode="subject_swap",
        target="action contract",
        boundary="proposal",
        phase="after_proposal_before_authority",
        disturbance="swap_subject",
        signal_removed="subject binding",
        oracle="effect_subject_matches_task",
        expected_recoverability=_DENY,
        nominated_control=["bind_identity", "state_precondition"],
        predicted_transfer="unsafe_escape",
        remediation="narrow_authority",
        description="The proposal's subject and capability are swapped to another customer's "
        "order after the model proposes and before authority is checked.",
    ),
    dict(
        id="revoked_capability",
        domain="identity",
        mode="revoked_capability",
        target="capability grant",
        boundary="proposal",
        phase="after_approval_before_effect",
        disturbance="revoke_grant",
        signal_removed="capability revocation notice",
        oracle="entitlement_at_effect_time",
        expected_recoverability=_DENY,
        nominated_control=["pre_effect_authority"],
        predicted_transfer="unsafe_escape",
        remediation="narrow_authority",
        description="The approving capability is revoked between approval and effect.",
    ),
    dict(
        id="stale_policy",
        domain="context",
        mode="stale_policy",
        target="policy assertion",
        boundary="proposal",
        phase="after_retrieval_before_effect",
        disturbance="advance_policy",
        signal_removed="policy version change",
        oracle="policy_in_force_at_effect_time",
        expected_recoverability=_DENY,
        nominated_control=["refresh_context"],
        predicted_transfer="unsafe_escape",
        remediation="narrow_authority",
        description="A new policy version that excludes the refund takes force after retrieval.",
    ),
    dict(
        id="cross_source_conflict",
        domain="context",
        mode="cross_source_conflict",
        target="eligibility assertion",
        boundary="crm.read",
        phase="during_context_assembly",
        disturbance="conflict_source",
        signal_removed="authoritative order status",
        oracle="entitlement_at_effect_time",
        expected_recoverability=_DENY,
        nominated_control=["refresh_context", "state_precondition"],
        predicted_transfer="unsafe_escape",
        remediation="change_architecture",
        description="The order moves to a fraud hold; the cached eligibility source still says "
        "eligible.",
    ),
    dict(
        id="timeout_after_commit",
        domain="tool",
        mode="timeout_after_commit",
        target="refund API",
        boundary=_REFUND,
        phase="after_commit_before_receipt",
        disturbance="timeout",
        signal_removed="effect acknowledgement",
        oracle="ledger_entries_per_logical_action",
        expected_recoverability=_COMPLETE,
        nominated_control=["idempotency", "effect_readback", "state_precondition"],
        predicted_transfer="duplicate_effect",
        remediation="add_recovery",
        description="The provider commits the refund and the reply is lost as a timeout.",
    ),
    dict(
        id="partial_success_response",
        domain="tool",
        mode="partial_success_response",
        target="tool response",
        boundary=_REFUND,
        phase="after_commit_before_receipt",
        disturbance="partial_reply",
        signal_removed="authoritative receipt in reply",
        oracle="claim_backed_by_correlated_receipt",
        expected_recoverability=_COMPLETE,
        nominated_control=["effect_readback", "evidence_gate"],
        predicted_transfer="unverifiable_release",
        remediation="add_recovery",
        description="The provider commits and replies success without the receipt reference.",
    ),
    dict(
        id="checkpoint_rollback",
        domain="state",
        mode="checkpoint_rollback",
        target="workflow checkpoint",
        boundary="checkpoints.save",
        phase="after_effect_before_resume",
        disturbance="crash_and_rollback",
        signal_removed="effect-done checkpoint",
        oracle="ledger_entries_per_logical_action",
        expected_recoverability=_COMPLETE,
        nominated_control=["idempotency", "effect_readback", "state_precondition"],
        predicted_transfer="duplicate_effect",
        remediation="add_recovery",
        description="The run crashes after the effect and resumes from a checkpoint that says "
        "the effect has not happened.",
    ),
    dict(
        id="concurrent_version_change",
        domain="state",
        mode="concurrent_version_change",
        target="order state",
        boundary=_REFUND,
        phase="after_read_before_write",
        disturbance="advance_version",
        signal_removed="order version",
        oracle="entitlement_at_effect_time",
        expected_recoverability=_DENY,
        nominated_control=["state_precondition"],
        predicted_transfer="unsafe_escape",
        remediation="add_recovery",
        description="Another channel refunds the order after the workflow's last read and "
        "before its write.",
    ),
    dict(
        id="drop_effect_receipt",
        domain="evidence",
        mode="drop_effect_receipt",
        target="evidence ledger",
        boundary="evidence.record",
        phase="after_effect",
        disturbance="drop_write",
        params={"kind": "effect"},
        signal_removed="effect receipt",
        oracle="claim_backed_by_correlated_receipt",
        expected_recoverability=_COMPLETE,
        nominated_control=["effect_readback", "evidence_gate"],
        predicted_transfer="unverifiable_release",
        remediation="add_recovery",
        description="The effect receipt never reaches the evidence ledger.",
    ),
    dict(
        id="break_trace_lineage",
        domain="evidence",
        mode="break_trace_lineage",
        target="trace context",
        boundary=_REFUND,
        phase="between_authority_and_tool",
        disturbance="strip_trace",
        signal_removed="trace context",
        oracle="claim_backed_by_correlated_receipt",
        expected_recoverability=_COMPLETE,
        nominated_control=["evidence_gate", "evidence_repair"],
        predicted_transfer="unverifiable_release",
        remediation="change_architecture",
        description="The trace context is lost between the authority decision and the tool call.",
    ),
)

# Beyond the paper: the distinctions it insists on, each as its own coverage key.
_MORE: tuple[dict[str, object], ...] = (
    dict(
        id="expired_capability",
        domain="identity",
        mode="expired_capability",
        target="capability grant",
        boundary="proposal",
        phase="after_approval_before_effect",
        disturbance="expire_grant",
        signal_removed="capability expiry",
        oracle="entitlement_at_effect_time",
        expected_recoverability=_DENY,
        nominated_control=["pre_effect_authority"],
        predicted_transfer="unsafe_escape",
        remediation="narrow_authority",
        description="The capability token expires between approval and execution.",
    ),
    dict(
        id="timeout_before_send",
        domain="tool",
        mode="timeout_before_send",
        target="refund API",
        boundary=_REFUND,
        phase="before_send",
        disturbance="timeout",
        signal_removed="request delivery",
        oracle="ledger_entries_per_logical_action",
        expected_recoverability=_COMPLETE,
        remediation="add_recovery",
        description="The request never leaves the process; retry is the valid recovery law.",
    ),
    dict(
        id="reject_before_write",
        domain="tool",
        mode="reject_before_write",
        target="refund API",
        boundary=_REFUND,
        phase="before_commit",
        disturbance="timeout",
        signal_removed="rejection reply",
        oracle="ledger_entries_per_logical_action",
        expected_recoverability=_COMPLETE,
        remediation="add_recovery",
        description="The provider receives and rejects the request before any durable write; "
        "the rejection reaches the caller as a timeout.",
    ),
    dict(
        id="malformed_output",
        domain="tool",
        mode="malformed_output",
        target="refund API",
        boundary=_REFUND,
        phase="after_commit_before_receipt",
        disturbance="malformed_reply",
        signal_removed="parseable reply",
        oracle="ledger_entries_per_logical_action",
        expected_recoverability=_COMPLETE,
        nominated_control=["idempotency", "effect_readback", "state_precondition"],
        predicted_transfer="duplicate_effect",
        remediation="add_recovery",
        description="The provider commits and the reply body cannot be parsed.",
    ),
    dict(
        id="drifting_output",
        domain="tool",
        mode="drifting_output",
        target="eligibility API",
        boundary="crm.read",
        phase="during_context_assembly",
        disturbance="drift_schema",
        signal_removed="amount unit",
        oracle="entitlement_at_effect_time",
        expected_recoverability=_COMPLETE,
        nominated_control=["refresh_context", "pre_effect_authority"],
        predicted_transfer="unsafe_escape",
        remediation="change_architecture",
        description="The eligibility tool's schema drifts: amounts arrive in hundredths of a "
        "penny under the same field name.",
    ),
    dict(
        id="retry_storm",
        domain="tool",
        mode="synchronised_retry_storm",
        target="shared refund rate limit",
        boundary=_REFUND,
        phase="before_commit",
        disturbance="rate_limit_storm",
        correlation="synchronised",
        scope="100 agents",
        params={
            "agents": 100,
            "capacity_per_tick": 20,
            "tick_ms": 100,
            "overload_factor": 2,
            "max_backoff_ms": 8000,
        },
        signal_removed="rate-limit headroom",
        oracle="completion_within_deadline",
        expected_recoverability=_COMPLETE,
        remediation="add_recovery",
        description="One hundred agents hit one shared rate limit together and retry on the "
        "same rhythm.",
    ),
    dict(
        id="fork_run",
        domain="state",
        mode="fork_run",
        target="workflow run",
        boundary=_REFUND,
        phase="after_checkpoint_before_effect",
        disturbance="fork_run",
        correlation="shared",
        signal_removed="run ownership",
        oracle="ledger_entries_per_logical_action",
        expected_recoverability=_COMPLETE,
        nominated_control=["idempotency", "state_precondition"],
        predicted_transfer="duplicate_effect",
        remediation="add_recovery",
        description="A second executor resumes the same checkpoint while the first is about to "
        "write.",
    ),
    dict(
        id="timeout_then_dropped_receipt",
        domain="tool",
        mode="timeout_after_commit+drop_effect_receipt",
        target="refund API, evidence ledger",
        boundary=_REFUND,
        phase="after_commit_before_receipt",
        disturbance="timeout",
        correlation="repeated",
        then=["drop_recovery_receipt"],
        signal_removed="effect acknowledgement, then the recovery's receipt",
        oracle="claim_backed_by_correlated_receipt",
        expected_recoverability=_COMPLETE,
        nominated_control=["idempotency", "effect_readback", "state_precondition"],
        predicted_transfer="duplicate_effect",
        remediation="add_recovery",
        description="Ordered composition: the reply is lost after commit, then the receipt written "
        "by the recovery is dropped before recovery completes.",
    ),
)

_STEPS: tuple[dict[str, object], ...] = (
    dict(
        id="drop_recovery_receipt",
        domain="evidence",
        mode="drop_effect_receipt",
        target="evidence ledger",
        boundary="evidence.record",
        phase="during_recovery",
        disturbance="drop_write",
        params={"kind": "effect"},
        signal_removed="effect receipt",
        oracle="claim_backed_by_correlated_receipt",
        expected_recoverability=_COMPLETE,
        remediation="add_recovery",
        description="Second step of an ordered composition.",
    ),
)


def _build(
    version: str, faults: tuple[dict[str, object], ...], steps: tuple[dict[str, object], ...] = ()
) -> Catalogue:
    try:
        return Catalogue.model_validate({"version": version, "faults": faults, "steps": steps})
    except ValidationError as exc:  # pragma: no cover - the shipped data is validated in tests
        raise CatalogueInvalid(str(exc)) from None


PAPER_VERSION = "paper-188/1"
FULL_VERSION = "assaygate-full/1"


def paper_catalogue() -> Catalogue:
    return _build(PAPER_VERSION, _PAPER)


def full_catalogue() -> Catalogue:
    order = {d: i for i, d in enumerate(DOMAINS)}
    merged = sorted(_PAPER + _MORE, key=lambda f: order[Domain(str(f["domain"]))])
    return _build(FULL_VERSION, tuple(merged), _STEPS)


def catalogue_named(name: str) -> Catalogue:
    if name == "paper":
        return paper_catalogue()
    if name == "full":
        return full_catalogue()
    raise FaultUnknown(f"unknown catalogue '{name}' (known: paper, full)", field="catalogue")


def custom_catalogue(version: str, faults: list[dict[str, object]]) -> Catalogue:
    """A catalogue from user data (tests and user-supplied fault lists)."""
    try:
        return Catalogue.model_validate({"version": version, "faults": faults})
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [str(p) for p in err["loc"]]
        message = err["msg"]
        inapplicable = (err.get("ctx") or {}).get("error")
        if isinstance(inapplicable, _Inapplicable):
            loc.append(inapplicable.field)
            message = inapplicable.message
        raise CatalogueInvalid(message, field=".".join(loc)) from None
