"""The sandbox world: the authoritative, synthetic state an assay runs in.

Everything the oracle grades lives here: orders with versions and tenants, policy versions,
capability grants, the payment ledger (which honours idempotency keys), the evidence ledger, the
system's released claims, workflow checkpoints, and a virtual clock. The world never grades; it
records. Each payment entry keeps a readout of the facts in force at the moment of the effect,
the way a ledger row keeps its balance.
"""

from __future__ import annotations

from typing import Any, Final

from service.core.trial.rng import Stream

ELIGIBLE: Final = "eligible"
FRAUD_HOLD: Final = "fraud_hold"
SYNTHETIC_NAMESPACE: Final = "synthetic/"


class Order:
    __slots__ = ("amount", "customer", "id", "refunded", "status", "tenant", "version")

    def __init__(self, id: str, tenant: str, customer: str, amount: int, version: int) -> None:
        self.id = id
        self.tenant = tenant
        self.customer = customer
        self.amount = amount
        self.version = version
        self.status = ELIGIBLE
        self.refunded = 0

    def view(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tenant": self.tenant,
            "customer": self.customer,
            "amount": self.amount,
            "status": self.status,
            "version": self.version,
            "refunded": self.refunded,
        }


class Grant:
    __slots__ = (
        "actor",
        "amount",
        "expires_at",
        "id",
        "purpose",
        "revoked_at",
        "subject",
        "tenant",
    )

    def __init__(
        self, id: str, actor: str, subject: str, tenant: str, amount: int, expires_at: int
    ) -> None:
        self.id = id
        self.actor = actor
        self.subject = subject
        self.tenant = tenant
        self.purpose = "customer_refund"
        self.amount = amount
        self.expires_at = expires_at
        self.revoked_at: int | None = None

    def valid_at(self, t: int) -> bool:
        return t < self.expires_at and (self.revoked_at is None or t < self.revoked_at)

    def view(self, t: int) -> dict[str, Any]:
        return {
            "id": self.id,
            "actor": self.actor,
            "subject": self.subject,
            "tenant": self.tenant,
            "purpose": self.purpose,
            "amount": self.amount,
            "expires_at": self.expires_at,
            "revoked": self.revoked_at is not None and self.revoked_at <= t,
            "valid": self.valid_at(t),
        }


class LedgerEntry:
    """One committed payment effect, with the facts in force when it committed."""

    __slots__ = (
        "action_id",
        "amount",
        "at",
        "facts",
        "grant_id",
        "id",
        "key",
        "subject",
        "tenant",
        "trace_id",
    )

    def __init__(
        self,
        id: str,
        subject: str,
        tenant: str,
        amount: int,
        key: str,
        action_id: str,
        trace_id: str,
        grant_id: str,
        at: int,
        facts: tuple[Any, ...],
    ) -> None:
        self.id = id
        self.subject = subject
        self.tenant = tenant
        self.amount = amount
        self.key = key
        self.action_id = action_id
        self.trace_id = trace_id
        self.grant_id = grant_id
        self.at = at
        # (order status, order refundable balance before, policy allows refunds, grant valid,
        #  grant subject, grant amount, order tenant)
        self.facts = facts

    def view(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "subject": self.subject,
            "tenant": self.tenant,
            "amount": self.amount,
            "action_id": self.action_id,
            "trace_id": self.trace_id,
            "at": self.at,
        }


class Receipt:
    __slots__ = ("action_id", "at", "detail", "kind", "ledger_ref", "trace_id")

    def __init__(
        self,
        kind: str,
        action_id: str,
        trace_id: str | None,
        ledger_ref: str | None,
        at: int,
        detail: str,
    ) -> None:
        self.kind = kind
        self.action_id = action_id
        self.trace_id = trace_id
        self.ledger_ref = ledger_ref
        self.at = at
        self.detail = detail

    def view(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "action_id": self.action_id,
            "trace_id": self.trace_id,
            "ledger_ref": self.ledger_ref,
            "at": self.at,
            "detail": self.detail,
        }


class Claim:
    __slots__ = ("action_id", "at", "ledger_ref", "run", "status")

    def __init__(
        self, status: str, action_id: str | None, ledger_ref: str | None, at: int, run: int = 0
    ) -> None:
        self.status = status
        self.action_id = action_id
        self.ledger_ref = ledger_ref
        self.at = at
        # The run of the task that released it: restarts and forks are runs of their own.
        self.run = run

    def view(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "action_id": self.action_id,
            "ledger_ref": self.ledger_ref,
            "at": self.at,
            "run": self.run,
        }


WORKLOAD_FIELDS: Final = (
    "actor",
    "amount",
    "customer",
    "decoy_customer",
    "decoy_order",
    "expiry_ms",
    "latency_ms",
    "order",
    "order_version",
    "policy_version",
    "start",
    "tenant",
)


# A workload's names, each formatted the first time it is drawn and shared after: strings are
# immutable, and formatting six of them was a tenth of a compiled trial. Index: the drawn number.
_TENANTS: Final = [f"tenant-{1 + i}" for i in range(8)]
_ACTORS: Final = [f"operator-{1 + i}" for i in range(40)]
_ORDERS: Final[list[str | None]] = [None] * 1_000
_GRANTS: Final[list[str | None]] = [None] * 1_000
_CUSTOMERS: Final[list[str | None]] = [None] * 10_000


def _order(n: int) -> str:
    name = _ORDERS[n]
    if name is None:
        name = _ORDERS[n] = f"{SYNTHETIC_NAMESPACE}O-{n}"
    return name


def _grant(n: int) -> str:
    """The grant id of order `n` ("G-" and the order id)."""
    name = _GRANTS[n]
    if name is None:
        name = _GRANTS[n] = "G-" + _order(n)
    return name


def _customer(n: int) -> str:
    name = _CUSTOMERS[n]
    if name is None:
        name = _CUSTOMERS[n] = f"C-{n}"
    return name


class Workload:
    """One trial's workload, drawn from its own seeded stream."""

    __slots__ = (
        "actor",
        "amount",
        "customer",
        "decoy_customer",
        "decoy_grant",
        "decoy_order",
        "expiry_ms",
        "grant",
        "latency_ms",
        "order",
        "order_version",
        "policy_version",
        "start",
        "tenant",
    )

    def __init__(self, stream: Stream) -> None:
        # Three 64-bit draws, each split into mixed-radix fields: the workload costs three
        # generator steps instead of twelve.
        x, tenant = stream.next_divmod(8)
        self.tenant = _TENANTS[tenant]
        n = 100 + x % 890
        x //= 890
        decoy = n + 1 + x % 10
        self.order = _order(n)
        self.decoy_order = _order(decoy)
        # The grants' ids ("G-" and the order id): the world and the task both name them.
        self.grant = _grant(n)
        self.decoy_grant = _grant(decoy)
        x //= 10
        self.customer = _customer(1000 + x % 9000)
        x //= 9000
        self.decoy_customer = _customer(1000 + x % 9000)
        x //= 9000
        self.actor = _ACTORS[x % 40]
        y, amount = stream.next_divmod(49_501)
        self.amount = 500 + amount  # pence
        self.order_version = 1 + y % 60
        y //= 60
        self.policy_version = 5 + y % 16
        y //= 16
        self.latency_ms = 20 + y % 381
        z, start = stream.next_divmod(3_600_001)
        self.start = 36_000_000 + start  # ms of the virtual day
        self.expiry_ms = 60_000 + z % 540_001

    def view(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in WORKLOAD_FIELDS}


class World:
    __slots__ = (
        "by_key",
        "checkpoints",
        "claims",
        "crm",
        "evidence",
        "grants",
        "honours_keys",
        "injected_at",
        "ledger",
        "now",
        "orders",
        "policies",
        "policy_version",
        "provider_log",
        "refusals",
        "seq",
        "subject_namespace",
    )

    def __init__(self, w: Workload, honours_keys: bool = True) -> None:
        # A ledger that ignores idempotency keys (`honours_keys=False`) is a broken sandbox: it
        # shows that the figures come from executing the workflow, not from a table.
        self.honours_keys = honours_keys
        self.now = w.start
        self.seq = 0
        self.subject_namespace = SYNTHETIC_NAMESPACE
        self.orders = {
            w.order: Order(w.order, w.tenant, w.customer, w.amount, w.order_version),
            # A version no read of the task's order can carry, so a version precondition bound
            # to the task's order can never pass on the decoy by coincidence.
            w.decoy_order: Order(
                w.decoy_order, w.tenant, w.decoy_customer, w.amount + 1_000, w.order_version + 1_000
            ),
        }
        # The cached eligibility source mirrors the order system until a fault makes them differ.
        self.crm: dict[str, dict[str, Any]] = {}
        self.policy_version = w.policy_version
        self.policies = {w.policy_version: True}
        expires = w.start + w.expiry_ms
        self.grants = {
            w.grant: Grant(w.grant, w.actor, w.order, w.tenant, w.amount, expires),
            w.decoy_grant: Grant(
                w.decoy_grant, "operator-99", w.decoy_order, w.tenant, w.amount + 1_000, expires
            ),
        }
        self.ledger: list[LedgerEntry] = []
        self.by_key: dict[str, LedgerEntry] = {}
        self.provider_log: list[tuple[str, str, int]] = []
        self.evidence: list[Receipt] = []
        self.claims: list[Claim] = []
        self.checkpoints: dict[str, list[dict[str, Any]]] = {}
        self.refusals: list[str] = []
        # How many evidence receipts existed when the first disturbance took effect: detection
        # counts only signals raised after it.
        self.injected_at: int | None = None

    def next_id(self, prefix: str) -> str:
        self.seq += 1
        return f"{prefix}-{self.seq}"

    def policy_allows(self) -> bool:
        return self.policies[self.policy_version]

    def crm_record(self, order_id: str) -> dict[str, Any] | None:
        cached = self.crm.get(order_id)
        if cached is not None:
            return dict(cached)
        order = self.orders.get(order_id)
        if order is None:
            return None
        return {
            "id": order.id,
            "tenant": order.tenant,
            "amount": order.amount,
            "status": order.status,
            "version": order.version,
            "unit": "pence",
        }

    def replay(self, key: str) -> LedgerEntry | None:
        """The entry an idempotency key already committed, if the ledger honours keys."""
        return self.by_key.get(key) if self.honours_keys else None

    def commit_refund(
        self,
        subject: str,
        tenant: str,
        amount: int,
        key: str,
        action_id: str,
        trace_id: str | None,
        grant_id: str,
    ) -> tuple[LedgerEntry, bool]:
        """Commit one refund; a known idempotency key returns the original entry instead."""
        prior = self.replay(key)
        if prior is not None:
            return prior, True
        order = self.orders.get(subject)
        grant = self.grants.get(grant_id)
        facts = (
            order.status if order else "missing",
            (order.amount - order.refunded) if order else 0,
            self.policy_allows(),
            grant.valid_at(self.now) if grant else False,
            grant.subject if grant else None,
            grant.amount if grant else 0,
            order.tenant if order else None,
        )
        entry = LedgerEntry(
            self.next_id("L"),
            subject,
            tenant,
            amount,
            key,
            action_id,
            trace_id or self.next_id("tr-provider"),
            grant_id,
            self.now,
            facts,
        )
        self.ledger.append(entry)
        self.by_key[key] = entry
        if order is not None:
            order.refunded += amount
            order.version += 1
        return entry, False

    def entries_for(self, action_id: str) -> list[LedgerEntry]:
        return [e for e in self.ledger if e.action_id == action_id]

    def view(self) -> dict[str, Any]:
        return {
            "now": self.now,
            "orders": [o.view() for o in self.orders.values()],
            "policy_version": self.policy_version,
            "policy_allows_refunds": self.policy_allows(),
            "grants": [g.view(self.now) for g in self.grants.values()],
            "ledger": [e.view() for e in self.ledger],
            "provider_log": [list(p) for p in self.provider_log],
            "evidence": [r.view() for r in self.evidence],
            "claims": [c.view() for c in self.claims],
            "refusals": list(self.refusals),
        }
