"""docs/kubernetes.md, "Deploy on Kubernetes", as a platform engineer follows it, without a
cluster: its render-and-check commands run as written in a copy of deploy/ filled in as the page
says (and catch the placeholders in a copy that is not); every other command is listed below
with the reason it is not run; the Secrets it creates are exactly the Secrets and keys the
rendered manifests read; the files and keys it says to edit are the ones that exist; deleting the
lines it names for a cluster without KEDA or the Prometheus Operator still renders."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.k8s import CI, IMAGE, K8S, KUBECTL, SITE, filled_copy, render
from tests.support.service import ROOT

pytestmark = pytest.mark.skipif(
    shutil.which(KUBECTL) is None,
    reason="kubectl is not installed (`make kubectl` installs Debian's package)",
)

DOC = ROOT / "docs" / "kubernetes.md"
TEXT = DOC.read_text()
# Commands that render and check, run here as written.
RUN = ("kubectl kustomize ", "kubernetes-validate ", "! grep ")
NOT_RUN = {
    "kubectl apply ": "applies to a live cluster (there is none here)",
    "kubectl -n ": "creates Secrets in, waits on or reads a live cluster",
    "docker ": "builds and pushes to the operator's registry",
    "curl ": "reaches the deployment's public address",
}


def sh_commands() -> list[str]:
    blocks = re.findall(r"^```sh\n(.*?)^```", TEXT, re.M | re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def run_commands() -> list[str]:
    return [c for c in sh_commands() if c.startswith(RUN)]


def run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """One of the page's commands in bash, as a shell would run it typed in `cwd`, with this
    environment's `kubernetes-validate` on the PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env={**os.environ, "PATH": path},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_command_on_the_page_is_run_or_listed_with_a_reason() -> None:
    commands = sh_commands()
    for command in commands:
        assert command.startswith((*RUN, *NOT_RUN)), f"neither run nor listed: {command}"
    for prefix in NOT_RUN:
        assert any(c.startswith(prefix) for c in commands), f"no longer on the page: {prefix}"
    assert {c.split()[0] for c in run_commands()} == {"kubectl", "kubernetes-validate", "!"}


def copy_of_deploy(where: Path, *, filled: bool) -> None:
    if filled:
        filled_copy(where)
    else:
        shutil.copytree(K8S, where / "deploy" / "k8s")
    shutil.copytree(CI, where / "deploy" / "ci")


def test_the_render_and_check_commands_pass_as_written_once_the_page_is_followed(
    tmp_path: Path,
) -> None:
    copy_of_deploy(tmp_path, filled=True)
    for command in run_commands():
        done = run(command, tmp_path)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        if command.startswith("kubernetes-validate"):
            # Only the custom kinds it has no schema for are mentioned; nothing fails.
            said = [line for line in (done.stdout + done.stderr).splitlines() if line]
            assert said and all("Couldn't find schema for kind" in line for line in said), said
    rendered = list(yaml.safe_load_all((tmp_path / "assaygate.yaml").read_text()))
    assert {o["kind"] for o in rendered} >= {"Namespace", "Deployment", "Ingress"}
    assert {o["kind"] for o in yaml.safe_load_all((tmp_path / "rollout.yaml").read_text())} == {
        "Rollout",
        "AnalysisTemplate",
    }


def test_the_pages_check_finds_every_placeholder_left_in(tmp_path: Path) -> None:
    copy_of_deploy(tmp_path, filled=False)
    outcomes = {command: run(command, tmp_path) for command in run_commands()}
    (check,) = [c for c in outcomes if c.startswith("! grep")]
    assert outcomes[check].returncode == 1
    found = outcomes[check].stdout
    # The address (settings, Ingress host and certificate) and the image of every pod.
    assert "ASSAYGATE_PUBLIC_URL: https://assaygate.change-me.invalid" in found
    assert found.count("image: registry.change-me.invalid/assaygate@") == 4
    assert all(o.returncode == 0 for c, o in outcomes.items() if c != check)


def created_secrets() -> set[tuple[str, str]]:
    """(Secret, key) of every `kubectl -n assaygate create secret` on the page."""
    created = set()
    for command in sh_commands():
        words = shlex.split(command)
        if words[:5] != ["kubectl", "-n", "assaygate", "create", "secret"]:
            continue
        kind, name = words[5], words[6]
        if kind == "tls":
            created |= {(name, "tls.crt"), (name, "tls.key")}
        else:
            assert kind == "generic"
            for word in words[7:]:
                assert word.startswith("--from-literal="), word
                created.add((name, word.removeprefix("--from-literal=").split("=", 1)[0]))
    return created


def read_secrets(node: Any) -> set[tuple[str, str]]:
    """(Secret, key) of every reference in an object: variables, volumes, KEDA's
    authentication, the ServiceMonitor's credentials, the Ingress's certificate."""
    found: set[tuple[str, str]] = set()
    if isinstance(node, dict):
        if "secretKeyRef" in node:
            found.add((node["secretKeyRef"]["name"], node["secretKeyRef"]["key"]))
        if isinstance(node.get("secret"), dict) and "secretName" in node["secret"]:
            for item in node["secret"]["items"]:
                found.add((node["secret"]["secretName"], item["key"]))
        if {"parameter", "name", "key"} <= set(node):
            found.add((node["name"], node["key"]))
        if {"type", "credentials"} <= set(node):
            found.add((node["credentials"]["name"], node["credentials"]["key"]))
        if "hosts" in node and "secretName" in node:
            found |= {(node["secretName"], "tls.crt"), (node["secretName"], "tls.key")}
        for value in node.values():
            found |= read_secrets(value)
    elif isinstance(node, list):
        for item in node:
            found |= read_secrets(item)
    return found


def test_the_secrets_the_page_creates_are_every_secret_the_manifests_read() -> None:
    objects = render(K8S / "overlays" / "production")
    read = set().union(*(read_secrets(o) for o in objects))
    assert ("assaygate-metrics", "token") in read and ("assaygate-tls", "tls.crt") in read
    assert created_secrets() == read
    for name, _ in read:
        assert f"`{name}`" in TEXT, f"the page's table of Secrets does not name {name}"


def test_the_files_and_keys_the_page_says_to_edit_are_the_ones_that_exist() -> None:
    site, image = (yaml.safe_load(b) for b in re.findall(r"^```yaml\n(.*?)^```", TEXT, re.M | re.S))
    assert set(site["data"]) == set(yaml.safe_load(SITE.read_text())["data"])
    (entry,) = yaml.safe_load(IMAGE.read_text())["images"]
    (edited,) = image["images"]
    assert set(edited) == set(entry) and edited["name"] == entry["name"]
    for path in (SITE, IMAGE):
        assert f"`{path.relative_to(K8S)}`" in TEXT


def test_without_keda_or_the_prometheus_operator_deleting_the_lines_named_still_renders(
    tmp_path: Path,
) -> None:
    copy_of_deploy(tmp_path, filled=True)
    k8s = tmp_path / "deploy" / "k8s"
    named = ("worker-autoscaling.yaml", "autoscaling.yaml", "monitoring.yaml")
    for name in named:
        assert f"`{name}`" in TEXT
    for path in k8s.rglob("kustomization.yaml"):
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(line for line in lines if not line.strip().endswith(named)))
    done = run("kubectl kustomize deploy/k8s/overlays/production", tmp_path)
    assert done.returncode == 0, done.stderr
    kinds = {(o["apiVersion"], o["kind"]) for o in yaml.safe_load_all(done.stdout)}
    assert not any(api.startswith(("keda.sh/", "monitoring.coreos.com/")) for api, _ in kinds)
    assert ("apps/v1", "Deployment") in kinds
