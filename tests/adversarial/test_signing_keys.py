"""What makes a dossier believable holds through the real service. The key never meets tenant
code: a tenant's worker started without the signing key (its keys folder empty) runs its tenant's
code (an operator's folder of one agent), and the shared worker, which runs no tenant code, seals
and signs the dossier with the key the service publishes; the tenant's worker neither signs nor
makes a key of its own. And the code a dossier names as `executed` is the code that ran (B8): the
operator's folder rewritten in place to the same size, its mtime put back, is signed by its new
content's digest, never the old."""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.core.signing.dossier import PublicKey, verify
from service.packing import pack_folder
from tests.adversarial.deployment import Deployment, deployment, everything, submit_target
from tests.support.service import wait_decided

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TENANT = "keyless"
ENTRYPOINT = "swapped:agent"  # the one agent of the tenant's operator folder
PLAN = {"trials": 1, "seed": 3, "modes": ["timeout_before_send"]}
# The operator's agent: each build claims with its own name (same length: the same file size).
AGENT = """def agent(task, tools):
    tools.respond("completed", "a1", "ran build BUILD")
"""


@pytest.fixture(scope="module")
def operator_folder() -> Iterator[Path]:
    """Under /tmp, readable by the sandbox's user (as `tenant_code()` is)."""
    folder = Path(tempfile.mkdtemp(prefix="assaygate-operated-"))
    folder.chmod(0o755)
    (folder / "swapped.py").write_text(AGENT.replace("BUILD", "A1"))
    (folder / "swapped.py").chmod(0o644)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def keyless(
    tmp_path_factory: pytest.TempPathFactory, operator_folder: Path
) -> Iterator[tuple[Deployment, Path]]:
    folder = tmp_path_factory.mktemp("keys")
    no_keys = folder / "tenant-worker-keys"
    no_keys.mkdir()
    env = {"ASSAYGATE_KEYS_DIR": str(no_keys)}
    code = {TENANT: operator_folder}
    with deployment(folder, "keys", {TENANT: env}, code_dirs=code) as service:
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
    target = {"kind": "python", "entrypoint": ENTRYPOINT}
    with service.submitter(TENANT) as client:
        candidate = submit_target(client, target, PLAN, "keyless")["id"]
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
    assert ENTRYPOINT not in service.workers["shared"].log_path.read_text()
    assert "assay.run_shard" in log


def executed(client: httpx.Client, done: dict[str, Any]) -> list[str]:
    """The digests the candidate's signed dossier names as code that ran."""
    envelope = client.get(f"/v1/candidates/{done['id']}/dossier").json()["envelope"]
    statement = json.loads(base64.b64decode(envelope["payload"]))
    return [
        s["digest"]["sha256"]
        for s in statement["subject"][1:]
        if s["annotations"]["assurance"] == "executed"
    ]


def test_an_operator_folder_rewritten_in_place_is_signed_by_its_new_digest_never_the_old(
    keyless: tuple[Deployment, Path], operator_folder: Path
) -> None:
    service, _ = keyless
    agent = operator_folder / "swapped.py"
    target = {"kind": "python", "entrypoint": ENTRYPOINT}
    with service.submitter(TENANT) as client:
        first = wait_decided(client, submit_target(client, target, PLAN, "operated")["id"])
        before = pack_folder(operator_folder).sha256
        assert first["status"] == "done", first
        assert executed(client, first) == [before]
        assert "ran build A1" in everything(client, first)

        # New code under the old file's size and mtime: what a size-and-mtime key cannot see.
        stat = agent.stat()
        agent.write_text(AGENT.replace("BUILD", "B2"))
        os.utime(agent, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert (agent.stat().st_size, agent.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
        after = pack_folder(operator_folder).sha256
        assert after != before

        second = wait_decided(client, submit_target(client, target, PLAN, "operated")["id"])
        seen = everything(client, second)
        if second["status"] == "done":
            assert "ran build B2" in seen and "ran build A1" not in seen  # the new code ran
            assert executed(client, second) == [after]  # and is what the dossier signs
        else:  # or the worker refused: then nothing is signed as executed
            assert second["status"] == "failed", second
            assert before not in seen, seen[-2000:]
