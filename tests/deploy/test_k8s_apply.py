"""deploy/k8s applies as rendered (issue 47): what an operator must fill in is a placeholder every
process refuses at start, and filled in once it reaches every field that needs it; the image runs
by digest; the tenant's label is its name everywhere; the namespace admits what runs in it and no
more; and the Ingress, the disruption budgets, the ServiceMonitor and the worker probes point at
objects, ports, Secrets and commands that exist."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from service.asgi import create_app
from service.http.access import METRICS
from service.settings import Settings
from tests.deploy.test_k8s import restricted
from tests.support.k8s import (
    IMAGE,
    K8S,
    KUBECTL,
    PUBLIC_URL,
    STAND_INS,
    containers,
    environment,
    named,
    of_kind,
    pod_labels,
    render,
    selects,
    settings_of,
)
from tests.support.service import ROOT

pytestmark = pytest.mark.skipif(
    shutil.which(KUBECTL) is None,
    reason="kubectl is not installed (`make kubectl` installs Debian's package)",
)

PRODUCTION = K8S / "overlays" / "production"
TENANT_POOL = K8S / "overlays" / "tenant-pool"
OVERLAYS = (PRODUCTION, TENANT_POOL)
BY_DIGEST = re.compile(r"^[^\s@:]+(?::\d+)?(?:/[^\s@:]+)*@sha256:[0-9a-f]{64}$")
# What the Pod Security Standard `baseline` lets a container add (the runtime's default set).
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL"}
BASELINE_CAPABILITIES |= {"MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID"}
BASELINE_CAPABILITIES |= {"SYS_CHROOT"}


def production(filled_k8s: Path) -> tuple[dict[str, Any], ...]:
    return render(filled_k8s / "overlays" / "production")


def command_line(command: list[str]) -> list[str]:
    """A container's command as this checkout runs it: `python` is this interpreter, and
    `assaygate` its console script's module."""
    program, *rest = command
    if program == "python":
        return [sys.executable, *rest]
    assert program == "assaygate", command
    return [sys.executable, "-m", "service.cli", *rest]


def test_as_shipped_every_process_refuses_to_start_naming_each_placeholder(
    tmp_path: Path,
) -> None:
    objects = render(PRODUCTION)
    started = {}
    for owner, container in containers(objects):  # each as its pod runs it, all at once
        env = {k: STAND_INS.get(v, v) for k, v in environment(objects, container).items()}
        started[owner] = subprocess.Popen(
            command_line(container["command"]),
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path), **env},
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    try:
        # The API, the shared workers, the tenant's pool, the migration.
        assert len(started) == 4
        for owner, process in started.items():
            _, stderr = process.communicate(timeout=120)
            assert process.returncode == 2, (owner, stderr)
            assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
            for variable in ("ASSAYGATE_PUBLIC_URL", "ASSAYGATE_CONTROL_PLANE"):
                placeholder = f"{variable}: 'https://assaygate.change-me.invalid' is a placeholder"
                assert placeholder in stderr, (owner, stderr)
    finally:  # one that did start (the defect this test is for) must not outlive it
        for process in started.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
    assert not any(tmp_path.iterdir()), "a refused start writes nothing"


def test_the_site_address_filled_in_once_reaches_the_settings_the_ingress_and_its_certificate(
    filled_k8s: Path,
) -> None:
    objects = production(filled_k8s)
    (api,) = [c for owner, c in containers(objects) if owner == "assaygate-api"]
    settings = settings_of(environment(objects, api))
    assert settings.public_url == settings.link_base == PUBLIC_URL
    service = named(objects, "Service", "assaygate-api")
    (port,) = service["spec"]["ports"]
    # The control plane: the API's Service as the pods reach it, and the public address.
    plane = [item.strip() for item in settings.control_plane.split(",")]
    assert plane == [f"{service['metadata']['name']}:{port['port']}", PUBLIC_URL]
    ingress = named(objects, "Ingress", "assaygate-api")
    host = urlsplit(PUBLIC_URL).hostname
    (rule,) = ingress["spec"]["rules"]
    (tls,) = ingress["spec"]["tls"]
    assert rule["host"] == host and tls["hosts"] == [host]
    assert tls["secretName"] == "assaygate-tls"
    (path,) = rule["http"]["paths"]
    backend = path["backend"]["service"]
    assert (path["path"], path["pathType"]) == ("/", "Prefix")
    assert backend == {"name": service["metadata"]["name"], "port": {"name": port["name"]}}
    # The controller lets through the largest artifact the API takes.
    body = ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-body-size"]
    assert body.endswith("m") and int(body[:-1]) * 1024 * 1024 >= settings.artifact_max_bytes


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_every_pod_runs_the_image_by_digest_set_in_one_place(
    overlay: Path, filled_k8s: Path
) -> None:
    for shipped in (True, False):
        objects = render(overlay if shipped else filled_k8s / overlay.relative_to(K8S))
        images = {c["image"] for _, c in containers(objects)}
        assert len(images) == 1 and all(BY_DIGEST.match(i) for i in images), images
        if shipped:  # a registry that cannot exist: nothing starts on the placeholder
            (image,) = images
            assert image.split("/")[0].endswith(".invalid"), image
    # Only the component names the image; every applied overlay includes it.
    for path in K8S.rglob("kustomization.yaml"):
        document = yaml.safe_load(path.read_text())
        assert ("images" in document) == (path == IMAGE), path
    assert (
        "../../components/image"
        in yaml.safe_load((overlay / "kustomization.yaml").read_text())["components"]
    )


def tenant_labels(node: Any) -> list[str]:
    """Every `assaygate.dev/tenant` label and selector value anywhere in an object."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "assaygate.dev/tenant":
                found.append(value)
            else:
                found.extend(tenant_labels(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(tenant_labels(item))
    return found


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_every_tenant_label_and_selector_is_the_tenants_name(overlay: Path) -> None:
    tenant = yaml.safe_load((TENANT_POOL / "tenant.yaml").read_text())["data"]["name"]
    objects = render(overlay)
    labelled = {o["kind"] for o in objects if tenant_labels(o)}
    assert {"Deployment", "ServiceAccount", "NetworkPolicy", "ScaledObject"} <= labelled
    assert "PodDisruptionBudget" in labelled
    assert {v for o in objects for v in tenant_labels(o)} == {tenant}


def baseline(workload: dict[str, Any]) -> list[str]:
    """What of a workload's pod breaks the Pod Security Standard `baseline` (the fields these
    manifests use: capabilities, privileged, host namespaces, AppArmor, seccomp)."""
    pod = workload["spec"]["template"]["spec"]
    broken = [f"host {n}" for n in ("hostNetwork", "hostPID", "hostIPC") if pod.get(n)]
    if pod.get("securityContext", {}).get("seccompProfile", {}).get("type") == "Unconfined":
        broken.append("pod seccomp unconfined")
    for c in pod["containers"]:
        own = c.get("securityContext", {})
        if own.get("privileged"):
            broken.append(f"{c['name']}: privileged")
        if set(own.get("capabilities", {}).get("add", [])) - BASELINE_CAPABILITIES:
            broken.append(f"{c['name']}: capabilities beyond the default set")
        if own.get("appArmorProfile", {}).get("type") == "Unconfined":
            broken.append(f"{c['name']}: AppArmor unconfined")
    return broken


def test_the_namespace_enforces_the_least_level_that_admits_its_pods_and_warns_at_restricted(
    filled_k8s: Path,
) -> None:
    objects = production(filled_k8s)
    (namespace,) = of_kind(objects, "Namespace")
    labels = namespace["metadata"]["labels"]
    levels = []
    for workload in (o for o in objects if o["kind"] in ("Deployment", "Job")):
        if not restricted(workload):
            levels.append("restricted")
        else:
            levels.append("baseline" if not baseline(workload) else "privileged")
            # Only the tenant's pool needs more than `restricted`.
            assert workload["metadata"]["name"].startswith("assaygate-tenant-worker-")
    order = ["restricted", "baseline", "privileged"]
    needed = max(levels, key=order.index)
    assert needed == "privileged" and levels.count("privileged") == 1
    assert labels["pod-security.kubernetes.io/enforce"] == needed
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"


def test_each_disruption_budget_covers_the_pods_of_exactly_one_workload(filled_k8s: Path) -> None:
    objects = production(filled_k8s)
    deployments = of_kind(objects, "Deployment")
    covered = []
    for budget in of_kind(objects, "PodDisruptionBudget"):
        spec = budget["spec"]
        chosen = [d for d in deployments if selects(spec["selector"], pod_labels(d))]
        assert len(chosen) == 1, (
            budget["metadata"]["name"],
            [d["metadata"]["name"] for d in chosen],
        )
        # One at a time, and never blocked by a pod that is not ready.
        assert spec["maxUnavailable"] == 1 and "minAvailable" not in spec
        assert spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
        covered.append(chosen[0]["metadata"]["name"])
    assert sorted(covered) == sorted(d["metadata"]["name"] for d in deployments)


def test_the_service_monitor_scrapes_the_apis_metrics_with_the_token_the_api_reads(
    filled_k8s: Path, tmp_path: Path
) -> None:
    objects = production(filled_k8s)
    (monitor,) = of_kind(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    services = of_kind(objects, "Service")
    chosen = [s for s in services if selects(monitor["spec"]["selector"], s["metadata"]["labels"])]
    assert [s["metadata"]["name"] for s in chosen] == ["assaygate-api"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in chosen[0]["spec"]["ports"]}
    # The path is the route the scrape token reads, and the API serves it.
    paths = create_app(Settings(data_dir=tmp_path)).openapi()["paths"]
    assert ("GET", endpoint["path"]) == METRICS and "get" in paths[endpoint["path"]]
    # The token Prometheus sends is the one the API checks: the same Secret and key, in the
    # namespace of both (the operator reads it from the Secret, never from this file).
    authorization = endpoint["authorization"]
    assert authorization["type"] == "Bearer"
    api = named(objects, "Deployment", "assaygate-api")
    (container,) = api["spec"]["template"]["spec"]["containers"]
    (token,) = [v for v in container["env"] if v["name"] == "ASSAYGATE_METRICS_TOKEN"]
    assert authorization["credentials"] == token["valueFrom"]["secretKeyRef"]
    assert monitor["metadata"]["namespace"] == api["metadata"]["namespace"]
    assert settings_of(environment(objects, container)).metrics_token


def test_every_worker_probe_runs_the_health_module_on_the_file_its_worker_beats(
    filled_k8s: Path,
) -> None:
    objects = production(filled_k8s)
    workers = [
        d for d in of_kind(objects, "Deployment") if d["metadata"]["name"] != "assaygate-api"
    ]
    assert len(workers) == 2  # the shared workers and the tenant's pool
    assert importlib.util.find_spec("worker.health") is not None
    for worker in workers:
        pod = worker["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["command"] == ["python", "-m", "worker"]
        for kind, verb in (("livenessProbe", "live"), ("readinessProbe", "ready")):
            probe = container[kind]
            assert probe["exec"]["command"] == ["python", "-m", "worker.health", verb]
            assert probe["timeoutSeconds"] >= 5  # a Python start on a busy node
        settings = settings_of(environment(objects, container))
        beat = settings.worker_health_file
        assert beat is not None
        # The root file system is read-only: the file is on the pod's own writable volume.
        (mount,) = [m for m in container["volumeMounts"] if beat.is_relative_to(m["mountPath"])]
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert "emptyDir" in volume and not mount.get("readOnly")
        # A worker is restarted only once its loop has missed its beats: the probe's failures
        # take longer than the beats it may miss.
        live = container["livenessProbe"]
        assert (
            live["periodSeconds"] * live["failureThreshold"]
            >= 3 * settings.worker_health_interval_s
        )
