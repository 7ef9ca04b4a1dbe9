"""CI reports of a decision: a JUnit XML file and a GitHub job-summary Markdown file.

One writer for the three commands CI runs (`assay`, `submit`, `gate`). Each builds a
`ReportedDecision` from what it has — the local assay report, or the signed dossier's predicate
with what the gate says now — and `write_reports` writes the files it was asked for.

JUnit: one `<testsuite>` per system, one `<testcase>` per fault (classname the system, name the
fault id) and always the test case `gate`, so every outcome (allow, hold, block, error) has the
same test cases. A fault with reasons is a `<failure>` whose `type` is the worst severity, whose
`message` lists the reason codes and whose text gives each reason, the fault's diagnosis (first
boundary, missing control, remediation; a storm's admissions) and the containment signature.
`gate` leads with the decision's first reasons (`hold: counterfactual_masked
(timeout_after_commit); floor:recovered (...)`), fault or not; an error is its message, and the
faults it never reached are skipped.
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
from service.core.errors import AssaygateError
from service.core.faults.catalogue import catalogue_named

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
#: How many reasons the gate case's message names before "and N more".
LEADING = 2


@dataclass
class FaultLine:
    id: str
    trials: int
    counts: Mapping[str, int]
    reasons: list[ReasonView] = field(default_factory=list)
    # As the report and the dossier write them (Diagnosis.to_dict, StormView.to_dict).
    diagnosis: Mapping[str, Any] | None = None
    storm: Mapping[str, Any] | None = None
    #: Its reasons a waiver in force lifted: no failure, but never dropped from the report.
    waived: list[ReasonView] = field(default_factory=list)

    def signature(self) -> str:
        return ", ".join(f"{h} {int(self.counts.get(k, 0))}/{self.trials}" for h, k in SIGNATURE)

    def diagnosed(self) -> list[str]:
        """What the terminal prints under a failing fault: where it broke and what to change."""
        lines: list[str] = []
        d = self.diagnosis
        if d:
            missing = ", ".join(d.get("missing_control") or []) or "none"
            lines.append(
                f"diagnosis: first boundary {d.get('first_boundary')}; earliest signal "
                f"{d.get('earliest_signal') or 'none'}; missing control: {missing}"
            )
            if d.get("remediation"):
                lines.append(f"remediation: {d['remediation']}")
        storm = self.storm or {}
        observed = storm.get("observed") or {}
        if observed:
            wait = observed.get("shortest_wait_ms")
            lines.append(
                f"storm: admitted in {observed.get('admitted')} of {storm.get('trials')}, "
                f"{float(observed.get('attempts_mean', 0)):.1f} attempts a trial, shortest wait "
                f"{'-' if wait is None else wait} ms"
            )
        return lines


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
    #: For `error`: the command's exit code (3, or `gate`'s 5 for a candidate it does not know).
    exit_code: int = 3
    #: The held reasons a waiver in force lifted (the gate's `waived`).
    waived: list[ReasonView] = field(default_factory=list)

    def unattached(self) -> list[ReasonView]:
        ids = {f.id for f in self.faults}
        return [r for r in self.reasons if r["fault"] not in ids]


def _report_rows(report: AssayReport, reasons: Sequence[ReasonView]) -> list[FaultLine]:
    return [
        FaultLine(
            f.id,
            f.signature.rates.trials,
            f.signature.counts,
            _own(reasons, f.id),
            f.diagnosis.to_dict() if f.diagnosis else None,
            f.storm.to_dict() if f.storm else None,
        )
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
            run.get("diagnosis"),
            run.get("storm"),
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


def catalogue_faults(name: str | None) -> list[str]:
    """The fault ids a catalogue schedules (`full` unless named; a custom file: none known)."""
    try:
        return [f.id for f in catalogue_named(name or "full").faults]
    except AssaygateError:
        return []


def error_outcome(
    system: str, version: str, message: str, faults: Sequence[str] = (), exit_code: int = 3
) -> ReportedDecision:
    """No decision (exit code 3, or 5): the reports say what went wrong, as the failed test
    case `gate`; the catalogue's faults, never reached, are skipped test cases (the same test
    cases as a decision has)."""
    return ReportedDecision(
        system=system,
        version=version,
        decision="error",
        reasons=[ReasonView(code="error", message=message, fault=None, severity="error")],
        faults=[FaultLine(f, 0, {}) for f in faults],
        exit_code=exit_code,
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
    waived: Sequence[Mapping[str, object]] = (),
) -> ReportedDecision:
    """A signed dossier, with the gate's word now (`decision`, `reasons`, `waived`, as served)
    laid over it."""
    p = predicate_of(envelope)
    cand = p.get("candidate") or {}
    views = [reason_view(r) for r in reasons]
    lifted = block_first([reason_view(r) for r in waived])
    faults = _run_rows(p.get("runs") or [], block_first(views))
    for line in faults:
        line.waived = _own(lifted, line.id)
    return ReportedDecision(
        system=str(cand.get("system", "")),
        version=str(cand.get("version", "")),
        decision=decision,
        reasons=block_first(views),
        faults=faults,
        waived=lifted,
        link=link,
        properties={
            "candidate": str(cand.get("id", "")),
            "dossier_version": str(p.get("dossier_version", "")),
            "manifest_digest": str((p.get("manifest") or {}).get("digest", "")),
        },
    )


def _worst(reasons: Sequence[ReasonView]) -> str:
    return min((r["severity"] for r in reasons), key=lambda s: SEVERITY_ORDER.get(s, 2))


def _failure(case: ET.Element, reasons: Sequence[ReasonView], line: FaultLine) -> None:
    codes = ", ".join(dict.fromkeys(r["code"] for r in reasons))
    fail = ET.SubElement(
        case, "failure", type=_worst(reasons), message=f"{_worst(reasons)}: {codes}"
    )
    lines = [f"[{r['severity']}] {r['code']}: {r['message']}" for r in reasons]
    lines += line.diagnosed()
    lines.append(f"containment signature: {line.signature()}")
    fail.text = "\n".join(lines)


def leading_reasons(outcome: ReportedDecision) -> str:
    """The decision and its first reasons, in the order every reader lists them:
    `hold: counterfactual_masked (timeout_after_commit); floor:recovered (...) and 9 more`."""
    if outcome.decision == "error":
        first = outcome.reasons[0]["message"] if outcome.reasons else "no reason given"
        return f"error: {first.splitlines()[0] if first else 'no reason given'}"
    shown = [
        f"{r['code']} ({r['fault']})" if r["fault"] else r["code"]
        for r in outcome.reasons[:LEADING]
    ]
    if not shown:
        return f"{outcome.decision}: no reasons given"
    more = len(outcome.reasons) - LEADING
    return f"{outcome.decision}: {'; '.join(shown)}" + (f" and {more} more" if more > 0 else "")


def _waived_lines(reasons: Sequence[ReasonView]) -> list[str]:
    return [f"waived: [{r['severity']}] {r['code']}: {r['message']}" for r in reasons]


def _gate_case(outcome: ReportedDecision) -> ET.Element:
    case = ET.Element("testcase", classname=outcome.system, name=GATE_CASE)
    text = [f"[{r['severity']}] {r['code']}: {r['message']}" for r in outcome.reasons]
    # An allow over a waiver still names what the waiver lifted.
    text += _waived_lines(outcome.waived)
    if outcome.decision == "allow":
        out = ET.SubElement(case, "system-out")
        out.text = "\n".join([leading_reasons(outcome), *text])
        return case
    fail = ET.SubElement(case, "failure", type=outcome.decision, message=leading_reasons(outcome))
    fail.text = "\n".join(text)
    return case


def junit_xml(outcome: ReportedDecision) -> bytes:
    suite_name = f"{outcome.system} {outcome.version}".strip()
    # The gate first: a reader of the test report meets the decision and its first reasons.
    cases: list[ET.Element] = [_gate_case(outcome)]
    for f in outcome.faults:
        case = ET.Element("testcase", classname=outcome.system, name=f.id)
        if outcome.decision == "error":
            ET.SubElement(case, "skipped", message="not assayed: the run ended in an error")
        elif f.reasons:
            _failure(case, f.reasons, f)
        out = ET.SubElement(case, "system-out")
        out.text = "\n".join(
            [
                f"containment signature ({f.trials} trials): {f.signature()}",
                *_waived_lines(f.waived),
                *(f.diagnosed() if f.waived and not f.reasons else []),
            ]
        )
        cases.append(case)
    failures = sum(1 for c in cases if c.find("failure") is not None)
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
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
        skipped=str(skipped),
    )
    props = ET.SubElement(suite, "properties")
    shown = {"decision": outcome.decision, **outcome.properties}
    if outcome.waived:
        shown["waived"] = ", ".join(dict.fromkeys(r["code"] for r in outcome.waived))
    for k, v in shown.items():
        ET.SubElement(props, "property", name=k, value=v)
    if outcome.link:
        ET.SubElement(props, "property", name=outcome.link_label, value=outcome.link)
    suite.extend(cases)
    ET.indent(root)
    return bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True)) + b"\n"


def _cell(text: str) -> str:
    """`text` as plain text on one line of the summary (a table cell included): what could make
    a link, an image or HTML of it (`[`, `]`, `<`, `>`; a backslash) escaped, so a version or a
    message such as `[login](https://evil.example)` or `<img …>` shows as typed."""
    for raw, escaped in _MARKDOWN_ESCAPES:
        text = text.replace(raw, escaped)
    return text.replace("\n", " ")


_MARKDOWN_ESCAPES = (
    ("\\", "\\\\"),
    ("|", "\\|"),
    ("[", "\\["),
    ("]", "\\]"),
    ("<", "&lt;"),
    (">", "&gt;"),
)


def summary_markdown(outcome: ReportedDecision) -> str:
    title = f"{outcome.system} {outcome.version}".strip()
    if outcome.decision == "error":
        # Titled by what went wrong: a file name says nothing, and no fault was reached.
        lines = [f"## Assaygate: ERROR — {_cell(leading_reasons(outcome).removeprefix('error: '))}"]
        lines += ["", f"**System:** {_cell(title)}"]
        lines += [f"**Decision:** none (exit code {outcome.exit_code})", ""]
        return "\n".join(lines) + "\n"
    lines = [f"## Assaygate: {outcome.decision.upper()} — {_cell(title)}", ""]
    first = leading_reasons(outcome).removeprefix(f"{outcome.decision}: ")
    lines.append(f"**Decision:** `{outcome.decision}` — {_cell(first)}")
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
    if outcome.waived:
        lines += ["### Waived (what the allow stands over)", ""]
        for r in outcome.waived:
            where = f" ({_cell(r['fault'])})" if r["fault"] else ""
            lines.append(f"- **{r['severity']}** `{r['code']}`{where}: {_cell(r['message'])}")
        lines.append("")
    failing = [f for f in outcome.faults if f.reasons]
    if failing:
        lines += ["### What failed, and what to change", ""]
        for f in failing:
            codes = ", ".join(f"`{c}`" for c in dict.fromkeys(r["code"] for r in f.reasons))
            lines.append(f"- `{f.id}` ({codes}): {_cell('; '.join(f.diagnosed()) or '—')}")
        lines.append("")
    lines.append("### Faults")
    lines.append("")
    lines.append("| fault | trials | " + " | ".join(h for h, _ in SIGNATURE) + " | reasons |")
    lines.append("|---|---:|" + "---:|" * len(SIGNATURE) + "---|")
    # Failing faults first, each group in the report's order.
    for f in sorted(outcome.faults, key=lambda f: not f.reasons):
        named = [f"`{r['code']}`" for r in f.reasons]
        named += [f"`{r['code']}` (waived)" for r in f.waived]
        codes = ", ".join(named) or "—"
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
