"""CI reports of a decision: a JUnit XML file and a GitHub job-summary Markdown file.

One writer for the three commands CI runs (`assay`, `submit`, `gate`). Each builds a
`ReportedDecision` from what it has — the local assay report, or the signed dossier's predicate
with what the gate says now — and `write_reports` writes the files it was asked for.

JUnit: one `<testsuite>` per system, one `<testcase>` per fault (classname the system, name the
fault id); a fault with reasons is a `<failure>` whose `type` is the worst severity, whose
`message` lists the reason codes and whose text gives each reason and the containment signature.
Reasons that name no fault (a stopped assay, a reopened gate, a waiver) are the test case `gate`.
"""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.cli.errors import UsageError
from service.core.decision.gate import ReasonView, block_first, reason_view
from service.core.decision.report import AssayReport

#: The containment signature's columns: (heading, count name).
SIGNATURE = (
    ("detected", "detected"),
    ("contained", "contained"),
    ("recovered", "recovered"),
    ("verified", "verified"),
    ("service", "useful_service"),
    ("unsafe", "unsafe_escape"),
    ("duplicate", "duplicate_effect"),
    ("unproved", "unverifiable_release"),
)
SEVERITY_ORDER = {"error": 0, "block": 0, "reopened": 1, "hold": 2, "allow": 3}
GATE_CASE = "gate"


@dataclass
class FaultLine:
    id: str
    trials: int
    counts: Mapping[str, int]
    reasons: list[ReasonView] = field(default_factory=list)

    def signature(self) -> str:
        return ", ".join(f"{h} {int(self.counts.get(k, 0))}/{self.trials}" for h, k in SIGNATURE)


@dataclass
class ReportedDecision:
    """What one decision says, in the shape both reports read."""

    system: str
    version: str
    decision: str
    reasons: list[ReasonView]
    faults: list[FaultLine]
    #: Where the evidence is: the dossier (service) or the report file (local assay).
    link: str | None = None
    link_label: str = "dossier"
    properties: dict[str, str] = field(default_factory=dict)

    def unattached(self) -> list[ReasonView]:
        ids = {f.id for f in self.faults}
        return [r for r in self.reasons if r["fault"] not in ids]


def _report_rows(report: AssayReport, reasons: Sequence[ReasonView]) -> list[FaultLine]:
    return [
        FaultLine(f.id, f.signature.rates.trials, f.signature.counts, _own(reasons, f.id))
        for f in report.faults
    ]


def _run_rows(runs: Sequence[Mapping[str, Any]], reasons: Sequence[ReasonView]) -> list[FaultLine]:
    """A dossier predicate's runs (signed JSON, read as it was written)."""
    return [
        FaultLine(
            str(run["id"]),
            int(run.get("exercised", 0)),
            (run.get("intervention") or {}).get("counts", {}),
            _own(reasons, str(run["id"])),
        )
        for run in runs
    ]


def _own(reasons: Sequence[ReasonView], fault: str) -> list[ReasonView]:
    return [r for r in reasons if r["fault"] == fault]


def from_report(
    report: AssayReport | Mapping[str, object],
    system: str | None,
    version: str | None,
    link: str | None,
) -> ReportedDecision:
    """A local `assaygate assay` report (typed, or its `to_dict()`)."""
    r = report if isinstance(report, AssayReport) else AssayReport.from_dict(report)
    reasons = [x.view() for x in block_first(r.reasons)]
    return ReportedDecision(
        system=system or "assaygate",
        version=version or "",
        decision=r.decision.value,
        reasons=reasons,
        faults=_report_rows(r, reasons),
        link=link,
        link_label="report",
        properties={"manifest_digest": r.manifest_digest},
    )


def error_outcome(system: str, version: str, message: str) -> ReportedDecision:
    """No decision (exit code 3): the reports say what went wrong, as one failed test case."""
    return ReportedDecision(
        system=system,
        version=version,
        decision="error",
        reasons=[ReasonView(code="error", message=message, fault=None, severity="error")],
        faults=[],
    )


def predicate_of(envelope: Mapping[str, Any]) -> dict[str, Any]:
    """The dossier predicate inside a DSSE envelope (the signed bytes, decoded; not verified)."""
    statement = json.loads(base64.b64decode(str(envelope["payload"])))
    return dict(statement["predicate"])


def from_dossier(
    envelope: Mapping[str, Any],
    *,
    decision: str,
    reasons: Sequence[Mapping[str, object]],
    link: str | None,
) -> ReportedDecision:
    """A signed dossier, with the gate's word now (`decision`, `reasons`, as served) laid over
    it."""
    p = predicate_of(envelope)
    cand = p.get("candidate") or {}
    views = [reason_view(r) for r in reasons]
    return ReportedDecision(
        system=str(cand.get("system", "")),
        version=str(cand.get("version", "")),
        decision=decision,
        reasons=block_first(views),
        faults=_run_rows(p.get("runs") or [], block_first(views)),
        link=link,
        properties={
            "candidate": str(cand.get("id", "")),
            "dossier_version": str(p.get("dossier_version", "")),
            "manifest_digest": str((p.get("manifest") or {}).get("digest", "")),
        },
    )


def _worst(reasons: Sequence[ReasonView]) -> str:
    return min((r["severity"] for r in reasons), key=lambda s: SEVERITY_ORDER.get(s, 2))


def _failure(case: ET.Element, reasons: Sequence[ReasonView], signature: str | None) -> None:
    codes = ", ".join(dict.fromkeys(r["code"] for r in reasons))
    fail = ET.SubElement(
        case, "failure", type=_worst(reasons), message=f"{_worst(reasons)}: {codes}"
    )
    lines = [f"[{r['severity']}] {r['code']}: {r['message']}" for r in reasons]
    if signature is not None:
        lines.append(f"containment signature: {signature}")
    fail.text = "\n".join(lines)


def junit_xml(outcome: ReportedDecision) -> bytes:
    suite_name = f"{outcome.system} {outcome.version}".strip()
    cases: list[ET.Element] = []
    for f in outcome.faults:
        case = ET.Element("testcase", classname=outcome.system, name=f.id)
        if f.reasons:
            _failure(case, f.reasons, f.signature())
        out = ET.SubElement(case, "system-out")
        out.text = f"containment signature ({f.trials} trials): {f.signature()}"
        cases.append(case)
    loose = outcome.unattached()
    if loose or outcome.decision != "allow":
        case = ET.Element("testcase", classname=outcome.system, name=GATE_CASE)
        if outcome.decision != "allow":
            _failure(
                case,
                loose
                or [
                    ReasonView(
                        code=outcome.decision,
                        message="see the faults",
                        fault=None,
                        severity=outcome.decision,
                    )
                ],
                None,
            )
        cases.append(case)
    failures = sum(1 for c in cases if c.find("failure") is not None)
    root = ET.Element(
        "testsuites", name="assaygate", tests=str(len(cases)), failures=str(failures), errors="0"
    )
    suite = ET.SubElement(
        root,
        "testsuite",
        name=suite_name or "assaygate",
        tests=str(len(cases)),
        failures=str(failures),
        errors="0",
        skipped="0",
    )
    props = ET.SubElement(suite, "properties")
    for k, v in {"decision": outcome.decision, **outcome.properties}.items():
        ET.SubElement(props, "property", name=k, value=v)
    if outcome.link:
        ET.SubElement(props, "property", name=outcome.link_label, value=outcome.link)
    suite.extend(cases)
    ET.indent(root)
    return bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True)) + b"\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summary_markdown(outcome: ReportedDecision) -> str:
    title = f"{outcome.system} {outcome.version}".strip()
    lines = [f"## Assaygate: {outcome.decision.upper()} — {_cell(title)}", ""]
    lines.append(f"**Decision:** `{outcome.decision}`")
    if outcome.link:
        label = "Dossier" if outcome.link_label == "dossier" else "Report"
        link = _relative(outcome.link)
        lines.append(f"**{label}:** [{_cell(link)}]({link})")
    lines.append("")
    if outcome.reasons:
        lines.append("### Reasons")
        lines.append("")
        for r in outcome.reasons:
            lines.append(f"- **{r['severity']}** `{r['code']}`: {_cell(r['message'])}")
        lines.append("")
    lines.append("### Faults")
    lines.append("")
    lines.append("| fault | trials | " + " | ".join(h for h, _ in SIGNATURE) + " | reasons |")
    lines.append("|---|---:|" + "---:|" * len(SIGNATURE) + "---|")
    for f in outcome.faults:
        codes = ", ".join(f"`{r['code']}`" for r in f.reasons) or "—"
        counts = " | ".join(str(int(f.counts.get(k, 0))) for _, k in SIGNATURE)
        lines.append(f"| `{f.id}` | {f.trials} | {counts} | {codes} |")
    return "\n".join(lines) + "\n"


def _relative(link: str) -> str:
    """A dashboard URL as it is; a file inside the working directory (the CI job's workspace,
    where the artifact step finds it) by its path relative to it, not the runner's absolute
    path; a file elsewhere as given (its name alone could be any file)."""
    if "://" in link:
        return link
    path = Path(link)
    if not path.is_absolute():
        return path.as_posix()
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return link


def check_paths(*paths: Path | None) -> None:
    """Refuse, before any work, a report path whose folder does not exist."""
    for path in paths:
        if path is not None and path.is_dir():
            raise UsageError(f"cannot write {path}: it is a folder (an empty path?)")
        if path is not None and not path.parent.is_dir():
            raise UsageError(f"cannot write {path}: no folder {path.parent}")


def write_reports(outcome: ReportedDecision, junit: Path | None, summary: Path | None) -> None:
    try:
        if junit is not None:
            junit.write_bytes(junit_xml(outcome))
        if summary is not None:
            # GITHUB_STEP_SUMMARY is appended to by every step of a job: append, never replace.
            with summary.open("a", encoding="utf-8") as fh:
                fh.write(summary_markdown(outcome))
    except OSError as exc:
        raise UsageError(f"cannot write a report: {exc}") from None
