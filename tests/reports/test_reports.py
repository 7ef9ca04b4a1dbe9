"""`--junit` and `--summary` on `assay`, `submit` and `gate`: one JUnit test case per fault that
the Jenkins JUnit schema accepts, failures carrying the reason codes and the containment
signature, and a job-summary Markdown with the decision, the reasons, the per-fault table and a
link to the evidence."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
import xmlschema

from service.cli.reports import ReportedDecision, from_dossier, junit_xml, summary_markdown
from tests.support.embedded import Embedded, embedded_service
from tests.support.service import EXAMPLES, ROOT

JUNIT_XSD = xmlschema.XMLSchema(ROOT / "tests" / "assets" / "junit-10.xsd")
MODES = ["--mode", "timeout_after_commit", "--mode", "subject_swap", "--mode", "fork_run"]


def assaygate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        cwd=ROOT,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        check=False,
    )


def cases(path: Path) -> dict[str, ET.Element]:
    JUNIT_XSD.validate(str(path))
    root = ET.parse(path).getroot()
    return {c.get("name", ""): c for c in root.iter("testcase")}


def test_a_blocked_assay_writes_one_schema_valid_test_case_per_fault_failing_with_its_reasons(
    tmp_path: Path,
) -> None:
    junit, summary, report = tmp_path / "a.xml", tmp_path / "s.md", tmp_path / "report.json"
    done = assaygate(
        "assay", str(EXAMPLES / "copperfin-baseline.json"), "--trials", "10", *MODES,
        "--junit", str(junit), "--summary", str(summary), "--report-out", str(report),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    found = cases(junit)
    assert {"timeout_after_commit", "subject_swap", "fork_run"} <= set(found)
    assert all(c.get("classname") == "copperfin-returns" for c in found.values())
    failure = found["timeout_after_commit"].find("failure")
    assert failure is not None and failure.get("type") == "block"
    assert "duplicate_effect" in (failure.get("message") or "")
    assert "containment signature: detected" in (failure.text or "")
    text = summary.read_text()
    assert "## Assaygate: BLOCK" in text and "**Decision:** `block`" in text
    assert "| `timeout_after_commit` | 10 |" in text
    assert f"[{report}]({report})" in text and report.is_file()


def test_an_allowed_assay_writes_test_cases_that_all_pass(tmp_path: Path) -> None:
    # 16 trials a fault: the fewest in which a perfect record clears the default floors.
    junit = tmp_path / "a.xml"
    done = assaygate(
        "assay", str(EXAMPLES / "copperfin-typed-repair.json"), "--trials", "16", *MODES,
        "--junit", str(junit),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = cases(junit)
    assert set(found) == {"gate", "timeout_after_commit", "subject_swap", "fork_run"}
    assert all(c.find("failure") is None for c in found.values())
    assert (found["gate"].findtext("system-out") or "").startswith("allow")
    assert "detected 16/16" in (found["fork_run"].findtext("system-out") or "")


def test_a_summary_is_appended_so_earlier_steps_keep_theirs(tmp_path: Path) -> None:
    summary = tmp_path / "step-summary.md"
    summary.write_text("## an earlier step\n")
    done = assaygate(
        "assay", str(EXAMPLES / "copperfin-typed-repair.json"), "--trials", "16", *MODES,
        "--summary", str(summary),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert summary.read_text().startswith("## an earlier step\n## Assaygate: ALLOW")


@pytest.mark.parametrize("command", ["assay", "submit"])
def test_a_report_path_in_a_missing_folder_is_one_line_and_exit_3_before_any_work(
    command: str, tmp_path: Path
) -> None:
    done = assaygate(
        command, str(EXAMPLES / "copperfin-typed.json"), "--junit", str(tmp_path / "no" / "a.xml")
    )
    assert done.returncode == 3
    assert done.stderr.count("\n") == 1 and "no folder" in done.stderr


def test_an_empty_summary_path_outside_ci_is_one_line_and_exit_3(tmp_path: Path) -> None:
    done = assaygate("assay", str(EXAMPLES / "copperfin-typed.json"), "--summary", "")
    assert done.returncode == 3
    assert done.stderr.count("\n") == 1 and "it is a folder" in done.stderr


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Embedded]:
    data_dir = tmp_path_factory.mktemp("reports-service")
    with embedded_service(
        [sys.executable, "-m", "service.cli"], data_dir, {"PYTHONPATH": str(ROOT)}
    ) as running:
        yield running


def test_submit_and_gate_write_the_same_reports_from_the_signed_dossier(
    service: Embedded, tmp_path: Path
) -> None:
    env = {"ASSAYGATE_URL": service.url, "ASSAYGATE_API_KEY": service.key}
    junit, summary = tmp_path / "submit.xml", tmp_path / "submit.md"
    submitted = assaygate(
        "submit", str(EXAMPLES / "copperfin-baseline.json"), "--wait", "--trials", "10",
        "--version", "9.9.1", "--junit", str(junit), "--summary", str(summary),
        env=env,
    )  # fmt: skip
    assert submitted.returncode == 1, submitted.stderr
    found = cases(junit)
    assert len(found) >= 18  # the full catalogue, one case per fault, and the gate
    failure = found["timeout_after_commit"].find("failure")
    assert failure is not None and "duplicate_effect" in (failure.get("message") or "")
    text = summary.read_text()
    assert "**Decision:** `block`" in text and "**Dossier:** [" in text
    # The link goes to the dossier's page, not the candidate's.
    link = text.split("**Dossier:** [")[1].split("]")[0]
    assert "/candidates/" in link and link.endswith("/dossier")

    gate_junit, gate_summary = tmp_path / "gate.xml", tmp_path / "gate.md"
    gated = assaygate(
        "gate", "copperfin-returns", "--version", "9.9.1",
        "--junit", str(gate_junit), "--summary", str(gate_summary), env=env,
    )  # fmt: skip
    assert gated.returncode == 1, gated.stderr
    assert set(cases(gate_junit)) == set(found)
    assert gate_summary.read_text() == text


def test_a_summary_shows_a_version_and_reasons_written_as_markup_as_text() -> None:
    outcome = ReportedDecision(
        system="refunds",
        version="[login](https://evil.example) <img src=x>",
        decision="hold",
        reasons=[
            {
                "code": "build_mismatch",
                "message": "![x](https://evil.example/p.png) | \\",
                "fault": None,
                "severity": "hold",
            }
        ],
        faults=[],
    )
    text = summary_markdown(outcome)
    title = text.splitlines()[0]
    assert title == (
        "## Assaygate: HOLD — refunds \\[login\\](https://evil.example) &lt;img src=x&gt;"
    )
    assert "- **hold** `build_mismatch`: !\\[x\\](https://evil.example/p.png) \\| \\\\" in text
    assert "<img" not in text and "[login]" not in text


def test_after_a_waiver_junit_and_the_summary_still_name_the_reasons_it_lifted() -> None:
    """The signed version a waiver adds names only the waiver; the gate's answer carries what it
    lifted (`waived`), and an allow's reports say it (issue 47: they dropped them)."""
    predicate = {
        "candidate": {"system": "refunds", "version": "2.0", "id": "c-1"},
        "runs": [
            {"id": "timeout_after_commit", "exercised": 10, "intervention": {"counts": {}}},
            {"id": "stale_policy", "exercised": 10, "intervention": {"counts": {}}},
        ],
    }
    payload = base64.b64encode(json.dumps({"predicate": predicate}).encode()).decode()
    lifted = {
        "code": "counterfactual_untested",
        "message": "no pair ran for idempotency",
        "fault": "timeout_after_commit",
        "severity": "hold",
    }
    waiver = {"code": "waived", "message": "held reasons waived by Rita", "severity": "allow"}
    outcome = from_dossier(
        {"payload": payload},
        decision="allow",
        reasons=[waiver],
        link="https://gate.example/candidates/c-1/dossier",
        waived=[lifted],
    )
    root = ET.fromstring(junit_xml(outcome))
    assert root.find(".//failure") is None, "an allow fails no test case"
    gate = root.find(".//testcase[@name='gate']/system-out")
    assert gate is not None and (
        "waived: [hold] counterfactual_untested: no pair ran for idempotency" in (gate.text or "")
    )
    fault = root.find(".//testcase[@name='timeout_after_commit']/system-out")
    assert fault is not None and "waived: [hold] counterfactual_untested" in (fault.text or "")
    other = root.find(".//testcase[@name='stale_policy']/system-out")
    assert other is not None and "waived" not in (other.text or "")
    assert root.find(".//property[@name='waived']").get("value") == "counterfactual_untested"  # type: ignore[union-attr]
    text = summary_markdown(outcome)
    assert "### Waived (what the allow stands over)" in text
    assert (
        "- **hold** `counterfactual_untested` (timeout_after_commit): no pair ran for idempotency"
        in text
    )
    assert (
        "| `timeout_after_commit` | 10 |" in text and "`counterfactual_untested` (waived)" in text
    )
