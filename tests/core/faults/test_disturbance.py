"""The disturbance registry: a fault is real or it is a catalogue error; receipts follow effects."""

from __future__ import annotations

from typing import Any

import pytest

from service.core.errors import CatalogueInvalid
from service.core.faults.catalogue import custom_catalogue, full_catalogue
from service.core.faults.disturbance import KEYS
from service.core.system.manifest import Manifest
from service.core.trial.harness import Runtime, run_trial
from service.core.trial.sandbox import HANDLERS, PreconditionFailed, Task, Tools


def fault(fault_id: str, **changes: Any) -> dict[str, Any]:
    spec = full_catalogue().by_id(fault_id).model_dump(mode="json")
    spec.update(changes)
    return spec


def test_every_registry_entry_has_exactly_one_sandbox_handler() -> None:
    assert set(HANDLERS) == set(KEYS)


def test_every_shipped_fault_is_in_the_registry() -> None:
    cat = full_catalogue()
    for spec in cat.faults + cat.steps:
        assert (spec.boundary, spec.disturbance, spec.phase) in KEYS, spec.id


@pytest.mark.parametrize(
    ("changes", "field", "needle"),
    [
        ({"phase": "whenever"}, "faults.0.phase", "has no phase 'whenever'"),
        ({"boundary": "orders.read"}, "faults.0.boundary", "no disturbance applies"),
        ({"disturbance": "drop_write"}, "faults.0.disturbance", "cannot be applied"),
        ({"params": {}}, "faults.0.params", "needs the parameter 'agents'"),
    ],
)
def test_a_custom_fault_the_sandbox_cannot_apply_is_a_catalogue_error_naming_the_field(
    changes: dict[str, Any], field: str, needle: str
) -> None:
    base = "retry_storm" if "params" in changes else "revoked_capability"
    with pytest.raises(CatalogueInvalid) as err:
        custom_catalogue("hollow", [fault(base, **changes)])
    assert err.value.field == field
    assert needle in err.value.message


def trial(manifest: Manifest, fault_id: str, target: Any) -> Any:
    cat = custom_catalogue("one", [fault(fault_id, nominated_control=[])])
    rt = Runtime(manifest, cat, target)
    return run_trial(rt, cat.faults[0], 11, 12)


def test_a_revocation_of_a_grant_that_does_not_exist_leaves_no_receipt(typed: Manifest) -> None:
    def proposes_for_a_missing_grant(task: Task, tools: Tools) -> None:
        tools.propose(task.order_id, task.tenant, "G-nobody", task.amount)
        tools.respond("denied", None, None)

    rec = trial(typed, "revoked_capability", proposes_for_a_missing_grant)
    assert rec.receipts == []
    assert not rec.exercised


def test_a_reply_loss_after_commit_never_fires_when_the_write_was_refused(typed: Manifest) -> None:
    def stale_write(task: Task, tools: Tools) -> None:
        try:
            tools.refund(task.order_id, task.tenant, task.amount, "k", "a", None, task.grant_id, -1)
        except PreconditionFailed:
            tools.respond("denied", None, None)

    rec = trial(typed, "timeout_after_commit", stale_write)
    assert rec.world.ledger == []
    assert rec.receipts == []
    assert not rec.exercised


def test_a_fired_fault_has_its_receipt_after_the_world_changed(typed: Manifest) -> None:
    seen: list[tuple[bool, int]] = []

    def watches_its_grant(task: Task, tools: Tools) -> None:
        tools.propose(task.order_id, task.tenant, task.grant_id, task.amount)
        grant = tools.capability_check(task.grant_id)
        assert grant is not None
        seen.append((grant["valid"], len(tools.inj.receipts)))
        tools.respond("denied", None, None)

    rec = trial(typed, "revoked_capability", watches_its_grant)
    assert seen == [(False, 1)]
    assert rec.exercised and rec.receipts[0].fault == "revoked_capability"
