"""The Kubernetes manifests under deploy/k8s: every kustomization renders with `kubectl
kustomize` (offline), every object validates against the Kubernetes schemas
(`kubernetes-validate`), KEDA's objects have the fields KEDA reads and measure the queue their
workers consume, every variable they set is a real setting, and the probes and commands are the
ones the service really has."""

from __future__ import annotations

import ipaddress
import shutil
import uuid
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import redis
import yaml
from kubernetes_validate.utils import all_versions

from service.asgi import create_app
from service.cli import build_parser
from service.http.access import PUBLIC
from service.http.dispatch import Dispatcher
from service.settings import Settings
from tests.support.k8s import (
    DIGEST,
    K8S,
    KUBECTL,
    REGISTRY,
    containers,
    environment,
    of_kind,
    render,
    settings_of,
)
from tests.support.service import REDIS_URL, ROOT

# Kustomizations (a Component is not built alone: the overlays include it).
KUSTOMIZATIONS = sorted(
    p.parent
    for p in K8S.rglob("kustomization.yaml")
    if yaml.safe_load(p.read_text())["kind"] == "Kustomization"
)
OVERLAYS = [k for k in KUSTOMIZATIONS if k.parent.name == "overlays"]
# The oldest Kubernetes the manifests claim (securityContext.appArmorProfile is 1.30's), and the
# newest the library knows.
KUBERNETES_VERSIONS = ("1.30.0", all_versions()[-1])
KEDA = "keda.sh/v1alpha1"
# Custom resources the schemas do not cover; their fields are checked below and in
# test_k8s_apply.py.
CUSTOM = (KEDA, "monitoring.coreos.com/v1")

pytestmark = pytest.mark.skipif(
    shutil.which(KUBECTL) is None,
    reason="kubectl is not installed (`make kubectl` installs Debian's package)",
)


def name(path: Path) -> str:
    return str(path.relative_to(K8S)) if path.is_relative_to(K8S) else path.name


PRODUCTION = K8S / "overlays" / "production"


def filled(filled_k8s: Path, overlay: Path) -> Path:
    """The same overlay in the copy an operator filled in (tests/deploy/conftest.py)."""
    return filled_k8s / overlay.relative_to(K8S)


def test_every_overlay_is_found() -> None:
    assert {name(k) for k in OVERLAYS} == {"overlays/production", "overlays/tenant-pool"}
    assert {name(k) for k in KUSTOMIZATIONS} >= {"base", "tenant-pool"}


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS, ids=name)
def test_every_kustomization_renders_and_validates_against_the_kubernetes_schemas(
    kustomization: Path,
) -> None:
    objects = render(kustomization)
    assert objects
    for o in objects:
        if o["apiVersion"] in CUSTOM:
            continue  # a CRD: no schema in the library; its fields are checked by hand
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(o, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                where = ".".join(str(p) for p in error.path)
                pytest.fail(f"{name(kustomization)}: {o['kind']} {o['metadata']['name']}: {where}")


def test_the_production_overlay_runs_the_api_shared_workers_a_tenant_pool_and_the_migration(
    filled_k8s: Path,
) -> None:
    objects = render(filled(filled_k8s, PRODUCTION))
    deployments = {d["metadata"]["name"] for d in of_kind(objects, "Deployment")}
    assert deployments == {"assaygate-api", "assaygate-worker", "assaygate-tenant-worker-acme"}
    assert [j["metadata"]["name"] for j in of_kind(objects, "Job")] == ["assaygate-migrate"]
    (namespace,) = of_kind(objects, "Namespace")
    assert {o["metadata"].get("namespace") for o in objects if o is not namespace} == {
        namespace["metadata"]["name"]
    }
    # The operator creates the Secrets; the repository holds none.
    assert of_kind(objects, "Secret") == []
    # The image the operator pushed, by the digest the push printed, in every pod.
    for _, container in containers(objects):
        assert container["image"] == f"{REGISTRY}@{DIGEST}"


@pytest.mark.parametrize("kustomization", OVERLAYS, ids=name)
def test_every_variable_the_manifests_set_is_a_real_setting_with_a_valid_value(
    kustomization: Path, filled_k8s: Path
) -> None:
    objects = render(filled(filled_k8s, kustomization))
    if name(kustomization) == "overlays/tenant-pool":
        # The pool is applied beside the base, whose ConfigMap it reads.
        objects = render(filled(filled_k8s, PRODUCTION))
    fields = set(Settings.model_fields)
    for owner, container in containers(objects):
        env = environment(objects, container)
        for variable in env:
            assert variable.startswith("ASSAYGATE_"), (owner, variable)
            assert variable[len("ASSAYGATE_") :].lower() in fields, (owner, variable)
        settings_of(env)  # the values parse as the service parses them


def test_each_scaled_object_measures_the_redis_list_its_workers_consume(filled_k8s: Path) -> None:
    objects = render(filled(filled_k8s, PRODUCTION))
    deployments = {d["metadata"]["name"]: d for d in of_kind(objects, "Deployment")}
    auths = {a["metadata"]["name"]: a for a in of_kind(objects, "TriggerAuthentication")}
    scaled = of_kind(objects, "ScaledObject")
    assert {s["spec"]["scaleTargetRef"]["name"] for s in scaled} == {
        "assaygate-worker",
        "assaygate-tenant-worker-acme",
    }
    queues = set()
    for s in scaled:
        assert s["apiVersion"] == KEDA
        spec = s["spec"]
        assert set(spec) <= {
            "scaleTargetRef",
            "minReplicaCount",
            "maxReplicaCount",
            "pollingInterval",
            "cooldownPeriod",
            "idleReplicaCount",
            "fallback",
            "advanced",
            "triggers",
        }
        assert 0 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
        assert spec["pollingInterval"] > 0 and spec["cooldownPeriod"] > 0
        (deployment,) = [deployments[spec["scaleTargetRef"]["name"]]]
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        settings = settings_of(environment(objects, container))
        (trigger,) = spec["triggers"]
        assert trigger["type"] == "redis"
        metadata = trigger["metadata"]
        assert set(metadata) <= {"listName", "listLength", "activationListLength", "databaseIndex"}
        # KEDA reads every metadata value as a string.
        assert all(isinstance(v, str) for v in metadata.values()), metadata
        assert int(metadata["listLength"]) >= 1
        # Celery's Redis transport keeps a queue's waiting messages in a list of its name.
        assert metadata["listName"] == settings.worker_queue
        assert not settings.redis_key_prefix
        assert metadata["databaseIndex"] == settings.broker_url.rsplit("/", 1)[1]
        auth = auths[trigger["authenticationRef"]["name"]]
        assert [(r["parameter"], r["name"]) for r in auth["spec"]["secretTargetRef"]] == [
            ("address", "assaygate-stores")
        ]
        queues.add(metadata["listName"])
    assert queues == {"assaygate", "assaygate.tenant.acme"}


def test_the_api_probes_hit_public_routes_the_api_serves(tmp_path: Path) -> None:
    # What the API really serves: its OpenAPI document lists every route of every router.
    paths = create_app(Settings(data_dir=tmp_path)).openapi()["paths"]
    served = {(method.upper(), path) for path, item in paths.items() for method in item}
    objects = render(PRODUCTION)
    (api,) = [d for d in of_kind(objects, "Deployment") if d["metadata"]["name"] == "assaygate-api"]
    (container,) = api["spec"]["template"]["spec"]["containers"]
    probes = {kind: container[kind]["httpGet"] for kind in ("livenessProbe", "readinessProbe")}
    assert probes["livenessProbe"]["path"] == "/healthz"
    assert probes["readinessProbe"]["path"] == "/readyz"
    for probe in [*probes.values(), container["startupProbe"]["httpGet"]]:
        assert ("GET", probe["path"]) in served
        assert ("GET", probe["path"]) in PUBLIC  # a probe carries no key
        (port,) = [p for p in container["ports"] if p["name"] == probe["port"]]
    args = build_parser().parse_args(container["command"][1:])
    assert (args.command, args.worker, args.migrate) == ("serve", False, False)
    assert (args.host, args.port) == ("0.0.0.0", port["containerPort"])
    (service,) = of_kind(objects, "Service")
    assert (
        service["spec"]["selector"].items() <= api["spec"]["template"]["metadata"]["labels"].items()
    )
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]


def test_the_migration_job_and_the_workers_run_real_commands() -> None:
    objects = render(PRODUCTION)
    commands = {owner: c["command"] for owner, c in containers(objects)}
    job = build_parser().parse_args(commands.pop("assaygate-migrate")[1:])
    assert (job.command, job.db_command) == ("db", "upgrade")
    del commands["assaygate-api"]
    assert set(commands) == {"assaygate-worker", "assaygate-tenant-worker-acme"}
    assert all(c == ["python", "-m", "worker"] for c in commands.values())
    assert (ROOT / "worker" / "__main__.py").is_file()


def test_the_tenant_pool_runs_its_tenant_on_its_own_account_and_states_the_sandbox_needs() -> None:
    objects = render(K8S / "overlays" / "tenant-pool")
    (pool,) = of_kind(objects, "Deployment")
    pod = pool["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    own = {v["name"]: v.get("value") for v in container["env"]}
    assert own["ASSAYGATE_WORKER_TENANT"] == "acme"
    (account,) = of_kind(objects, "ServiceAccount")
    assert pod["serviceAccountName"] == account["metadata"]["name"] == pool["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is False
    # Bubblewrap's privileged mode: root with what it needs named one by one, never a
    # privileged container.
    security = container["securityContext"]
    assert security["runAsUser"] == 0 and security["privileged"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert set(security["capabilities"]["add"]) == SANDBOX_CAPABILITIES
    assert security["allowPrivilegeEscalation"] is False
    # Only the pool holds these: the API, the shared workers and the migration meet the Pod
    # Security level `restricted`.
    for workload in render(K8S / "base"):
        if workload["kind"] in ("Deployment", "Job"):
            assert restricted(workload) == [], workload["metadata"]["name"]


# What bubblewrap's privileged mode and the worker around it use (deploy/k8s/tenant-pool).
SANDBOX_CAPABILITIES = {
    *("SYS_ADMIN", "NET_ADMIN", "SETUID", "SETGID", "SETPCAP", "SYS_CHROOT"),
    *("CHOWN", "FOWNER", "DAC_OVERRIDE", "KILL"),
}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral"}
RESTRICTED_VOLUMES |= {"persistentVolumeClaim", "projected", "secret"}


def restricted(workload: dict[str, Any]) -> list[str]:
    """What of a workload's pod breaks the Pod Security Standard `restricted` (the fields these
    manifests use: user, escalation, capabilities, seccomp, AppArmor, volume types)."""
    pod = workload["spec"]["template"]["spec"]
    broken: list[str] = []
    pod_security = pod.get("securityContext", {})
    if pod_security.get("seccompProfile", {}).get("type") not in ("RuntimeDefault", "Localhost"):
        broken.append("pod seccompProfile")
    for volume in pod.get("volumes", []):
        if not set(volume) - {"name"} <= RESTRICTED_VOLUMES:
            broken.append(f"volume {volume['name']}")
    for c in pod["containers"]:
        own = c.get("securityContext", {})
        if own.get("runAsNonRoot", pod_security.get("runAsNonRoot")) is not True:
            broken.append(f"{c['name']}: runAsNonRoot")
        if own.get("runAsUser", pod_security.get("runAsUser")) == 0:
            broken.append(f"{c['name']}: runAsUser 0")
        if own.get("allowPrivilegeEscalation") is not False:
            broken.append(f"{c['name']}: allowPrivilegeEscalation")
        if own.get("privileged"):
            broken.append(f"{c['name']}: privileged")
        capabilities = own.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            broken.append(f"{c['name']}: capabilities not dropped")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            broken.append(f"{c['name']}: capabilities added")
        if own.get("appArmorProfile", {}).get("type") == "Unconfined":
            broken.append(f"{c['name']}: AppArmor unconfined")
    return broken


def test_the_tenant_pool_mounts_no_signing_key_and_names_none(filled_k8s: Path) -> None:
    # Tenant code's host never holds what makes a dossier believable: the shared workers seal.
    for overlay in (K8S / "overlays" / "tenant-pool", PRODUCTION):
        objects = render(filled(filled_k8s, overlay))
        pools = [
            d
            for d in of_kind(objects, "Deployment")
            if d["metadata"]["name"].startswith("assaygate-tenant-worker")
        ]
        assert len(pools) == 1, name(overlay)
        pod = pools[0]["spec"]["template"]["spec"]
        claims = {
            v["persistentVolumeClaim"]["claimName"]
            for v in pod["volumes"]
            if "persistentVolumeClaim" in v
        }
        assert claims == {"assaygate-injector-public"}, claims
        (container,) = pod["containers"]
        mounted = {m["mountPath"] for m in container["volumeMounts"]}
        assert not any(m.startswith("/keys/dossier") for m in mounted), mounted
        if overlay == PRODUCTION:  # with the settings every process reads
            keys = settings_of(environment(objects, container)).keys_dir
            assert keys is not None and not str(keys).startswith("/keys/"), keys


def test_the_tenant_pool_breaks_restricted_only_where_bubblewrap_needs_it() -> None:
    # Its namespace needs the level `privileged` (docs/operations.md): root, the added
    # capabilities and AppArmor unconfined are the whole of it.
    (pool,) = of_kind(render(K8S / "overlays" / "tenant-pool"), "Deployment")
    assert sorted(restricted(pool)) == [
        "worker: AppArmor unconfined",
        "worker: capabilities added",
        "worker: runAsNonRoot",
        "worker: runAsUser 0",
    ]


def test_the_tenant_pools_network_policy_lets_it_reach_only_the_stores_dns_and_public_https() -> (
    None
):
    objects = render(K8S / "overlays" / "tenant-pool")
    (pool,) = of_kind(objects, "Deployment")
    (policy,) = of_kind(objects, "NetworkPolicy")
    spec = policy["spec"]
    labels = pool["spec"]["template"]["metadata"]["labels"]
    assert spec["podSelector"]["matchLabels"].items() <= labels.items()
    assert spec["podSelector"]["matchLabels"]["assaygate.dev/tenant"] == "acme"
    assert sorted(spec["policyTypes"]) == ["Egress", "Ingress"]
    assert spec["ingress"] == []  # nothing connects in
    ports = {(p["protocol"], p["port"]) for rule in spec["egress"] for p in rule["ports"]}
    assert ports == {("TCP", 5432), ("TCP", 6379), ("UDP", 53), ("TCP", 53), ("TCP", 443)}
    # Not the API (port 8000), not the cluster's private ranges, not the metadata address.
    (public,) = [r for r in spec["egress"] if any("ipBlock" in t for t in r["to"])]
    (block,) = [t["ipBlock"] for t in public["to"]]
    assert block["cidr"] == "0.0.0.0/0"
    excepted = [ipaddress.ip_network(c) for c in block["except"]]
    for address in ("10.1.2.3", "172.20.0.5", "192.168.1.1", "169.254.169.254", "100.64.0.1"):
        assert any(ipaddress.ip_address(address) in n for n in excepted), address


@pytest.mark.integration
@pytest.mark.parametrize("tenant", [None, "acme"])
def test_the_api_queues_shards_in_the_redis_list_keda_measures(tenant: str | None) -> None:
    # The list's name is the queue's (Settings.worker_queue, which the ScaledObjects name above):
    # what the API sends waits there, one entry a shard, until a worker takes it. A queue of its
    # own on the tests' Redis database, so no other test's messages count.
    settings = Settings(
        broker_url=REDIS_URL, queue=f"assaygate-k8s-{uuid.uuid4().hex[:8]}", worker_tenant=tenant
    )
    client = redis.Redis.from_url(REDIS_URL)
    try:
        queue = settings.tenant_queue(tenant) if tenant else None
        Dispatcher(settings).enqueue_shards(uuid.uuid4(), [0, 1, 2], queue=queue)
        assert client.llen(settings.worker_queue) == 3
    finally:
        client.delete(settings.worker_queue)
        client.close()


def test_a_non_root_pod_can_read_the_secrets_it_mounts() -> None:
    # Kubernetes writes a Secret's files as root's, in the pod's fsGroup: a pod running as the
    # image's user reads them only through the group bits.
    for workload in render(PRODUCTION):
        if workload["kind"] not in ("Deployment", "Job"):
            continue
        pod = workload["spec"]["template"]["spec"]
        if pod["securityContext"].get("runAsNonRoot"):
            for volume in pod.get("volumes", []):
                if "secret" in volume:
                    assert pod["securityContext"]["fsGroup"] == 10001
                    assert volume["secret"]["defaultMode"] & 0o040, volume
