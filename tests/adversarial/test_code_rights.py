"""Tenant code never outlives its right to run, through the real service (PostgreSQL, Redis, the
API, a shared worker and the tenant's own worker, bubblewrap). A python target leaves a daemon
behind (double fork, setsid) that tells the tenant's own local service it lives, with the secret
it holds; once the assay ends, once an operator revokes the tenant's code, once the secret is
deleted or rotated, it falls silent within a short grace. A rotated secret's old value, which
the code held until then, reaches no report, event or signed dossier."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from sqlmodel import Session

from service.app import tenants
from service.sandbox import VENDOR
from tests.adversarial.deployment import (
    Deployment,
    Witness,
    deployment,
    everything,
    submit_target,
    witnessed,
)
from tests.support.service import ROOT, allow_code, tenant_code, wait_decided, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

TENANT = "rights"
SECRET = "HELD_KEY"
VALUE = "sk-held-4Rt8Wq2Lp6Zx"
PLAN = {"trials": 2, "seed": 5, "modes": ["timeout_before_send"]}
# How long the sandbox may take to end once its right is gone (the workers poll every second),
# and how long a daemon that still lives could not keep quiet (it beats every 0.2 s).
GRACE_S, QUIET_S = 20.0, 3.0


def public_package_vendored() -> None:
    """The gate's public package in the tenant code's `vendor/`: the python host imports it
    from there when the test venv's editable install names another checkout (a git worktree),
    whose folder no sandbox binds; the same files as the checkout's own otherwise."""
    vendor = tenant_code() / VENDOR / "assaygate"
    if not vendor.exists():
        skip = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(ROOT / "assaygate", vendor, ignore=skip)
        for path in [vendor.parent, vendor, *vendor.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, int]]:
    folder = tmp_path_factory.mktemp("rights")
    public_package_vendored()
    with witnessed() as port, deployment(folder, "rights", {TENANT: {}}) as service:
        yield service, port


def submit(bench: Bench, client: httpx.Client, label: str, linger_s: float) -> str:
    """Submit the lingerer; returns once its daemon beats (its candidate's id)."""
    Witness.reports.pop(label, None)
    Witness.reports.pop(f"{label}-task", None)
    env = {"LABEL": label, "LINGER_S": str(linger_s), "WITNESS_PORT": str(bench.witness_port)}
    target = {
        "kind": "python",
        "entrypoint": "tests.adversarial.agents.lingerer:agent",
        "secrets": [SECRET],
        "env": env,
    }
    candidate_id: str = submit_target(client, target, PLAN, "rights")["id"]
    wait_for(lambda: bool(Witness.reports.get(label)), 120, f"{label}'s daemon")
    return candidate_id


def beats(label: str) -> int:
    return len(Witness.reports.get(label, []))


def falls_silent(label: str) -> bool:
    """Whether the daemon stops beating within the grace: no beat for QUIET_S on end."""
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        seen = beats(label)
        time.sleep(QUIET_S)
        if beats(label) == seen:
            return True
    return False


@dataclass(frozen=True)
class Bench:
    service: Deployment
    witness_port: int


@pytest.fixture
def bench(gate: tuple[Deployment, int]) -> Iterator[Bench]:
    service, port = gate
    service.put_secret(TENANT, SECRET, VALUE)
    yield Bench(service, port)
    allow_code(service.engine, TENANT)  # the next attack starts with the tenant's rights whole


def test_a_daemon_tenant_code_leaves_behind_dies_when_its_assay_ends(bench: Bench) -> None:
    service = bench.service
    with service.submitter(TENANT) as client:
        candidate = submit(bench, client, "ended", linger_s=0)
        done = wait_decided(client, candidate, timeout=120)
    assert done["status"] == "done", done
    # It lived, holding the secret, while the assay ran.
    assert Witness.reports["ended"][0]["secret"] == VALUE
    assert falls_silent("ended"), f"{beats('ended')} heartbeats and counting after the assay"


def test_a_daemon_tenant_code_leaves_behind_dies_when_an_operator_revokes_the_code(
    bench: Bench,
) -> None:
    service = bench.service
    with service.submitter(TENANT) as client:
        candidate = submit(bench, client, "revoked", linger_s=8)
        with Session(service.engine) as session:
            # What `assaygate tenants revoke-code` does.
            tenants.set_code(
                session, service.settings, tenants.SetCode(TENANT, allowed=False, operator="ops")
            )
        assert falls_silent("revoked"), f"{beats('revoked')} heartbeats after the revocation"
        done = wait_decided(client, candidate, timeout=120)
    assert done["status"] == "failed", done
    assert "code was revoked" in str(done), done


def test_a_daemon_tenant_code_leaves_behind_dies_when_the_secret_it_holds_is_deleted(
    bench: Bench,
) -> None:
    service = bench.service
    with service.submitter(TENANT) as client:
        candidate = submit(bench, client, "deleted", linger_s=8)
        with service.admin(TENANT) as tenant_admin:
            assert tenant_admin.delete(f"/v1/secrets/{SECRET}").status_code in (200, 204)
        assert falls_silent("deleted"), f"{beats('deleted')} heartbeats after the deletion"
        done = wait_decided(client, candidate, timeout=120)
    assert done["status"] == "failed", done
    assert f"secret {SECRET}" in str(done) and "deleted" in str(done), done


def test_a_rotated_secrets_old_value_dies_with_its_sandbox_and_reaches_no_report_or_dossier(
    bench: Bench,
) -> None:
    rotated = "sk-rotated-9Yb3Kc7Nm1Qd"
    service = bench.service
    with service.submitter(TENANT) as client:
        candidate = submit(bench, client, "rotated", linger_s=2)
        service.put_secret(TENANT, SECRET, rotated)
        done = wait_decided(client, candidate, timeout=180)
        seen = everything(client, done)
    # The code held the old value and claimed with it until its sandbox ended.
    assert Witness.reports["rotated-task"][0]["secret"] == VALUE
    assert VALUE not in seen, seen[-3000:]
    assert rotated not in seen, seen[-3000:]
    assert falls_silent("rotated"), f"{beats('rotated')} heartbeats with the old value"
