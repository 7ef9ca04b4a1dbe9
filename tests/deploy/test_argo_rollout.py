"""deploy/ci's Argo Rollouts wiring (issue 47): `kubectl kustomize deploy/ci` renders the
AnalysisTemplate and a Rollout of an agent whose first canary step, before any traffic, is that
analysis, given every argument the template needs, the artifact being the one the pod template
names; the analysis goes on only on `allow` *and* assurance `executed` (the template's own
conditions, which tests/api/test_artifacts.py runs against the live API)."""

from __future__ import annotations

import re
import shutil
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.deploy.test_ci_examples import _answer, argo_metric, argo_outcome
from tests.support.k8s import CI, KUBECTL, named, render

pytestmark = pytest.mark.skipif(
    shutil.which(KUBECTL) is None,
    reason="kubectl is not installed (`make kubectl` installs Debian's package)",
)

ARTIFACT = "assaygate.dev/artifact"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def rollout_and_template() -> tuple[dict[str, Any], dict[str, Any]]:
    objects = render(CI)
    assert {o["kind"] for o in objects} == {"Rollout", "AnalysisTemplate"}
    (rollout,) = [o for o in objects if o["kind"] == "Rollout"]
    (template,) = [o for o in objects if o["kind"] == "AnalysisTemplate"]
    return rollout, template


def test_the_rollout_asks_the_gate_before_any_traffic_reaches_a_new_version() -> None:
    rollout, template = rollout_and_template()
    assert rollout["apiVersion"] == template["apiVersion"] == "argoproj.io/v1alpha1"
    steps = rollout["spec"]["strategy"]["canary"]["steps"]
    first, *rest = steps
    (analysis_step,) = first.values()
    assert set(first) == {"analysis"}, "the analysis comes before any setWeight"
    assert any("setWeight" in step for step in rest)
    (reference,) = analysis_step["templates"]
    assert named(render(CI), "AnalysisTemplate", reference["templateName"]) == template
    # Every argument the template leaves open is given, and nothing it does not declare.
    declared = {a["name"]: a for a in template["spec"]["args"]}
    given = {a["name"]: a["value"] for a in analysis_step["args"]}
    open_ = {n for n, a in declared.items() if "value" not in a and "valueFrom" not in a}
    assert open_ <= set(given) <= set(declared), (open_, given)


def test_the_analysis_asks_about_the_artifact_the_pod_template_names() -> None:
    rollout, _ = rollout_and_template()
    annotated = rollout["spec"]["template"]["metadata"]["annotations"][ARTIFACT]
    (step,) = rollout["spec"]["strategy"]["canary"]["steps"][0].values()
    given = {a["name"]: a["value"] for a in step["args"]}
    assert DIGEST.match(annotated) and given["artifact"] == annotated
    # One value, set by the pipeline: the source file's analysis holds no digest of its own.
    source = yaml.safe_load((CI / "argo-rollout.yaml").read_text())
    (step,) = source["spec"]["strategy"]["canary"]["steps"][0].values()
    assert not any(DIGEST.match(a["value"]) for a in step["args"])


def test_the_template_it_runs_rolls_out_only_an_allow_on_code_the_gate_ran() -> None:
    _, template = rollout_and_template()
    (metric,) = template["spec"]["metrics"]
    assert metric == argo_metric()  # the one tests/api/test_artifacts.py runs against the API
    assert argo_outcome(_answer("allow", "executed")) == "successful"
    assert argo_outcome(_answer("allow", "declared", accepted=True)) == "inconclusive"
    assert argo_outcome(_answer("block", "executed")) == "failed"
    assert "result.artifact_assurance.assurance" in metric["successCondition"]


def test_the_rollouts_pods_validate_and_run_the_agent_by_digest() -> None:
    rollout, _ = rollout_and_template()
    template = rollout["spec"]["template"]
    assert rollout["spec"]["selector"]["matchLabels"].items() <= (
        template["metadata"]["labels"].items()
    )
    # Argo's schema is not in the library; the pod template is Kubernetes' own.
    pod = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "agent"}}
    kubernetes_validate.validate({**pod, "template": template}, "1.30.0", strict=True)
    for container in template["spec"]["containers"]:
        assert re.match(r"^[^\s@]+@sha256:[0-9a-f]{64}$", container["image"]), container
