"""The local assay's report on a terminal: the rates per domain, each fault's line, the decision
with its reasons (block first) and the interpretation boundary."""

from __future__ import annotations

from service.core.decision.gate import block_first
from service.core.decision.report import FaultResult
from service.core.faults.plan import AssayPlan
from service.core.shards.assay import AssayReport
from service.core.system.manifest import Manifest

RATE_COLUMNS = (
    ("detect", "detected"),
    ("contain", "contained"),
    ("recover", "recovered"),
    ("verify", "verified"),
    ("service", "useful_service"),
    ("unsafe", "unsafe_escape"),
    ("dupe", "duplicate_effect"),
    ("unproved", "unverifiable_release"),
)


def _pct(x: float) -> str:
    return f"{100.0 * x:6.1f}%"


def print_report(manifest: Manifest, plan: AssayPlan, report: AssayReport) -> None:
    print("Assaygate fault assay (sandbox world, independent oracle)")
    print(
        f"System: {manifest.system or '-'} {manifest.version or ''} | catalogue: "
        f"{report.catalogue_version} | trials: {report.trials_executed} | seed: {plan.seed}"
    )
    enabled = {c.value for c in manifest.controls.enabled()}
    print(
        "Controls: "
        + ", ".join(
            f"{c}={'ON' if c in enabled else 'off'}" for c in manifest.controls.model_dump()
        )
    )
    header = f"{'domain':10} {'n':>6} " + " ".join(f"{h:>8}" for h, _ in RATE_COLUMNS)
    print()
    print(header)
    print("-" * len(header))
    rows = [*report.by_domain.items(), ("overall", report.overall)]
    for name, summary in rows:
        if name == "overall":
            print("-" * len(header))
        r = summary.signature.rates
        print(
            f"{name:10} {r.trials:6d} " + " ".join(f"{_pct(r.rate(k)):>8}" for _, k in RATE_COLUMNS)
        )
    print()
    print(
        f"{'fault':30} {'n':>6} {'unsafe':>8} {'service':>8} {'transfer T':>11} "
        f"{'counterfactual':>15}"
    )
    for f in report.faults:
        _print_fault(f)
    if report.target_errors_total:
        kinds = ", ".join(f"{k} {v}" for k, v in report.target_errors_by_kind.items())
        print(f"\nTarget errors: {report.target_errors_total} ({kinds})")
        for messages in report.target_error_causes.values():
            for message in messages:
                print(f"  {message}")
    if report.stopped:
        print(f"Stopped: {report.stopped}")
    print()
    print(f"Decision: {report.decision.value.upper()}")
    for reason in block_first(report.reasons):
        print(f"  - [{reason.severity.value}] {reason.message}")
    print(f"\nCoverage: {len(report.visited)} keys visited, {len(report.not_visited)} not visited")
    print(
        "Interpretation boundary: evidence about represented faults in a sandboxed configured "
        "system, not proof of production safety."
    )


def _print_fault(f: FaultResult) -> None:
    r = f.signature.rates
    tt = f"{f.transfer.violation:+.3f}" if f.transfer else "-"
    print(
        f"{f.id:30} {f.exercised:6d} {_pct(r.rate('unsafe_escape')):>8} "
        f"{_pct(r.rate('useful_service')):>8} {tt:>11} {f.counterfactual.status:>15}"
    )
    if f.storm is not None:
        s = f.storm
        wait = s.shortest_wait_ms if s.shortest_wait_ms is not None else "-"
        print(
            f"{'':30} observed: {s.attempts_mean:.1f} attempts a trial, admitted in "
            f"{s.admitted} of {s.trials}, shortest wait {wait} ms"
        )
        print(
            f"{'':30} reference fleet peak concurrent retries: no jitter/budget "
            f"{s.bare_peak_max}, jitter+budget {s.disciplined_peak_max}"
        )
    if f.invariants:
        failed = [f"{k} {v.failed}/{v.trials}" for k, v in f.invariants.items() if v.failed]
        print(f"{'':30} invariants failed: " + (", ".join(failed) if failed else "none"))
    if f.error_kinds:
        kinds = ", ".join(f"{k} {v}" for k, v in f.error_kinds.items())
        print(f"{'':30} target errors: {kinds}")
