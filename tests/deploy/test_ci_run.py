"""The CI examples run as written from a fresh checkout: Assaygate's wheel is built from the
checkout and installed into a fresh virtualenv (what `setup-python` gives a job), and each job's
steps — the GitHub workflow's, the GitLab pipeline's and the composite action's — run in order as a
script against a real embedded service (`assaygate serve` in a temporary folder)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import xmlschema
import yaml

from tests.deploy.conftest import fresh_checkout
from tests.support.embedded import Embedded, embedded_service
from tests.support.service import ROOT

# A waiver may last at most 90 days by default (organisation policy `max_waiver_days`).
SOON = (datetime.now(UTC) + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M")

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CI = ROOT / "deploy" / "ci"
SHA = "4f1c2e9a7b"
JUNIT_XSD = xmlschema.XMLSchema(ROOT / "tests" / "assets" / "junit-10.xsd")
EXPRESSION = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")


@dataclass
class RunnerPython:
    """The runner's Python, shared by the module's jobs as a runner's cached tool directory is,
    and the install scripts that already ran in it (the test that ran each)."""

    bin: Path
    installed: dict[str, str] = field(default_factory=dict)


@dataclass
class Runner:
    """One CI machine: a checkout, a fresh Python on PATH, the service's address and key."""

    checkout: Path
    python: RunnerPython
    service: Embedded
    temp: Path
    ran: list[str] = field(default_factory=list)
    uploaded: list[Path] = field(default_factory=list)
    # What each script wrote on stderr, in order (also passed on to the test's own stderr).
    said: list[str] = field(default_factory=list)

    def context(self, extra: Mapping[str, str]) -> dict[str, str]:
        return {
            "vars.ASSAYGATE_URL": self.service.url,
            "secrets.ASSAYGATE_API_KEY": self.service.key,
            "github.sha": SHA,
            **extra,
        }

    def resolve(self, text: str, ctx: Mapping[str, str]) -> str:
        def value(m: re.Match[str]) -> str:
            assert m.group(1) in ctx, f"the test does not know the expression {m.group(0)}"
            return ctx[m.group(1)]

        return EXPRESSION.sub(value, text)

    def shell(self, script: str, env: Mapping[str, str]) -> int:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("ASSAYGATE_", "PYTHON"))}
        base.pop("VIRTUAL_ENV", None)
        base["PATH"] = f"{self.python.bin}{os.pathsep}{base.get('PATH', '')}"
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", script],
            cwd=self.checkout,
            env={**base, **env},
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        sys.stderr.write(done.stderr)
        self.ran.append(script)
        self.said.append(done.stderr)
        return done.returncode

    def install(self, script: str, env: Mapping[str, str]) -> int:
        """An install step (build Assaygate's wheel from the checkout, pip install it): run as
        written the first time the module's jobs meet it, and not again. Run again it installs
        nothing (pip keeps the same version already installed: the first wheel is what every job
        runs) and proves only what the first run did, for 7 CPU-seconds a job."""
        key = "\n".join(
            (
                script.replace(str(self.checkout), "<checkout>"),
                f"ASSAYGATE_SOURCE={env.get('ASSAYGATE_SOURCE', '')}",
                f"ASSAYGATE_EXTRAS={env.get('ASSAYGATE_EXTRAS', '')}",
            )
        )
        if key in self.python.installed:
            self.ran.append(f"# ran as written in {self.python.installed[key]}:\n{script}")
            return 0
        code = self.shell(script, env)
        if code == 0:
            self.python.installed[key] = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
        return code

    def github_job(
        self, steps: list[dict[str, Any]], env: Mapping[str, str], ctx: Mapping[str, str]
    ) -> int:
        """A job's steps in order; after a failure only `if: always()` steps run."""
        failed = 0
        for step in steps:
            if failed and step.get("if") != "always()":
                continue
            uses = str(step.get("uses", ""))
            step_env = {
                **env,
                **{k: self.resolve(str(v), ctx) for k, v in step.get("env", {}).items()},
            }
            if "run" in step:
                script = self.resolve(step["run"], ctx)
                run = self.install if "pip wheel" in script else self.shell
                code = run(script, step_env)
                failed = failed or code
            elif uses.startswith("actions/upload-artifact"):
                for line in self.resolve(step["with"]["path"], ctx).split():
                    self.uploaded.append(self.checkout / line)
            else:
                assert uses.startswith(("actions/checkout", "actions/setup-python")), uses
        return failed


def operator(service: Embedded, *args: str) -> subprocess.CompletedProcess[str]:
    """An operator's `assaygate` command where the embedded service keeps its data."""
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        cwd=service.data_dir, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def set_policy(service: Embedded, document: dict[str, Any], *scope: str) -> None:
    path = service.data_dir / f"policy-{len(scope)}.json"
    path.write_text(json.dumps(document))
    done = operator(service, "policy", "set", "default", str(path), *scope)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Embedded]:
    data_dir = tmp_path_factory.mktemp("ci-service")
    with embedded_service(
        [sys.executable, "-m", "service.cli"], data_dir, {"PYTHONPATH": str(ROOT)}
    ) as running:
        # The examples' manifest is the reference target: it runs none of the code the jobs
        # upload, so that code is `declared`, and the deploy job's gate allows it only because
        # the organisation's policy accepts it (exit 4).
        set_policy(running, {"accept_assurance": "declared"})
        yield running


@pytest.fixture(scope="module")
def runner_python(tmp_path_factory: pytest.TempPathFactory) -> RunnerPython:
    """A fresh Python, made once per module: the first job installs Assaygate's dependencies
    into it from nothing (~40 s of the 2-core machine), the later jobs find them installed —
    as a runner's cached tool directory would. Each install script runs once (`Runner.install`)."""
    venv = tmp_path_factory.mktemp("runner-python") / "python"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    return RunnerPython(venv / "bin")


def cloned(checkout: Path) -> Path:
    """The checkout as `actions/checkout` and GitLab leave it: a git work tree at the commit, so
    `submit --code .` and the deploy job's `gate --artifact .` pack the same HEAD, whatever the
    jobs wrote beside it (a wheel, reports)."""
    git = ["git", "-c", "user.email=ci@example.com", "-c", "user.name=ci"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "the commit CI builds"]):
        subprocess.run([*git, *args], cwd=checkout, check=True, capture_output=True)
    return checkout


@pytest.fixture
def runner(service: Embedded, runner_python: RunnerPython, tmp_path: Path) -> Runner:
    checkout = cloned(fresh_checkout(tmp_path / "checkout"))
    temp = tmp_path / "runner-temp"
    temp.mkdir()
    return Runner(checkout, runner_python, service, temp)


def github_env(runner: Runner, workflow: dict[str, Any], **override: str) -> dict[str, str]:
    ctx = runner.context({})
    env = {k: runner.resolve(str(v), ctx) for k, v in workflow.get("env", {}).items()}
    summary = runner.temp / "step-summary.md"
    summary.touch()
    return {**env, **override, "GITHUB_STEP_SUMMARY": str(summary), "RUNNER_TEMP": str(runner.temp)}


def assert_junit(path: Path) -> ET.Element:
    JUNIT_XSD.validate(str(path))
    return ET.parse(path).getroot()


def test_the_github_workflow_from_a_fresh_checkout_assays_uploads_and_deploys_an_allowed_build(
    runner: Runner,
) -> None:
    workflow = yaml.safe_load((CI / "github-actions.yml").read_text())
    env = github_env(runner, workflow)
    ctx = runner.context({})
    assert runner.github_job(workflow["jobs"]["assay"]["steps"], env, ctx) == 0
    assert (runner.python.bin / "assaygate").is_file(), "installed from the built wheel"
    # The job's own wheel is no uncommitted change of the commit it uploads (issue 47).
    assert "uncommitted changes" not in "".join(runner.said)
    assert "code sha256:" in "".join(runner.said), "the job uploaded the commit's code"
    assert {p.name for p in runner.uploaded} == {"dossier.json", "assaygate-junit.xml"}
    assert all(p.is_file() for p in runner.uploaded)
    assert assert_junit(runner.checkout / "assaygate-junit.xml").find(".//failure") is None
    assert "## Assaygate: ALLOW" in Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    verify = runner.shell(
        'curl -sf "$ASSAYGATE_URL/v1/keys" > keys.json\n'
        "assaygate verify dossier.json --keys keys.json",
        env,
    )
    assert verify == 0, "the uploaded dossier verifies offline"

    assert workflow["jobs"]["deploy"]["needs"] == "assay"
    assert runner.github_job(workflow["jobs"]["deploy"]["steps"], env, ctx) == 0
    assert (runner.checkout / "deployed.txt").read_text().strip() == f"deploying {SHA}"
    # It deployed on the gate's 4: an allow for code the gate never ran, which the policy
    # accepts, said apart from an allow for code it ran.
    asked = runner.shell(
        f'assaygate gate --manifest "$ASSAYGATE_MANIFEST" --version {SHA} --artifact .', env
    )
    assert asked == 4


def test_the_deploy_job_stops_code_the_gate_never_ran_where_the_policy_accepts_only_executed(
    runner: Runner,
) -> None:
    manifest = json.loads(
        (runner.checkout / "examples" / "copperfin-typed-repair.json").read_text()
    )
    manifest["system"] = "strict-returns"
    (runner.checkout / "strict.json").write_text(json.dumps(manifest))
    # The system's policy tightens the tenant's: only code the gate ran may ship.
    set_policy(runner.service, {"accept_assurance": "executed"}, "--system", "strict-returns")
    workflow = yaml.safe_load((CI / "github-actions.yml").read_text())
    env = github_env(runner, workflow, ASSAYGATE_MANIFEST="strict.json")
    ctx = runner.context({"github.sha": "strict-" + SHA})
    assert runner.github_job(workflow["jobs"]["assay"]["steps"], env, ctx) == 0, "allowed"
    assert runner.github_job(workflow["jobs"]["deploy"]["steps"], env, ctx) == 2, "held: not run"
    assert not (runner.checkout / "deployed.txt").exists()
    junit = assert_junit(runner.checkout / "assaygate-gate-junit.xml")
    assert "hold: assurance" in str(junit.find(".//testcase[@name='gate']/failure").get("message"))


def test_the_github_workflow_stops_a_blocked_build_before_deploy_and_still_uploads(
    runner: Runner,
) -> None:
    workflow = yaml.safe_load((CI / "github-actions.yml").read_text())
    env = github_env(runner, workflow, ASSAYGATE_MANIFEST="examples/copperfin-baseline.json")
    # Another commit: one version names one manifest, and the commit is the idempotency key.
    ctx = runner.context({"github.sha": "blocked-" + SHA})
    code = runner.github_job(workflow["jobs"]["assay"]["steps"], env, ctx)
    assert code == 1, "submit exits 1 on block, so the job fails and `needs: assay` skips deploy"
    junit = assert_junit(runner.checkout / "assaygate-junit.xml")
    assert junit.find(".//testcase[@name='timeout_after_commit']/failure") is not None
    assert all(p.is_file() for p in runner.uploaded), "the dossier is kept on failure too"


def test_a_held_build_passes_when_its_job_is_run_again_after_a_reviewer_waives_the_hold(
    runner: Runner,
) -> None:
    # The typed profile is held (a lineage break, an undeclared control): submit exits 2. A
    # reviewer waives the hold; the same job run again (the same commit, so the same idempotency
    # key) finds the same candidate, no new assay and no new hold, and the gate's allow exits 0.
    workflow = yaml.safe_load((CI / "github-actions.yml").read_text())
    env = github_env(runner, workflow, ASSAYGATE_MANIFEST="examples/copperfin-typed.json")
    ctx = runner.context({"github.sha": "held-" + SHA})
    steps = workflow["jobs"]["assay"]["steps"]
    assert runner.github_job(steps, env, ctx) == 2
    service = runner.service
    headers = {"Authorization": f"Bearer {service.key}"}
    holds = httpx.get(f"{service.url}/v1/holds", params={"status": "open"}, headers=headers).json()[
        "items"
    ]
    versions = {
        h["id"]: httpx.get(
            f"{service.url}/v1/candidates/{h['candidate_id']}", headers=headers
        ).json()["version"]
        for h in holds
    }
    (hold,) = [h for h, v in versions.items() if v == "held-" + SHA]
    minted = operator(
        service, "keys", "create", "--tenant", "default", "--role", "reviewer",
        "--person", "Rita Reviewer",
    )  # fmt: skip
    assert minted.returncode == 0, minted.stderr
    reviewer = {"Authorization": f"Bearer {json.loads(minted.stdout)['key']}"}
    waived = httpx.post(
        f"{service.url}/v1/holds/{hold}/waive",
        json={"reason": "accepted for the pilot", "expires_at": f"{SOON}:00Z"},
        headers=reviewer,
    )
    assert waived.status_code == 200, waived.text
    runner.uploaded.clear()
    assert runner.github_job(steps, env, ctx) == 0
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert "## Assaygate: ALLOW" in summary
    # The allow's reports still name what the waiver lifted (issue 47: they dropped it).
    allowed = summary.split("## Assaygate: ALLOW", 1)[1]
    assert "### Waived (what the allow stands over)" in allowed
    gate_case = assert_junit(runner.checkout / "assaygate-junit.xml").find(
        ".//testcase[@name='gate']/system-out"
    )
    assert gate_case is not None and "waived: [hold]" in (gate_case.text or "")
    listed = httpx.get(f"{service.url}/v1/candidates", headers=headers).json()["items"]
    assert [c["version"] for c in listed].count("held-" + SHA) == 1, "no second candidate"
    assert runner.github_job(workflow["jobs"]["deploy"]["steps"], env, ctx) == 0


def test_the_composite_action_installs_from_its_checkout_and_reports_the_decision(
    runner: Runner,
) -> None:
    action = yaml.safe_load((CI / "action" / "action.yml").read_text())
    assert set(action["inputs"]) == {
        "manifest",
        "url",
        "api-key",
        "version",
        "code",
        "extras",
        "python-version",
    }
    output = runner.temp / "output.txt"
    output.touch()
    env = github_env(runner, {}, GITHUB_OUTPUT=str(output))
    ctx = runner.context(
        {
            "inputs.manifest": "examples/copperfin-typed-repair.json",
            "inputs.url": runner.service.url,
            "inputs.api-key": runner.service.key,
            "inputs.version": "action-1",
            "inputs.code": "examples",
            "inputs.extras": "",
            "github.action_path": str(runner.checkout / "deploy" / "ci" / "action"),
        }
    )
    assert runner.github_job(action["runs"]["steps"], env, ctx) == 0
    outputs = output.read_text()
    assert "decision=allow" in outputs
    # The code it uploaded, by the digest the deploy asks about.
    digest = next(line for line in outputs.splitlines() if line.startswith("artifact="))[9:]
    gate = httpx.get(
        f"{runner.service.url}/v1/gate/copperfin-returns",
        params={"artifact": digest},
        headers={"Authorization": f"Bearer {runner.service.key}"},
    )
    assert gate.status_code == 200, gate.text
    assert gate.json()["version"] == "action-1" and gate.json()["decision"] == "allow"
    assert {p.name for p in runner.uploaded} == {"assaygate-dossier.json", "assaygate-junit.xml"}
    assert_junit(runner.checkout / "assaygate-junit.xml")


def gitlab_lines(items: list[Any]) -> list[str]:
    """A GitLab `script`, its YAML anchors (nested lists) flattened."""
    out: list[str] = []
    for item in items:
        out.extend(gitlab_lines(item) if isinstance(item, list) else [str(item)])
    return out


def test_the_gitlab_pipeline_from_a_fresh_checkout_assays_and_deploys_an_allowed_build(
    runner: Runner,
) -> None:
    pipeline = yaml.safe_load((CI / "gitlab-ci.yml").read_text())
    env = {
        **{k: str(v) for k, v in pipeline["variables"].items()},
        "ASSAYGATE_URL": runner.service.url,
        "ASSAYGATE_API_KEY": runner.service.key,
        "CI_COMMIT_SHA": "gitlab-" + SHA,
    }
    # Every job starts with the install anchor; it runs as written once (`Runner.install`), in a
    # shell of its own: the rest of a job uses nothing the install's lines set.
    install = gitlab_lines(pipeline[".assaygate-install"])
    for job in ("assaygate-local", "assaygate", "deploy"):
        lines = gitlab_lines(pipeline[job]["script"])
        assert lines[: len(install)] == install, job
        assert runner.install("\n".join(install), env) == 0, job
        assert runner.shell("\n".join(lines[len(install) :]), env) == 0, job
        for path in pipeline[job]["artifacts"]["paths"]:
            assert (runner.checkout / path).is_file(), (job, path)
    assert pipeline["assaygate"]["artifacts"]["reports"]["junit"] == "assaygate-junit.xml"
    assert_junit(runner.checkout / "assaygate-junit.xml")
    assert (runner.checkout / "deployed.txt").read_text().strip() == f"deploying gitlab-{SHA}"


def test_the_github_local_assay_job_assays_in_the_job_and_keeps_its_reports(
    runner: Runner,
) -> None:
    workflow = yaml.safe_load((CI / "github-actions.yml").read_text())
    env = github_env(runner, workflow)
    assert runner.github_job(workflow["jobs"]["local-assay"]["steps"], env, runner.context({})) == 0
    assert {p.name for p in runner.uploaded} == {
        "assaygate-report.json",
        "assaygate-local-junit.xml",
    }
    assert all(p.is_file() for p in runner.uploaded)
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert "## Assaygate: ALLOW" in summary
    assert "**Report:** [assaygate-report.json](assaygate-report.json)" in summary, "relative"


def test_the_github_deploy_job_reports_a_gate_error_and_still_uploads_the_junit(
    runner: Runner,
) -> None:
    workflow = yaml.safe_load((CI / "github-actions.yml").read_text())
    env = github_env(runner, workflow)
    ctx = runner.context({"github.sha": "never-submitted"})
    # 5, not 3: the gate knows no such candidate (nothing to retry), and the job stops.
    assert runner.github_job(workflow["jobs"]["deploy"]["steps"], env, ctx) == 5
    (junit,) = runner.uploaded
    failure = assert_junit(junit).find(".//testcase[@name='gate']/failure")
    assert failure is not None and failure.get("type") == "error"
    assert "never-submitted" in (failure.text or "")
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert "## Assaygate: ERROR" in summary and "(exit code 5)" in summary
    assert not (runner.checkout / "deployed.txt").exists()
