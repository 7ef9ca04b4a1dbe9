"""Running an assay in process as an attempt of a release: the fixed plan's merge reads the
release's earlier floor records, as the worker's merge does; the other plans refuse them rather
than drop them."""

from __future__ import annotations

import pytest

from service.core.decision.floors import Record
from service.core.faults.plan import parse_plan
from service.core.shards.assay import run_assay
from service.core.system.manifest import Envelope, Manifest

EARLIER = {"subject_swap": {("useful_service", "intervention"): Record(1, 6, 6)}}


def test_the_fixed_plan_reads_a_floor_on_the_releases_record(typed_repair: Manifest) -> None:
    m = typed_repair.model_copy(update={"envelope": Envelope()})
    plan = parse_plan({"trials": 16, "seed": 3, "modes": ["subject_swap"]})
    views = {
        (v["floor"], v["arm"]): v for v in run_assay(m, plan, earlier=EARLIER).faults[0].floors
    }
    service = views[("useful_service", "intervention")]
    pooled = service["pooled"]
    assert isinstance(pooled, dict)
    # 6 and 16 perfect trials: 22, short of the 27 the confidence sequence needs at 0.80.
    assert (pooled["attempts"], pooled["successes"], pooled["trials"]) == (2, 22, 22)
    assert service["met"] is False
    assert "pooled" not in views[("useful_service", "baseline")]


def test_a_sequential_plan_in_process_refuses_earlier_records(typed_repair: Manifest) -> None:
    plan = parse_plan({"trials": 16, "seed": 3, "modes": ["subject_swap"], "rule": "sequential"})
    with pytest.raises(ValueError, match="fixed plan"):
        run_assay(typed_repair, plan, earlier=EARLIER)
