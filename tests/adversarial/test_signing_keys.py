"""The key that makes every dossier believable never meets tenant code, through the real service:
a tenant's worker started without the signing key (its keys folder empty) runs its tenant's code,
and the shared worker, which runs no tenant code, seals and signs the dossier with the key the
service publishes. The tenant's worker neither signs nor makes a key of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from service.core.signing.dossier import PublicKey, verify
from tests.adversarial.deployment import Deployment, deployment, submit_target
from tests.support.service import wait_decided

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TENANT = "keyless"


@pytest.fixture(scope="module")
def keyless(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, Path]]:
    folder = tmp_path_factory.mktemp("keys")
    no_keys = folder / "tenant-worker-keys"
    no_keys.mkdir()
    env = {"ASSAYGATE_KEYS_DIR": str(no_keys)}
    with deployment(folder, "keys", {TENANT: env}) as service:
        yield service, no_keys


def published(service: Deployment) -> dict[str, PublicKey]:
    with service.submitter(TENANT) as client:
        keys = client.get("/v1/keys").json()["keys"]
    return {
        k["keyid"]: PublicKey(k["keyid"], k["keyval"]["public"], k["not_before"], k["not_after"])
        for k in keys
    }


def test_a_tenant_worker_without_the_signing_key_still_gets_its_assays_sealed_and_signed(
    keyless: tuple[Deployment, Path],
) -> None:
    service, no_keys = keyless
    target = {"kind": "python", "entrypoint": "tests.worker.agents.rogue:agent"}
    plan = {"trials": 1, "seed": 3, "modes": ["timeout_before_send"]}
    with service.submitter(TENANT) as client:
        candidate = submit_target(client, target, plan, "keyless")["id"]
        done = wait_decided(client, candidate, timeout=180)
        assert done["status"] == "done", done
        dossier = client.get(f"/v1/candidates/{candidate}/dossier")
    assert dossier.status_code == 200, dossier.text
    # Signed with a key the service publishes, by the shared pool: it verifies offline.
    checked = verify(dossier.json()["envelope"], published(service))
    assert checked.failed() is None, checked.failed()
    # The tenant's code ran on the tenant's own worker, which made no key and signed nothing.
    assert sorted(p.name for p in no_keys.iterdir()) == []
    log = service.workers[TENANT].log_path.read_text()
    assert "tests.worker.agents.rogue" not in service.workers["shared"].log_path.read_text()
    assert "assay.run_shard" in log
