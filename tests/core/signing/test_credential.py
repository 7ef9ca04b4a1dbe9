"""Injector identities: scoped, expiring, verified; the sandbox refuses what they do not cover."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from service.core.errors import CredentialInvalid
from service.core.faults.plan import AssayPlan
from service.core.shards.assay import StopLimits, merge, plan_shards, run_assay, run_shard
from service.core.signing.credential import InjectorScope, injection_guard, mint, verify_credential
from service.core.signing.dossier import PublicKey, Signer
from service.core.system.manifest import Manifest
from service.core.trial.sandbox import Task, Tools

NOW = 1_800_000_000.0
SERVICE = Signer(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))
KEYS = {SERVICE.keyid: PublicKey(SERVICE.keyid, SERVICE.public)}


def _scope(**over: object) -> InjectorScope:
    base = dict(
        tenant="t-1",
        candidate="c-1",
        assay="a-1",
        modes=("timeout_after_commit",),
        namespace="synthetic/",
        max_effects=1000,
        not_before=NOW - 1,
        expires=NOW + 600,
    )
    base.update(over)
    return InjectorScope(**base)  # type: ignore[arg-type]


def test_a_valid_credential_yields_its_scope() -> None:
    scope = verify_credential(mint(_scope(), SERVICE), KEYS, assay="a-1", now=NOW)
    assert scope.modes == ("timeout_after_commit",) and scope.keyid == SERVICE.keyid


def _widened(token: str) -> str:
    payload, sig = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["modes"].append("subject_swap")
    raw = json.dumps(claims, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode() + "." + sig


@pytest.mark.parametrize(
    ("make", "assay", "now", "field"),
    [
        (
            lambda: mint(_scope(), Signer(Ed25519PrivateKey.generate())),
            "a-1",
            NOW,
            "credential.signature",
        ),
        (lambda: _widened(mint(_scope(), SERVICE)), "a-1", NOW, "credential.signature"),
        (lambda: mint(_scope(), SERVICE), "a-1", NOW + 601, "credential.expires"),
        (lambda: mint(_scope(), SERVICE), "a-2", NOW, "credential.assay"),
        (lambda: mint(_scope(not_before=NOW + 60), SERVICE), "a-1", NOW, "credential.not_before"),
        (lambda: "garbage", "a-1", NOW, "credential"),
    ],
    ids=["forged", "tampered", "expired", "other-assay", "not-yet-valid", "malformed"],
)
def test_bad_credentials_are_refused_with_a_named_reason(make, assay, now, field) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CredentialInvalid) as err:
        verify_credential(make(), KEYS, assay=assay, now=now)
    assert err.value.field == field


def test_a_fault_outside_the_credentials_modes_is_refused_before_it_fires(typed: Manifest) -> None:
    plan = AssayPlan(modes=("timeout_after_commit", "subject_swap"), trials=10, seed=1)
    guard = injection_guard(_scope(), lambda: NOW)
    results = [run_shard(typed, plan, s, guard=guard) for s in plan_shards(typed, plan)]
    report = merge(typed, plan, results).to_dict()
    faults = {f["id"]: f for f in report["faults"]}
    assert faults["timeout_after_commit"]["exercised"] == 10
    assert faults["subject_swap"]["exercised"] == 0
    assert faults["subject_swap"]["injector_refusals"] == 10
    assert report["decision"] != "allow"


def test_an_expired_credential_stops_every_injection(typed: Manifest) -> None:
    plan = AssayPlan(modes=("timeout_after_commit",), trials=5, seed=1)
    guard = injection_guard(_scope(), lambda: NOW + 3600)
    result = run_shard(typed, plan, plan_shards(typed, plan)[0], guard=guard)
    assert result.tallies["timeout_after_commit"].injector_refusals == 5
    assert result.tallies["timeout_after_commit"].exercised == 0


def test_the_sandbox_refuses_an_effect_on_a_non_synthetic_subject(typed: Manifest) -> None:
    def rogue(task: Task, tools: Tools) -> None:
        tools.refund("prod/O-1", task.tenant, task.amount, "k", "a", None, task.grant_id)

    report = run_assay(
        typed, AssayPlan(modes=("timeout_before_send",), trials=4, seed=2), target=rogue
    ).to_dict()
    fault = report["faults"][0]
    assert fault["sandbox_refusals"] >= 4
    assert fault["signature"]["counts"]["effects"] == 0
    assert report["decision"] == "block"
    assert "outside_namespace" in {r["code"] for r in report["reasons"]}


def test_a_low_effect_cap_stops_the_shard_and_the_assay_blocks(typed: Manifest) -> None:
    plan = AssayPlan(modes=("timeout_after_commit",), trials=100, seed=1)
    shard = plan_shards(typed, plan)[0]
    result = run_shard(typed, plan, shard, limits=StopLimits(max_effects=5))
    assert result.stopped and result.stop_reason is not None
    assert result.stop_reason.startswith("effects above the cap")
    assert result.trials < 100
    report = merge(typed, plan, [result]).to_dict()
    assert report["decision"] == "block"
    assert report["stopped"] == result.stop_reason


def test_target_errors_above_the_threshold_stop_the_assay_with_that_reason(typed: Manifest) -> None:
    def broken(task: Task, tools: Tools) -> None:
        raise RuntimeError("agent crashed")

    plan = AssayPlan(modes=("timeout_after_commit",), trials=50, seed=1)
    shard = plan_shards(typed, plan)[0]
    result = run_shard(typed, plan, shard, target=broken, limits=StopLimits(max_target_errors=3))
    # Each trial's broken intervention run and broken baseline run are two target errors.
    assert result.stop_reason == (
        "target errors above the limit (4 > 3); first: RuntimeError: agent crashed"
    )
    report = merge(typed, plan, [result]).to_dict()
    assert report["faults"][0]["target_errors"] == 2
    assert report["faults"][0]["baseline_errors"] == 2
    assert report["target_errors"] == {
        "total": 4,
        "by_kind": {"RuntimeError": 4},
        "causes": {"RuntimeError": ["RuntimeError: agent crashed"]},
    }
    assert report["faults"][0]["signature"]["counts"]["contained"] == 0
    assert report["decision"] == "block"
