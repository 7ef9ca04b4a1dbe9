"""Assaygate across hosts, as deploy/k8s runs it: the API, two shared workers and a tenant's
worker, each in a network namespace of its own (tests/support/netns.py), and PostgreSQL and Redis
on a host of their own, all reached over the bridge's addresses; no process shares a loopback
with a store or with the API. Every process gets only what its pod gets: its own data folder,
the shared keys (the ReadWriteMany volumes; the tenant's worker only the injector's public index,
never the dossier-signing key), the API alone the injector's private ring and the session secret,
the API and the tenant's worker the key of tenants' secrets. The migration runs
as the Job runs it, the operator's commands as `assaygate` on the API's host.

An assay submitted through the API comes out exact: the decision and every fault's counts equal
to the embedded run of the same manifest, plan and seed, on the shared workers for a remote
manifest and on the tenant's worker (in the sandbox) for its code."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from service.core.faults.plan import parse_plan
from service.core.shards.assay import run_assay
from service.core.system.manifest import parse_manifest
from tests.support.netns import Host, Network, Stores, namespaces_unavailable
from tests.support.reports import figures
from tests.support.service import ROOT, example, tenant_code, wait_decided, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TENANT = "acme-multihost"
# Remote work spread over the shared workers: every fault of the catalogue in shards of 100.
PLAN: dict[str, Any] = {"trials": 200, "seed": 1414}
TRIALS_PER_SHARD = 100
# The tenant's code: a python target, run in the sandbox on the tenant's worker.
CODE_PLAN: dict[str, Any] = {"trials": 2, "seed": 3, "modes": ["subject_swap"]}
PYTHON_TARGET = {"kind": "python", "entrypoint": "tests.worker.agents.rogue:agent"}


@dataclass
class Cluster:
    network: Network
    api: Host
    url: str
    headers: dict[str, str]
    logs: Path


class Pods:
    """The processes of the cluster, each on its host, stopped together."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[tuple[str, Any, Any]] = []

    def start(self, host: Host, name: str, argv: list[str], env: dict[str, str]) -> Path:
        log_path = self.logs / f"{name}.log"
        log = log_path.open("wb")
        self.started.append((name, host.popen(argv, env=env, cwd=ROOT, log=log), log))
        return log_path

    def stop(self) -> None:
        # All at once, as a namespace is deleted: each worker's warm shutdown runs side by side.
        running = [p for _, p, _ in self.started if p.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        for process in running:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for _, _, log in self.started:
            log.close()


def pod_env(stores: Stores, shared: Path, data: Path, **own: str) -> dict[str, str]:
    """A pod's environment: none of the test run's ASSAYGATE_* settings, the stores by their
    bridge addresses, its own data folder, the shared keys."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    env.update(
        ASSAYGATE_DATABASE_URL=stores.database_url,
        ASSAYGATE_BROKER_URL=stores.broker_url,
        ASSAYGATE_DATA_DIR=str(data),
        ASSAYGATE_KEYS_DIR=str(shared / "dossier-keys"),
        ASSAYGATE_INJECTOR_PUBLIC_DIR=str(shared / "injector-public"),
        ASSAYGATE_TRIALS_PER_SHARD=str(TRIALS_PER_SHARD),
        ASSAYGATE_SUBMISSIONS_PER_MINUTE="0",
        ASSAYGATE_LOG_LEVEL="INFO",
        ASSAYGATE_LOG_FORMAT="json",
        **own,
    )
    data.mkdir(parents=True, exist_ok=True)
    return env


def operator(host: Host, env: dict[str, str], *args: str) -> dict[str, Any]:
    done = host.run([sys.executable, "-m", "service.cli", *args], env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    # JSON where the command answers with it (`keys create`); `db upgrade` says what it did.
    text = done.stdout.strip()
    found: dict[str, Any] = json.loads(text) if text.startswith("{") else {}
    return found


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # Asked here, not at import: the question creates (and deletes) a namespace.
    unavailable = namespaces_unavailable() if sys.platform == "linux" else "Linux only"
    if unavailable is not None:
        pytest.skip(f"no separate hosts here: {unavailable}")
    logs = Path(tempfile.mkdtemp(prefix="assaygate-multihost-"))
    network = Network()
    pods = Pods(logs)
    stores: Stores | None = None
    try:
        stores = Stores(network.host("stores"))
        stores.start()
        api = network.host("api")
        shared = logs / "volumes"
        secrets_key = str(shared / "tenant-secrets" / "secrets.key")
        api_env = pod_env(
            stores,
            shared,
            logs / "api",
            ASSAYGATE_INJECTOR_KEYS_DIR=str(shared / "injector-keys"),
            ASSAYGATE_SESSION_SECRET_FILE=str(logs / "api" / "secrets" / "session.secret"),
            ASSAYGATE_SECRETS_KEY_FILE=secrets_key,
        )
        # The migration Job, then the API as its Deployment runs it.
        operator(api, api_env, "db", "upgrade")
        port = "8000"
        argv = [sys.executable, "-m", "service.cli", "serve", "--no-worker", "--no-migrate"]
        pods.start(api, "api", [*argv, "--host", api.address, "--port", port], api_env)
        url = f"http://{api.address}:{port}"

        # The workers start beside the API, as their Deployments would.
        workers = []
        for n in (1, 2):
            host = network.host(f"worker-{n}")
            env = pod_env(stores, shared, logs / host.role, ASSAYGATE_WORKER_CONCURRENCY="1")
            hostname = f"--hostname={host.role}@%h"
            workers.append(
                pods.start(host, host.role, [sys.executable, "-m", "worker", hostname], env)
            )
        tenant = network.host("tenant")
        tenant_env = pod_env(
            stores,
            shared,
            logs / "tenant",
            ASSAYGATE_WORKER_CONCURRENCY="1",
            ASSAYGATE_WORKER_TENANT=TENANT,
            ASSAYGATE_TENANT_CODE_DIR=str(tenant_code()),
            ASSAYGATE_SECRETS_KEY_FILE=secrets_key,
        )
        # The tenant's pod mounts no signing key: the shared workers seal what it runs.
        tenant_env["ASSAYGATE_KEYS_DIR"] = str(logs / "tenant" / "no-keys")
        argv = [sys.executable, "-m", "worker", "--hostname=tenant@%h"]
        workers.append(pods.start(tenant, "tenant", argv, tenant_env))

        minted = operator(
            api,
            api_env,
            *("keys", "create", "--tenant", TENANT, "--role", "submitter"),
            *("--service-account", "ci"),
        )
        operator(api, api_env, "tenants", "allow-code", TENANT, "--by", "ops")
        wait_for(lambda: ready(url), 60.0, "the API ready on its host")
        for log in workers:
            wait_for(lambda log=log: b" ready." in log.read_bytes(), 60.0, f"{log.stem} ready")
        yield Cluster(network, api, url, {"Authorization": f"Bearer {minted['key']}"}, logs)
    finally:
        pods.stop()
        if stores is not None:
            stores.stop()
        network.remove()
        shutil.rmtree(logs, ignore_errors=True)


def ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def shard_workers(cluster: Cluster, assay_id: str) -> list[str]:
    """Who stored each shard, read as an operator reads the database (over the bridge)."""
    address = cluster.network.hosts[0].address
    with psycopg.connect(f"postgresql://postgres@{address}:5432/assaygate") as connection:
        rows = connection.execute(
            "SELECT worker FROM assay_shard WHERE assay_id = %s ORDER BY shard_index",
            (uuid.UUID(assay_id),),
        ).fetchall()
    return [str(row[0]) for row in rows]


def submit(cluster: Cluster, manifest: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    body = {
        "system": f"multihost-{uuid.uuid4().hex[:8]}",
        "source_revision": "abc123",
        "manifest": manifest,
        "plan": plan,
    }
    with httpx.Client(base_url=cluster.url, headers=cluster.headers, timeout=30.0) as client:
        accepted = client.post("/v1/candidates", json=body)
        assert accepted.status_code == 202, accepted.text
        candidate = accepted.json()
        try:
            done = wait_decided(client, candidate["id"], timeout=150.0)
        except TimeoutError:
            pytest.fail(f"not decided in 150 s; the pods' logs end:\n{tails(cluster)}")
        assert done["status"] == "done", (done, tails(cluster))
        report: dict[str, Any] = client.get(f"/v1/assays/{candidate['assay_id']}").json()["report"]
    return {"decision": done["decision"], "report": report, "assay_id": candidate["assay_id"]}


def tails(cluster: Cluster) -> str:
    """The last lines of every pod's log (the folder goes with the cluster)."""
    return "\n".join(
        f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        for log in sorted(cluster.logs.glob("*.log"))
    )


def assert_exact(found: dict[str, Any], expected: dict[str, Any]) -> None:
    assert found["decision"] == expected["decision"]
    counts = {f["id"]: f["signature"]["counts"] for f in found["report"]["faults"]}
    assert counts == {f["id"]: f["signature"]["counts"] for f in expected["faults"]}
    assert figures(found["report"]) == figures(expected)


def test_an_assay_through_the_api_on_two_worker_hosts_is_exact_end_to_end(
    cluster: Cluster,
) -> None:
    found = submit(cluster, example("typed"), PLAN)
    expected = run_assay(parse_manifest(example("typed")), parse_plan(PLAN)).to_dict()
    assert_exact(found, expected)
    ran = shard_workers(cluster, found["assay_id"])
    assert len(ran) > 2
    # Only the shared workers took remote shards, each from its own host.
    assert {w.split("@")[0] for w in ran} <= {"worker-1", "worker-2"}, ran


def test_a_tenants_code_runs_on_its_own_worker_host_exactly_as_embedded(cluster: Cluster) -> None:
    manifest = {**example("typed"), "target": PYTHON_TARGET}
    found = submit(cluster, manifest, CODE_PLAN)
    ran = shard_workers(cluster, found["assay_id"])
    assert ran and all(w.startswith("tenant@") for w in ran), ran
    # The embedded run: the same manifest through the local `assaygate assay`, the code run as
    # the user's own processes from the checkout.
    path = cluster.logs / "code-manifest.json"
    path.write_text(json.dumps(manifest))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    argv = [sys.executable, "-m", "service.cli", "assay", str(path), "--json"]
    argv += ["--trials", "2", "--seed", "3", "--mode", "subject_swap"]
    local = cluster.api.run(argv, env=env, cwd=ROOT)
    assert local.returncode in (0, 1, 2), local.stderr
    assert_exact(found, json.loads(local.stdout))
    # What confined it is the worker's record, never the local run's.
    assert found["report"]["sandbox"] and "sandbox" not in json.loads(local.stdout)


def test_no_host_reaches_a_store_or_the_api_over_its_own_loopback(cluster: Cluster) -> None:
    # What "no process assumes loopback" rests on: on a worker's host, 127.0.0.1 holds none of
    # the stores' or the API's ports, while their bridge addresses answer.
    worker = next(h for h in cluster.network.hosts if h.role == "worker-1")
    probe = (
        "import socket, sys\n"
        "for host, port in [(a, int(p)) for a, p in (x.split(':') for x in sys.argv[1:])]:\n"
        "    s = socket.socket(); s.settimeout(2)\n"
        "    print(host, port, s.connect_ex((host, port)) == 0)\n"
    )
    stores = cluster.network.hosts[0].address
    targets = [f"127.0.0.1:{p}" for p in (5432, 6379, 8000)]
    targets += [f"{stores}:5432", f"{stores}:6379", f"{cluster.api.address}:8000"]
    done = worker.run([sys.executable, "-c", probe, *targets], env=dict(os.environ), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    answers = {
        " ".join(line.split()[:2]): line.endswith("True") for line in done.stdout.splitlines()
    }
    assert answers == {
        "127.0.0.1 5432": False,
        "127.0.0.1 6379": False,
        "127.0.0.1 8000": False,
        f"{stores} 5432": True,
        f"{stores} 6379": True,
        f"{cluster.api.address} 8000": True,
    }
