"""The service assays the commit it signs for: code reaches the tenant's worker as an artifact,
by digest, and the deploy asks by digest. Real PostgreSQL, Redis, the API on a real port, a
tenant worker process running the code in its sandbox, and the `assaygate` command as CI runs it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlmodel import Session

from service.asgi import create_app
from service.core.decision.policy import EMPTY
from service.core.system.artifact import CODE, ArtifactSubject, Assurance, Source
from service.db.artifact import set_subjects
from service.db.models import ArtifactRow
from service.db.session import session_scope
from service.packing import Entry, archive, pack
from service.settings import Settings
from tests.adversarial.test_archive_attacks import ATTACKS, LIMITS
from tests.api.test_bad_input import refused
from tests.deploy.test_ci_examples import argo_metric, argo_outcome
from tests.support.api import cli, submit, upload
from tests.support.keys import Key, KeyBook
from tests.support.service import (
    ROOT,
    WorkerProcess,
    allow_code,
    example,
    wait_decided,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

#: The team's agent: the reference workflow as the team's own settings file configures it. A
#: commit that switches its idempotency off (and the two controls that would hide that) is the
#: "quietly broken" commit: the manifest, which declares the controls, does not change.
AGENT = '''"""The team's refund agent: the reference workflow, as its settings configure it."""

from pathlib import Path

from service.core.system.manifest import parse_manifest_json
from service.core.trial.copperfin import copperfin

run = copperfin(parse_manifest_json(Path(__file__).with_name("workflow.json").read_text()))
'''
BROKEN = ("idempotency", "state_precondition", "effect_readback")
PLAN = {"catalogue": "full", "modes": ["timeout_after_commit"], "trials": 10, "seed": 3}


def manifest() -> dict[str, Any]:
    data = example("typed-repair")
    data["target"] = {"kind": "python", "entrypoint": "agent:run", "cannot_disable": []}
    return data


def write_code(folder: Path, *, broken: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "agent.py").write_text(AGENT)
    settings = copy.deepcopy(example("typed-repair"))
    for control in BROKEN if broken else ():
        settings["controls"][control] = False
    (folder / "workflow.json").write_text(json.dumps(settings, indent=1) + "\n")
    return folder


def git(folder: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=ci@example.com", "-c", "user.name=ci", *args],
        cwd=folder,
        check=True,
        capture_output=True,
    )


def assaygate(key: Key, api_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return cli(api_url, key.secret, *args)


def argo_result(key: Key, api_url: str, system: str, artifact: str) -> str:
    """The analysis template's web metric against the live API: its URL and header with the
    rollout's arguments, and the outcome its conditions give the answer."""
    web = argo_metric()["provider"]["web"]
    args = {"assaygate-url": api_url, "system": system, "artifact": artifact}
    args["api-key"] = key.secret

    def filled(template: str) -> str:
        for name, value in args.items():
            template = template.replace("{{args." + name + "}}", value)
        return template

    url = filled(web["url"])
    headers = {h["key"]: filled(h["value"]) for h in web["headers"]}
    response = httpx.get(url, headers=headers, timeout=web["timeoutSeconds"])
    assert response.status_code == 200, response.text
    return argo_outcome(response.json())


class Team:
    """A tenant allowed to run code, its CI key and client, and its worker process."""

    def __init__(self, name: str, key: Key, client: httpx.Client) -> None:
        self.name, self.key, self.client = name, key, client

    def upload(self, data: bytes, **params: str) -> httpx.Response:
        return self.client.post(
            "/v1/artifacts",
            content=data,
            params=params,
            headers={"Content-Type": "application/gzip"},
        )


@pytest.fixture(scope="module")
def team(
    settings: Settings,
    engine: sa.Engine,
    api_url: str,
    keys: KeyBook,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Team]:
    name = f"team-{uuid.uuid4().hex[:8]}"
    key = keys.key(f"ci-{name}", tenant=name)
    allow_code(engine, name)
    worker = WorkerProcess(settings, f"tw-{name}", tmp_path_factory.mktemp("tw"), tenant=name)
    try:
        worker.wait_ready()
        with httpx.Client(base_url=api_url, timeout=30.0, headers=key.headers) as client:
            yield Team(name, key, client)
    finally:
        worker.stop()


def body_file(folder: Path, system: str) -> Path:
    path = folder / "candidate.json"
    path.write_text(json.dumps({"system": system, "manifest": manifest(), "plan": PLAN}))
    return path


# --------------------------------------------------------------------------- end to end


def test_a_broken_commits_artifact_is_blocked_while_the_previous_artifact_stays_allowed(
    team: Team, api_url: str, tmp_path: Path
) -> None:
    system = f"refunds-{uuid.uuid4().hex[:6]}"
    repo = write_code(tmp_path / "repo")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the careful agent")
    body = body_file(tmp_path, system)
    good = assaygate(
        team.key, api_url, "submit", str(body), "--code", str(repo), "--version", "1", "--wait"
    )
    assert good.returncode == 0, good.stderr
    good_digest = json.loads(good.stdout)["code"]
    assert good_digest == f"sha256:{pack(repo).sha256}"

    write_code(repo, broken=True)  # the commit that quietly broke idempotency
    git(repo, "commit", "-qam", "faster refunds")
    broken = assaygate(
        team.key, api_url, "submit", str(body), "--code", str(repo), "--version", "2", "--wait"
    )
    assert broken.returncode == 1, broken.stderr  # block
    broken_digest = json.loads(broken.stdout)["code"]
    assert broken_digest != good_digest

    # The deploy asks by digest: the previous artifact stays allowed, the broken one is blocked,
    # whatever the system's newest candidate is.
    asked = assaygate(team.key, api_url, "gate", system, "--artifact", good_digest, "--json")
    assert asked.returncode == 0, asked.stdout
    answer = json.loads(asked.stdout)
    assert answer["decision"] == "allow" and answer["version"] == "1"
    assert answer["artifacts"] == [
        {"name": "code", "digest": good_digest, "assurance": "executed", "source": "artifact"}
    ]
    # Code the gate ran needs no acceptance: the allow rests on `executed`.
    assured = answer["artifact_assurance"]
    assert (assured["assurance"], assured["met"], assured["accepted_by_policy"]) == (
        "executed",
        True,
        False,
    )
    asked = assaygate(team.key, api_url, "gate", system, "--artifact", str(repo))  # HEAD
    assert asked.returncode == 1, asked.stdout
    assert asked.stdout.startswith(f"block: {system} 2")
    by_version = team.client.get(f"/v1/gate/{system}", params={"version": "1"}).json()
    assert by_version["candidate_id"] == answer["candidate_id"]

    # Argo Rollouts' analysis, as deploy/ci/argo-analysis-template.yaml asks and reads it.
    for digest, result in ((good_digest, "successful"), (broken_digest, "failed")):
        assert argo_result(team.key, api_url, system, digest) == result
        by_query = team.client.get("/v1/gate", params={"system": system, "artifact": digest})
        assert by_query.json() == team.client.get(f"/v1/gate/{system}?artifact={digest}").json()

    # Offline, from the dossier: the good artifact is a subject of its dossier, the broken not.
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(team.client.get("/v1/keys").json()))
    dossier = tmp_path / "dossier.json"
    envelope = team.client.get(f"/v1/dossiers/{answer['dossier']['id']}/envelope").json()
    dossier.write_text(json.dumps(envelope))
    good_file = tmp_path / "good.tar.gz"
    good_file.write_bytes(team.client.get(f"/v1/artifacts/{good_digest}").content)
    verified = assaygate(
        team.key, api_url, "verify", str(dossier), "--keys", str(keys), "--artifact", str(good_file)
    )
    assert verified.returncode == 0, verified.stdout
    assert "ok   assurance: executed" in verified.stdout
    assert f"answer: allow: {system} 1\n" in verified.stdout  # the online gate's answer
    not_it = assaygate(
        team.key, api_url, "verify", str(dossier), "--keys", str(keys), "--artifact", str(repo)
    )
    assert not_it.returncode == 1 and "NOT VERIFIED: artifact failed" in not_it.stdout


def test_code_importing_a_deprecated_path_says_so_through_the_service_as_it_does_locally(
    team: Team, api_url: str, tmp_path: Path
) -> None:
    """A worker's stderr is no author's terminal (issue 47: the DeprecationWarning never showed
    through the service): the tenant's events carry it, and `submit --wait` prints it."""
    code = write_code(tmp_path / "code")
    agent = code / "agent.py"
    agent.write_text(agent.read_text() + "from service.core.sandbox import Task  # noqa\n")
    system = f"old-{uuid.uuid4().hex[:6]}"
    body = body_file(tmp_path, system)
    done = assaygate(team.key, api_url, "submit", str(body), "--code", str(code), "--wait")
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "deprecated path" in line]
    assert len(said) == 1, done.stderr
    prefix = "assaygate: note: the candidate's code uses a deprecated path: "
    assert said[0].startswith(prefix)
    line = said[0].removeprefix(prefix)
    assert "agent.py:" in line and "service.core.sandbox" in line
    candidate = json.loads(done.stdout)["id"]
    events = team.client.get(
        "/v1/events", params={"candidate_id": candidate, "kind": "target.deprecated"}
    ).json()["items"]
    assert len(events) == 1 and events[0]["data"]["warnings"] == [line]


def test_a_submitter_swapping_the_artifact_after_submission_cannot_change_what_ran(
    team: Team, tmp_path: Path
) -> None:
    careful = pack(write_code(tmp_path / "careful"))
    swap = pack(write_code(tmp_path / "swap", broken=True))
    stored = team.upload(careful.data)
    assert stored.status_code in (200, 201), stored.text
    digest = stored.json()["digest"]
    system = f"swap-{uuid.uuid4().hex[:6]}"
    submitted = team.client.post(
        "/v1/candidates",
        json={
            "system": system,
            "version": "1",
            "source_revision": "abc",
            "manifest": manifest(),
            "plan": PLAN,
            "code": digest,
        },
    )
    assert submitted.status_code == 202, submitted.text
    assert submitted.json()["code"] == digest
    # Other bytes under the same digest: refused, whatever the client claims.
    claimed = team.upload(swap.data, digest=digest)
    assert refused(claimed, 409, "digest")["code"] == "digest_mismatch"
    # The same bytes again: the same row, nothing new.
    again = team.upload(careful.data)
    assert again.status_code == 200 and again.json()["digest"] == digest
    assert again.json()["created"] is False
    done = wait_decided(team.client, submitted.json()["id"])
    assert done["decision"] == "allow", done
    assert team.client.get(f"/v1/artifacts/{digest}").content == careful.data
    gate = team.client.get(f"/v1/gate/{system}", params={"artifact": digest}).json()
    assert gate["artifacts"][0]["assurance"] == "executed"
    swapped = f"sha256:{swap.sha256}"
    missing = team.client.get(f"/v1/gate/{system}", params={"artifact": swapped})
    assert refused(missing, 404, "artifact")["code"] == "not_found"


def test_an_artifact_whose_stored_bytes_do_not_match_its_digest_is_refused_by_the_worker(
    team: Team, engine: sa.Engine, tmp_path: Path
) -> None:
    packed = pack(write_code(tmp_path / "code"))
    digest = team.upload(packed.data).json()["digest"]
    evil = pack(write_code(tmp_path / "evil", broken=True)).data
    with session_scope(engine) as session:
        row = session.exec(sa.select(ArtifactRow).where(ArtifactRow.sha256 == packed.sha256))
        stored = row.scalars().one()
        stored.content = evil  # someone with the database swaps the bytes
        session.add(stored)
    system = f"tamper-{uuid.uuid4().hex[:6]}"
    submitted = team.client.post(
        "/v1/candidates",
        json={
            "system": system,
            "version": "1",
            "source_revision": "abc",
            "manifest": manifest(),
            "plan": PLAN,
            "code": digest,
        },
    )
    assert submitted.status_code == 202, submitted.text
    failed = wait_decided(team.client, submitted.json()["id"])
    assert failed["status"] == "failed"
    assert f"artifact {digest}" in failed["error"] and "nothing of it runs" in failed["error"]
    gate = team.client.get(f"/v1/gate/{system}", params={"artifact": digest}).json()
    assert gate["decision"] == "hold" and gate["basis"] == "failed"
    assert gate["artifacts"][0]["assurance"] == "declared"  # it never ran


# ------------------------------------------------------------- assurance gates the answer


def test_a_declared_artifact_is_held_until_the_policy_accepts_it_and_then_the_allow_says_so(
    api_url: str, keys: KeyBook, settings: Settings, tmp_path: Path
) -> None:
    """The reference target runs no code: the artifact its candidate names stays `declared`.
    The assay allows the candidate, but the deploy asking by digest gets `hold` (reason
    `assurance`), online, from the CLI, through the Argo template and offline from the dossier;
    the tenant's admin cannot accept it, an operator's policy can, and then the allow says so."""
    tenant = f"declared-{uuid.uuid4().hex[:8]}"
    key = keys.key(f"ci-{tenant}", tenant=tenant)
    client = httpx.Client(base_url=api_url, timeout=30.0, headers=key.headers)
    digest, _ = upload(client, write_code(tmp_path / "code"))
    system = f"declared-{uuid.uuid4().hex[:6]}"
    candidate = submit(
        client, example("typed-repair"), system=system, version="1", plan=PLAN, code=digest
    )["id"]
    assert wait_decided(client, candidate)["decision"] == "allow"

    # Asked by version, the gate answers as it always did; asked by the bytes, it holds.
    assert client.get(f"/v1/gate/{system}").json()["decision"] == "allow"
    held = client.get(f"/v1/gate/{system}", params={"artifact": digest}).json()
    assert (held["decision"], held["basis"]) == ("hold", "assurance")
    assert held["reasons"][0]["code"] == "assurance"
    assert f"{digest} is declared" in held["reasons"][0]["message"]
    assert held["artifact_assurance"] == {
        "digest": digest,
        "assurance": "declared",
        "required": "executed",
        "met": False,
        "accepted_by_policy": False,
        "policy": EMPTY.digest(),  # the policy the dossier was signed under: none set
    }
    asked = assaygate(key, api_url, "gate", system, "--artifact", digest)
    assert asked.returncode == 2, asked.stdout
    assert asked.stdout.strip() == (
        f"hold: {system} 1 — assurance (declared; the policy requires executed)"
    )
    assert argo_result(key, api_url, system, digest) == "inconclusive"
    keys_file, dossier_file = tmp_path / "keys.json", tmp_path / "dossier.json"
    keys_file.write_text(json.dumps(client.get("/v1/keys").json()))

    def verified() -> subprocess.CompletedProcess[str]:
        envelope = client.get(f"/v1/candidates/{candidate}/dossier").json()["envelope"]
        dossier_file.write_text(json.dumps(envelope))
        return assaygate(
            key, api_url, "verify", str(dossier_file), "--keys", str(keys_file),
            "--artifact", digest,
        )  # fmt: skip

    offline = verified()
    assert offline.returncode == 1, offline.stdout
    assert "FAIL assurance: declared; the organisation's policy" in offline.stdout
    assert f"answer: {asked.stdout.strip()}" in offline.stdout  # the online gate's answer
    assert offline.stdout.strip().endswith("NOT VERIFIED: assurance failed")

    # Accepting weaker code is lowering the bar: not the tenant's admin's to do.
    lowered = client.put("/v1/policy", json={"accept_assurance": "declared"})
    assert lowered.status_code == 403, lowered.text
    assert lowered.json()["error"]["field"] == "accept_assurance"
    accepting = tmp_path / "policy.json"
    accepting.write_text(json.dumps({"accept_assurance": "declared"}))
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "policy", "set", tenant, str(accepting)],
        cwd=ROOT, env=settings.child_environment(), capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # The policy's change reopens the gate, as any change does, until an assay under it passes.
    reopened = client.get(f"/v1/gate/{system}", params={"artifact": digest}).json()
    assert reopened["decision"] == "reopened"
    assert client.post(f"/v1/candidates/{candidate}/rerun").status_code == 202
    assert wait_decided(client, candidate)["decision"] == "allow"

    allowed = client.get(f"/v1/gate/{system}", params={"artifact": digest}).json()
    assert allowed["decision"] == "allow" and allowed["basis"] == "assay"
    policy = client.get("/v1/policy").json()["digest"]
    assert allowed["artifact_assurance"] == {
        "digest": digest,
        "assurance": "declared",
        "required": "declared",
        "met": True,
        "accepted_by_policy": True,
        "policy": policy,
    }
    asked = assaygate(key, api_url, "gate", system, "--artifact", digest)
    assert asked.returncode == 4, asked.stdout  # an allow, said apart from one on executed code
    assert asked.stdout.strip() == (
        f"allow: {system} 1 — artifact declared, not executed: accepted by the organisation's "
        "policy"
    )
    offline = verified()
    assert offline.returncode == 0, offline.stdout
    assert "ok   assurance: declared, not executed: accepted by the organisation's" in (
        offline.stdout
    )
    assert f"answer: {asked.stdout.strip()}" in offline.stdout
    client.close()


def test_code_a_worker_ran_is_allowed_by_its_digest_with_nothing_to_accept(
    api_url: str, keys: KeyBook, engine: sa.Engine, tmp_path: Path
) -> None:
    """The rule's other side, on a machine whose workers cannot run tenant code (no
    bubblewrap): what a worker records once its shards ran the artifact (`subjects_after`,
    `executed`) is written here directly; the end-to-end test above runs it for real."""
    tenant = f"ran-{uuid.uuid4().hex[:8]}"
    key = keys.key(f"ci-{tenant}", tenant=tenant)
    with httpx.Client(base_url=api_url, timeout=30.0, headers=key.headers) as client:
        digest, packed = upload(client, write_code(tmp_path / "code"))
        system = f"ran-{uuid.uuid4().hex[:6]}"
        candidate = submit(
            client, example("typed-repair"), system=system, version="1", plan=PLAN, code=digest
        )["id"]
        assert wait_decided(client, candidate)["decision"] == "allow"
        with Session(engine) as session:
            ran = ArtifactSubject(CODE, packed.sha256, Assurance.EXECUTED, Source.ARTIFACT)
            set_subjects(session, uuid.UUID(candidate), [ran])
            session.commit()
        answer = client.get(f"/v1/gate/{system}", params={"artifact": digest}).json()
        assert (answer["decision"], answer["basis"]) == ("allow", "assay")
        assured = answer["artifact_assurance"]
        assert (assured["assurance"], assured["required"]) == ("executed", "executed")
        assert assured["met"] and not assured["accepted_by_policy"]
    asked = assaygate(key, api_url, "gate", system, "--artifact", digest)
    assert asked.returncode == 0, asked.stdout
    assert asked.stdout.strip() == f"allow: {system} 1"
    assert argo_result(key, api_url, system, digest) == "successful"


# ------------------------------------------------------------------ per tenant, by name


@pytest.mark.parametrize(
    "code",
    [
        "sha256:" + "AB" * 32,
        "sha512:" + "ab" * 32,
        "ab" * 32,
        "sha256:../../" + "ab" * 29,
        "refunds/sha256:" + "ab" * 32,
    ],
)
def test_a_candidate_naming_code_by_anything_but_a_digest_is_refused_naming_code(
    client: httpx.Client, unchanged: None, code: str
) -> None:
    body = {"source_revision": "x", "manifest": example("typed"), "code": code}
    refused(client.post("/v1/candidates", json=body), 422, "code")


def test_a_digest_is_the_tenants_own_another_tenants_digest_is_not_found(
    team: Team, client: httpx.Client, tmp_path: Path
) -> None:
    """A digest collision attempt by name: another tenant that learned a digest can neither
    read those bytes nor have its candidate run them."""
    packed = pack(write_code(tmp_path / "code"))
    digest = team.upload(packed.data).json()["digest"]
    assert refused(client.get(f"/v1/artifacts/{digest}"), 404, "digest")["code"] == "not_found"
    body = {"source_revision": "x", "manifest": example("typed"), "code": digest}
    error = refused(client.post("/v1/candidates", json=body), 422, "code")
    assert "has no artifact" in error["message"] and "POST /v1/artifacts" in error["message"]


def test_upload_answers_the_digest_the_service_computed_and_refuses_what_it_cannot_take(
    team: Team,
) -> None:
    data = archive([Entry("agent.py", "file", b"run = None\n")])
    first = team.upload(data)
    assert first.status_code == 201, first.text
    shown = first.json()
    assert shown["digest"].startswith("sha256:") and shown["size"] == len(data)
    assert first.headers["location"] == f"/v1/artifacts/{shown['digest']}"
    assert team.upload(data).json() == {**shown, "created": False}
    as_json = team.client.post("/v1/artifacts", json={"bytes": "x"})
    assert refused(as_json, 415, "Content-Type")["code"] == "unsupported_media_type"
    bad_claim = team.upload(data, digest="sha256:" + "AB" * 32)
    refused(bad_claim, 422, "digest")
    bad_read = team.client.get("/v1/artifacts/sha256:" + "g" * 64)
    refused(bad_read, 422, "digest")
    bad_gate = team.client.get("/v1/gate/any", params={"artifact": "sha256:short"})
    refused(bad_gate, 422, "artifact")


def test_an_upload_past_the_cap_is_413_whether_or_not_it_declares_its_length(
    settings: Settings,
) -> None:
    capped = settings.model_copy(update={"artifact_max_bytes": 4096})
    key_book = KeyBook(create_engine_for(capped))
    key = key_book.key("cap-ci", tenant=f"cap-{uuid.uuid4().hex[:6]}")
    with TestClient(create_app(capped)) as api:
        headers = {**key.headers, "Content-Type": "application/gzip"}
        declared = api.post("/v1/artifacts", content=b"x" * 5000, headers=headers)
        assert refused(declared, 413, "body")["code"] == "body_too_large"

        def chunks() -> Iterator[bytes]:
            for _ in range(5):
                yield b"x" * 1000

        streamed = api.post("/v1/artifacts", content=chunks(), headers=headers)
        assert refused(streamed, 413, "body")["code"] == "body_too_large"
        fits = api.post("/v1/artifacts", content=archive([Entry("a", "file")]), headers=headers)
        assert fits.status_code == 201, fits.text


def test_bytes_a_worker_would_not_unpack_are_refused_at_upload_naming_the_rule_and_not_stored(
    settings: Settings, tmp_path: Path
) -> None:
    """Each archive attack (and bytes that are no archive) is 422 naming `body` and the rule the
    worker's unpack would name, and the digest is stored nowhere; `submit --code` says it in
    one line before uploading anything."""
    capped = settings.model_copy(
        update={"artifact_unpacked_max_bytes": LIMITS.max_bytes, "artifact_max_entries": 100}
    )
    key = KeyBook(create_engine_for(capped)).key("bad-ci", tenant=f"bad-{uuid.uuid4().hex[:6]}")
    headers = {**key.headers, "Content-Type": "application/gzip"}
    with TestClient(create_app(capped)) as api:
        for attack, (build, rule) in ATTACKS.items():
            data = build()
            error = refused(api.post("/v1/artifacts", content=data, headers=headers), 422, "body")
            assert rule in error["message"] and "would unpack" in error["message"], attack
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            refused(api.get(f"/v1/artifacts/{digest}", headers=key.headers), 404, "digest")
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(ATTACKS["a path up and out"][0]())
    manifest_file = tmp_path / "m.json"
    manifest_file.write_text(json.dumps(example("typed")))
    done = assaygate(key, "http://127.0.0.1:9", "submit", str(manifest_file), "--code", str(bad))
    assert done.returncode == 3, done.stderr  # `submit` is a CI command: every error is 3
    assert done.stderr.strip().splitlines() == [
        "assaygate: error: --code: archive entry '../x': a `..` component leaves the folder"
    ]


def create_engine_for(settings: Settings) -> sa.Engine:
    from service.db.session import make_engine

    return make_engine(settings)
