"""The harness frees each trial by reference counting: no trial leaves cyclic garbage behind."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.core.assay import run_assay
from service.core.manifest import parse_manifest_json
from service.core.plan import AssayPlan

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def saved_garbage() -> Iterator[list[object]]:
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.collect()


@pytest.mark.parametrize("catalogue", ["paper", "full"])
def test_trials_leave_no_reference_cycles_for_the_collector(
    saved_garbage: list[object], catalogue: str
) -> None:
    manifest = parse_manifest_json((EXAMPLES / "copperfin-typed.json").read_text())
    run_assay(manifest, AssayPlan(catalogue=catalogue, trials=60, seed=7))
    gc.collect()
    kinds = sorted({type(o).__qualname__ for o in saved_garbage})
    assert saved_garbage == [], f"cyclic garbage of {len(saved_garbage)} objects: {kinds[:12]}"


def test_the_shard_loop_gives_back_the_collector_thresholds_it_found() -> None:
    before = gc.get_threshold()
    manifest = parse_manifest_json((EXAMPLES / "copperfin-typed.json").read_text())
    run_assay(manifest, AssayPlan(catalogue="paper", trials=20, seed=7))
    assert gc.get_threshold() == before
