"""The harness frees each trial by reference counting: no trial leaves cyclic garbage behind."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest

from service.core.faults.plan import AssayPlan
from service.core.shards.assay import run_assay
from service.core.system.manifest import parse_manifest_json

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


# In an interpreter of its own: whatever earlier tests of this process leave to the collector
# (an event loop, a thread pool) must not count against the harness.
PROBE = """
import gc, json, sys
from pathlib import Path
from service.core.shards.assay import run_assay
from service.core.system.manifest import parse_manifest_json
from service.core.faults.plan import AssayPlan

manifest = parse_manifest_json(Path(sys.argv[1]).read_text())
gc.collect()
gc.set_debug(gc.DEBUG_SAVEALL)
run_assay(manifest, AssayPlan(catalogue=sys.argv[2], trials=60, seed=7))
gc.collect()
print(json.dumps(sorted({type(o).__qualname__ for o in gc.garbage}) + [len(gc.garbage)]))
"""


@pytest.mark.parametrize("catalogue", ["paper", "full"])
def test_trials_leave_no_reference_cycles_for_the_collector(catalogue: str) -> None:
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, str(EXAMPLES / "copperfin-typed.json"), catalogue],
        capture_output=True,
        text=True,
        check=True,
    )
    *kinds, count = json.loads(probe.stdout)
    assert count == 0, f"cyclic garbage of {count} objects: {kinds[:12]}"


def test_the_shard_loop_gives_back_the_collector_thresholds_it_found() -> None:
    before = gc.get_threshold()
    manifest = parse_manifest_json((EXAMPLES / "copperfin-typed.json").read_text())
    run_assay(manifest, AssayPlan(catalogue="paper", trials=20, seed=7))
    assert gc.get_threshold() == before
