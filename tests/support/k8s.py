"""The Kubernetes manifests as the tests read them: rendered with `kubectl kustomize` (offline),
as shipped (placeholders and all) or as docs/kubernetes.md has an operator fill them in, in a
copy of deploy/k8s under the test's own temporary folder."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from service.settings import Settings
from tests.support.service import ROOT

K8S = ROOT / "deploy" / "k8s"
CI = ROOT / "deploy" / "ci"
# deploy/ensure-kubectl.sh installs it (`make kubectl`); the same variable names another one.
KUBECTL = os.environ.get("ASSAYGATE_TEST_KUBECTL", "kubectl")
WORKLOADS = ("Deployment", "Job")

# What docs/kubernetes.md has the operator put in the two files it names.
SITE = K8S / "overlays" / "production" / "site.yaml"
IMAGE = K8S / "components" / "image" / "kustomization.yaml"
PUBLIC_URL = "https://assaygate.example.com"
REGISTRY = "registry.example.com/platform/assaygate"
DIGEST = "sha256:" + hashlib.sha256(b"an image the operator pushed").hexdigest()

Objects = tuple[dict[str, Any], ...]


def kubectl_kustomize(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KUBECTL, "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@cache
def render(kustomization: Path) -> Objects:
    done = kubectl_kustomize(kustomization)
    assert done.returncode == 0, f"{kustomization}: {done.stderr}"
    return tuple(o for o in yaml.safe_load_all(done.stdout) if o)


def fill(k8s: Path, public_url: str = PUBLIC_URL, image: str = REGISTRY) -> None:
    """What docs/kubernetes.md asks of the operator, in a copy of deploy/k8s: the site's
    address in site.yaml, the pushed image's name and digest in the image component."""
    site_path = k8s / SITE.relative_to(K8S)
    site = yaml.safe_load(site_path.read_text())
    site["data"]["public-url"] = public_url
    site_path.write_text(yaml.safe_dump(site))
    image_path = k8s / IMAGE.relative_to(K8S)
    component = yaml.safe_load(image_path.read_text())
    (entry,) = component["images"]
    entry.update(newName=image, digest=DIGEST)
    image_path.write_text(yaml.safe_dump(component))


def filled_copy(where: Path) -> Path:
    """deploy/k8s copied under `where` and filled in as the docs say; returns the copy."""
    k8s = where / "deploy" / "k8s"
    shutil.copytree(K8S, k8s)
    fill(k8s)
    return k8s


def of_kind(objects: Objects, kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def named(objects: Objects, kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in of_kind(objects, kind) if o["metadata"]["name"] == name]
    return found


def containers(objects: Objects) -> Iterator[tuple[str, dict[str, Any]]]:
    for o in objects:
        if o["kind"] in WORKLOADS:
            for container in o["spec"]["template"]["spec"]["containers"]:
                yield o["metadata"]["name"], container


def environment(objects: Objects, container: dict[str, Any]) -> dict[str, str]:
    """What the container's process sees as ASSAYGATE_* (a Secret's value as a stand-in)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        (config,) = [
            c
            for c in of_kind(objects, "ConfigMap")
            if c["metadata"]["name"] == source["configMapRef"]["name"]
        ]
        env.update(config["data"])
    for variable in container.get("env", []):
        secret = variable.get("valueFrom", {}).get("secretKeyRef")
        env[variable["name"]] = variable["value"] if secret is None else f"<{secret['key']}>"
    return env


STAND_INS = {
    "<database-url>": "postgresql+psycopg://assaygate@postgres:5432/assaygate",
    "<broker-url>": "redis://redis:6379/0",
    "<token>": "a-scrape-token",
}


def settings_values(env: dict[str, str]) -> dict[str, str]:
    return {k[len("ASSAYGATE_") :].lower(): STAND_INS.get(v, v) for k, v in env.items()}


def settings_of(env: dict[str, str]) -> Settings:
    return Settings(**settings_values(env))


def pod_labels(workload: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector of matchLabels only (the manifests use no expressions)."""
    assert set(selector) == {"matchLabels"}, selector
    return bool(selector["matchLabels"].items() <= labels.items())
