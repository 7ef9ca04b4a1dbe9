"""Comparing a service's report with the local assay's: the same figures, whatever the clock."""

from __future__ import annotations

from typing import Any


def figures(report: dict[str, Any]) -> dict[str, Any]:
    """The report without what its runs spent (`spend`, at the top and per fault) and where they
    ran (`sandbox`, the tenant worker's posture): a worker times its runs (seconds differ run to
    run) and confines code in its own sandbox, while the local reference assay here is neither
    timed nor sandboxed; every count, rate, reason and decision stays."""
    out = {k: v for k, v in report.items() if k not in ("spend", "sandbox")}
    out["faults"] = [{k: v for k, v in f.items() if k != "spend"} for f in report["faults"]]
    return out
