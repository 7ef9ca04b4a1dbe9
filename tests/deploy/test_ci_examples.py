"""The CI examples in deploy/ci are valid YAML and call only the documented `assaygate` CLI:
every command line parses with the real parser, and every command and flag is in the README."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from service.cli import build_parser
from tests.support.service import ROOT

CI = ROOT / "deploy" / "ci"
README = (ROOT / "README.md").read_text()


def scripts(node: Any) -> list[str]:
    """Every shell line a workflow runs (`run:` steps, GitLab `script:` items)."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "run" and isinstance(value, str):
                found.extend(value.splitlines() if "\n" in value.strip() else [value])
            elif key == "script" and isinstance(value, list):
                found.extend(str(v) for v in _flat(value))
            else:
                found.extend(scripts(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(scripts(item))
    return found


def _flat(items: list[Any]) -> list[Any]:
    """A GitLab script with its YAML anchors (nested lists) flattened."""
    return [x for item in items for x in (_flat(item) if isinstance(item, list) else [item])]


def assaygate_calls(path: Path) -> list[list[str]]:
    document = yaml.safe_load(path.read_text())
    calls: list[list[str]] = []
    for line in scripts(document):
        # CI expressions (${{ github.sha }}, $CI_COMMIT_SHA) become plain words.
        line = re.sub(r"\$\{\{[^}]*\}\}", "VALUE", line)
        for command in re.split(r"&&|;|\|\|", line):
            words = shlex.split(command)
            if words and words[0] == "assaygate":
                calls.append(words[1:])
    return calls


@pytest.mark.parametrize("name", ["github-actions.yml", "gitlab-ci.yml"])
def test_the_ci_example_is_valid_yaml_calling_only_the_documented_cli(name: str) -> None:
    calls = assaygate_calls(CI / name)
    assert {c[0] for c in calls} == {"assay", "submit", "gate"}
    parser = build_parser()
    for words in calls:
        args = parser.parse_args(words)  # raises on an unknown command or flag
        assert args.func is not None
        assert f"assaygate {words[0]}" in README
        for flag in (w for w in words if w.startswith("--")):
            assert flag in README, f"{flag} is not documented in the README"


def test_the_github_workflow_keeps_the_dossier_and_gates_the_deploy() -> None:
    workflow = yaml.safe_load((CI / "github-actions.yml").read_text())
    jobs = workflow["jobs"]
    assert jobs["deploy"]["needs"] == "assay"
    uploads = [s for s in jobs["assay"]["steps"] if "upload-artifact" in str(s.get("uses"))]
    assert uploads and uploads[0]["with"]["path"].split() == ["dossier.json", "assaygate-junit.xml"]
    assert uploads[0]["if"] == "always()"
    runs = " ".join(str(s.get("run", "")) for s in jobs["deploy"]["steps"])
    assert 'assaygate gate --manifest "$ASSAYGATE_MANIFEST"' in runs, "no hard-coded system"
    for job in jobs.values():
        uploads = [s for s in job["steps"] if "upload-artifact" in str(s.get("uses"))]
        assert uploads and all(u["if"] == "always()" for u in uploads), "reports on every exit"


@pytest.mark.parametrize("name", ["github-actions.yml", "gitlab-ci.yml"])
def test_the_ci_example_has_a_local_assay_job_and_installs_the_extras_asked_for(name: str) -> None:
    text = (CI / name).read_text()
    assert "${ASSAYGATE_EXTRAS:+[$ASSAYGATE_EXTRAS]}" in text
    local = [c for c in assaygate_calls(CI / name) if c[0] == "assay"]
    assert local and "--junit" in local[0]
    assert "Running tenant code" in text, "says how a team's code reaches the workers"


def test_the_composite_action_sets_up_python_and_takes_extras_by_input() -> None:
    action = yaml.safe_load((CI / "action" / "action.yml").read_text())
    steps = action["runs"]["steps"]
    assert str(steps[0].get("uses", "")).startswith("actions/setup-python")
    assert {"extras", "python-version"} <= set(action["inputs"])
    assert steps[-1]["if"] == "always()"


def argo_metric() -> dict[str, Any]:
    template = yaml.safe_load((CI / "argo-analysis-template.yaml").read_text())
    metric: dict[str, Any] = template["spec"]["metrics"][0]
    return metric


def argo_reads(answer: dict[str, Any]) -> Any:
    """What the template's web metric reads from a gate answer: with no `jsonPath`, the whole
    body (Argo Rollouts' web provider), else the keys `{$.a.b}` names, in order."""
    path = argo_metric()["provider"]["web"].get("jsonPath")
    if path is None:
        return answer
    assert path.startswith("{$.") and path.endswith("}"), path
    value: Any = answer
    for key in path[3:-1].split("."):
        value = value[key]
    return value


def _namespace(value: Any) -> Any:
    if isinstance(value, dict):
        return SimpleNamespace(**{k: _namespace(v) for k, v in value.items()})
    return value


def argo_outcome(answer: dict[str, Any]) -> str:
    """The metric's outcome for a gate answer: `successful`, `failed` or `inconclusive`, by
    the template's own conditions (Argo's expressions: `&&`, `||`, `==` on `result`'s fields)."""
    metric = argo_metric()
    result = _namespace(argo_reads(answer))

    def holds(condition: str) -> bool:
        python = condition.replace("&&", " and ").replace("||", " or ")
        return bool(eval(python, {"__builtins__": {}}, {"result": result}))

    if holds(metric["successCondition"]):
        return "successful"
    return "failed" if holds(metric["failureCondition"]) else "inconclusive"


def _answer(decision: str, assurance: str | None, accepted: bool = False) -> dict[str, Any]:
    assured = None
    if assurance is not None:
        assured = {"assurance": assurance, "accepted_by_policy": accepted}
    return {"decision": decision, "artifact_assurance": assured}


def test_the_argo_template_rolls_out_only_an_allowed_artifact_the_gate_ran(
    tmp_path: Path,
) -> None:
    from service.asgi import create_app
    from service.settings import Settings

    metric = argo_metric()
    web = metric["provider"]["web"]
    assert web["url"].endswith("/v1/gate/{{args.system}}?artifact={{args.artifact}}")
    assert argo_outcome(_answer("allow", "executed")) == "successful"
    assert argo_outcome(_answer("block", "executed")) == "failed"
    assert argo_outcome(_answer("hold", "declared")) == "inconclusive"
    assert argo_outcome(_answer("reopened", "executed")) == "inconclusive"
    # An allow on a weaker assurance the policy accepted is a person's call here.
    assert argo_outcome(_answer("allow", "declared", accepted=True)) == "inconclusive"
    # The fields it reads are ones the gate's published answer has, and the values the
    # conditions compare with are ones that answer can hold.
    document = create_app(Settings(data_dir=tmp_path)).openapi()
    schemas = document["components"]["schemas"]
    answer = schemas["GatePublic"]
    assert "decision" in answer["required"]
    assert {"allow", "block"} <= set(answer["properties"]["decision"]["enum"])
    assert "artifact_assurance" in answer["properties"]
    assured = schemas["ArtifactAssurancePublic"]["properties"]
    assert "executed" in str(assured["assurance"]) and "accepted_by_policy" in assured
    assert "artifact" in {
        p["name"] for p in document["paths"]["/v1/gate/{system}"]["get"]["parameters"]
    }


@pytest.mark.parametrize("name", ["github-actions.yml", "gitlab-ci.yml"])
def test_the_ci_example_uploads_the_code_and_the_deploy_asks_by_its_digest(name: str) -> None:
    calls = assaygate_calls(CI / name)
    submit = next(c for c in calls if c[0] == "submit")
    gate = next(c for c in calls if c[0] == "gate")
    assert submit[submit.index("--code") + 1] == "$ASSAYGATE_CODE"
    assert gate[gate.index("--artifact") + 1] == "$ASSAYGATE_CODE"  # the same commit, packed
