"""The JUnit report and the job summary list block reasons first, whatever order the gate's
answer or an older signed dossier gave them in."""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ET

from service.cli.reports import from_dossier, junit_xml, summary_markdown

REASONS = [
    {"code": "counterfactual_untested", "message": "held", "fault": "f", "severity": "hold"},
    {"code": "duplicate_effect", "message": "blocked", "fault": "f", "severity": "block"},
]


def _envelope() -> dict[str, str]:
    predicate = {
        "candidate": {"id": "c", "system": "s", "version": "1"},
        "runs": [{"id": "f", "exercised": 3, "intervention": {"counts": {}}}],
        "reasons": REASONS,
    }
    statement = json.dumps({"predicate": predicate}).encode()
    return {"payload": base64.b64encode(statement).decode()}


def test_a_blocked_dossiers_summary_and_junit_failure_lead_with_the_block_reason() -> None:
    outcome = from_dossier(_envelope(), decision="block", reasons=REASONS, link=None)
    assert [r["code"] for r in outcome.reasons] == ["duplicate_effect", "counterfactual_untested"]
    summary = summary_markdown(outcome)
    assert summary.index("`duplicate_effect`") < summary.index("`counterfactual_untested`")
    failure = ET.fromstring(junit_xml(outcome)).find(".//failure")
    assert failure is not None and failure.get("type") == "block"
    assert (failure.text or "").splitlines()[0].startswith("[block] duplicate_effect")
