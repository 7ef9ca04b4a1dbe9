"""Comparing a service's report with the local assay's: the same figures, whatever the clock."""

from __future__ import annotations

from typing import Any


def figures(report: dict[str, Any]) -> dict[str, Any]:
    """The report without what its runs spent (`spend`, at the top and per fault): a worker times
    its runs (seconds differ run to run) and the local reference assay here is not timed; every
    count, rate, reason and decision stays."""
    out = {k: v for k, v in report.items() if k != "spend"}
    out["faults"] = [{k: v for k, v in f.items() if k != "spend"} for f in report["faults"]]
    return out
