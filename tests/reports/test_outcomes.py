"""Every outcome's JUnit leads with why: allow, hold, block and error have the same test cases,
the `gate` case names the decision's first reason (never `hold: hold`), each failing fault carries
its diagnosis and remediation, and an error's summary is titled by the error."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from service.cli.reports import FaultLine
from tests.reports.test_reports import assaygate, cases
from tests.support.service import EXAMPLES

OUTCOMES = {"allow": 0, "block": 1, "hold": 2, "error": 3}
MANIFESTS = {
    "allow": "copperfin-typed-repair.json",
    "block": "copperfin-baseline.json",
    "hold": "copperfin-refuse-all.json",
}


def _manifest(outcome: str, tmp_path: Path) -> Path:
    if outcome != "error":
        return EXAMPLES / MANIFESTS[outcome]
    # A python target whose module does not exist: the assay cannot start (exit 3).
    data: dict[str, Any] = json.loads((EXAMPLES / "copperfin-typed.json").read_text())
    data["target"] = {"kind": "python", "entrypoint": "no_such_team_module:run"}
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path, dict]]:
    """Each outcome's JUnit, summary and (when it decided) report, from one real assay each (16
    trials a fault: the fewest in which a perfect record clears the default floors)."""
    out: dict[str, tuple[Path, Path, dict]] = {}
    for outcome, code in OUTCOMES.items():
        folder = tmp_path_factory.mktemp(outcome)
        junit, summary, report = folder / "j.xml", folder / "s.md", folder / "r.json"
        done = assaygate(
            "assay", str(_manifest(outcome, folder)), "--trials", "16",
            "--junit", str(junit), "--summary", str(summary), "--report-out", str(report),
        )  # fmt: skip
        assert done.returncode == code, (outcome, done.stderr[-2000:])
        out[outcome] = (junit, summary, json.loads(report.read_text()) if report.exists() else {})
    return out


def test_every_outcome_has_the_same_test_cases(reports: dict[str, tuple[Path, Path, dict]]) -> None:
    names = {outcome: list(cases(junit)) for outcome, (junit, _, _) in reports.items()}
    assert names["allow"][0] == "gate"
    assert len(names["allow"]) == 19  # the gate and the full catalogue's 18 faults
    for outcome in ("block", "hold", "error"):
        assert names[outcome] == names["allow"], outcome


@pytest.mark.parametrize("outcome", ["allow", "block", "hold"])
def test_the_gate_case_names_the_decision_and_its_first_reason(
    reports: dict[str, tuple[Path, Path, dict]], outcome: str
) -> None:
    junit, _, report = reports[outcome]
    gate = ET.parse(junit).getroot().find(".//testcase[@name='gate']")
    assert gate is not None
    failure = gate.find("failure")
    if outcome == "allow":
        assert failure is None
        assert (gate.findtext("system-out") or "").startswith("allow")
        return
    assert failure is not None
    message = failure.get("message") or ""
    first = report["reasons"][0]
    assert message.startswith(f"{outcome}: {first['code']}"), message
    assert f"{outcome}: {outcome}" not in message
    assert "see the faults" not in (failure.text or "")


def test_an_error_is_the_gate_cases_message_and_the_faults_are_skipped(
    reports: dict[str, tuple[Path, Path, dict]],
) -> None:
    junit, summary, _ = reports["error"]
    root = ET.parse(junit).getroot()
    gate = root.find(".//testcase[@name='gate']")
    assert gate is not None
    failure = gate.find("failure")
    assert failure is not None and failure.get("type") == "error"
    assert "no_such_team_module" in (failure.get("message") or "")
    assert "error: error" not in (failure.get("message") or "")
    assert len(root.findall(".//testcase/skipped")) == 18
    text = summary.read_text()
    assert (
        text.startswith("## Assaygate: ERROR — ") and "no_such_team_module" in text.splitlines()[0]
    )
    assert "### Faults" not in text


def test_a_failing_fault_carries_its_diagnosis_and_remediation(
    reports: dict[str, tuple[Path, Path, dict]],
) -> None:
    junit, summary, report = reports["block"]
    found = cases(junit)
    failing = [f for f in report["faults"] if f.get("diagnosis") and f["id"] in found]
    fault = next(f for f in failing if found[f["id"]].find("failure") is not None)
    text = found[fault["id"]].findtext("failure") or ""
    assert f"diagnosis: first boundary {fault['diagnosis']['first_boundary']}" in text
    assert f"remediation: {fault['diagnosis']['remediation']}" in text
    summary_text = summary.read_text()
    assert "### What failed, and what to change" in summary_text
    assert f"remediation: {fault['diagnosis']['remediation']}" in summary_text


def test_the_faults_table_lists_failing_faults_first(
    reports: dict[str, tuple[Path, Path, dict]],
) -> None:
    table = reports["hold"][1].read_text().split("### Faults")[1]
    rows = [r for r in table.splitlines() if r.startswith("| `")]
    failing = [not r.rstrip().endswith("| — |") for r in rows]
    assert failing == sorted(failing, reverse=True) and failing[0]


def test_a_storms_admissions_are_in_its_diagnosis() -> None:
    line = FaultLine(
        "retry_storm",
        200,
        {},
        storm={"trials": 200, "observed": {"admitted": 0, "attempts_mean": 1.0}},
    )
    assert "storm: admitted in 0 of 200, 1.0 attempts a trial, shortest wait - ms" in (
        line.diagnosed()
    )
