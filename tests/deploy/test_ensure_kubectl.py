"""Under CI a missing kubectl fails the run in deploy/ensure-kubectl.sh (the manifests must be
checked), while a developer without it goes on and the Kubernetes manifest tests skip."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.service import ROOT

SCRIPT = ROOT / "deploy" / "ensure-kubectl.sh"


def ensure(kubectl: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    # Never let the test itself install a package: the install path is not what is under test.
    env |= {"ASSAYGATE_TEST_KUBECTL": str(kubectl), "ASSAYGATE_NO_KUBECTL_INSTALL": "1"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30
    )


def test_the_script_fails_under_ci_when_kubectl_is_missing(tmp_path: Path) -> None:
    ran = ensure(tmp_path / "no-kubectl", ci="true")
    assert ran.returncode == 1
    assert "CI is set" in ran.stderr
    assert str(tmp_path / "no-kubectl") in ran.stderr


def test_the_script_lets_a_developer_without_kubectl_go_on_with_a_skip(tmp_path: Path) -> None:
    ran = ensure(tmp_path / "no-kubectl", ci=None)
    assert ran.returncode == 0
    assert "manifest tests will skip" in ran.stderr


def test_the_script_passes_under_ci_when_kubectl_is_there(tmp_path: Path) -> None:
    kubectl = tmp_path / "kubectl"
    kubectl.write_text("#!/bin/sh\n")
    kubectl.chmod(0o755)
    ran = ensure(kubectl, ci="1")
    assert ran.returncode == 0, ran.stderr
    assert f"using {kubectl}" in ran.stdout
