"""What sharing the no-fault baseline per tool saves on a whole catalogue: the MCP warehouse
example's 24 faults (on 7 tools) at `--trials` per fault, run by the core's scheduler against a
simulated careful agent (every run clean, every floor met: an engine that grades each run as
contained, recovered, verified and useful, and never as a violation), so the figure is what the
plan spends, not what an agent does. Prints one JSON object: the team's agent runs of the fixed
plan with a baseline per fault, the fixed plan with shared baselines, the sequential plan with
shared baselines, their ratios to the first, and the load. With a declared tolerance
(`--max-violation-rate`, default 0.05) two more rows run the sequential plan at that p0, a
baseline per fault and shared: the manifest's envelope is the default one there (floors on the
lower bound, where a careful agent can stop early; `manifest.careful.json` states `point` for its
smoke runs, whose unset 0.99 containment floor needs 680 clean runs).

Benchmarks print figures; they assert nothing.

    .venv/bin/python bench/shared_baseline.py [--trials 200] [--max-violation-rate 0.05]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.core.faults.catalogue import FaultSpec  # noqa: E402
from service.core.faults.contract_catalogue import catalogue_for  # noqa: E402
from service.core.faults.plan import validate_plan  # noqa: E402
from service.core.shards.assay import run_assay  # noqa: E402
from service.core.system.manifest import parse_manifest  # noqa: E402
from service.core.trial.oracle import FLAGS, Flag, Outcome  # noqa: E402
from service.core.trial.record import TrialRecord  # noqa: E402
from service.core.trial.rng import Stream  # noqa: E402
from service.core.trial.world import Workload, World  # noqa: E402

_GOOD = {Flag.CONTAINED, Flag.RECOVERED, Flag.VERIFIED, Flag.USEFUL_SERVICE}
_CLEAN = tuple(flag in {g.value for g in _GOOD} for flag in FLAGS)


class Careful:
    """A trial engine whose every run is clean and fires its fault; the gate's naive agent (the
    sensitivity pair, not the team's runs) shows each fault's predicted violation."""

    def run_trial(
        self,
        spec: FaultSpec | None,
        workload_key: int,
        storm_key: int,
        disabled: frozenset[str],
        capture: bool,
    ) -> TrialRecord:
        w = Workload(Stream(workload_key))
        rec = TrialRecord(Outcome(_CLEAN, 1, "ok"), True, [], None, None, None, w, World(w))
        rec.reachable = True if spec is None else None
        if spec is not None and spec.predicted_transfer is not None and not disabled:
            # The gate's naive agent shows the predicted violation (the sensitivity pair).
            naive = tuple(f == str(spec.predicted_transfer) for f in FLAGS)
            rec.sensitivity = Outcome(naive, 1, "naive")
        return rec


def _team_runs(manifest: Any, plan: dict[str, Any]) -> tuple[int, str, float]:
    if plan.pop("default_envelope", False):
        envelope = manifest.envelope.model_copy(update={"floor_on": "lower_bound"})
        manifest = manifest.model_copy(update={"envelope": envelope})
    parsed = validate_plan({**plan, "catalogue": catalogue_for(manifest)})
    start = time.monotonic()
    report = run_assay(manifest, parsed, target=Careful(), clock=lambda: 0.0).to_dict()
    spend = report["spend"]
    return int(spend["team"]["runs"]), str(report["decision"]), time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--max-violation-rate", type=float, default=0.05, metavar="P0")
    args = ap.parse_args(argv)
    data = json.loads((ROOT / "examples" / "mcp-warehouse" / "manifest.careful.json").read_text())
    manifest = parse_manifest(data)
    catalogue = catalogue_for(manifest)
    base = {"trials": args.trials, "seed": 188}
    p0 = args.max_violation_rate
    tolerant = {**base, "rule": "sequential", "max_violation_rate": p0, "default_envelope": True}
    plans = {
        "fixed_per_fault": {**base, "rule": "fixed"},
        "fixed_shared": {**base, "rule": "fixed", "baseline": "shared"},
        "sequential_shared": {**base, "rule": "sequential", "baseline": "shared"},
        "sequential_p0": {**tolerant, "baseline": "per_fault"},
        "sequential_p0_shared": {**tolerant, "baseline": "shared"},
    }
    out: dict[str, Any] = {
        "faults": len(catalogue.faults),
        "tools": len({f.target for f in catalogue.faults}),
        "trials_per_fault": args.trials,
    }
    for name, plan in plans.items():
        runs, decision, seconds = _team_runs(manifest, plan)
        out[name] = {"team_runs": runs, "decision": decision, "seconds": round(seconds, 2)}
    ref = out["fixed_per_fault"]["team_runs"]
    out["ratio_fixed_shared"] = round(out["fixed_shared"]["team_runs"] / ref, 3)
    out["ratio_sequential_shared"] = round(out["sequential_shared"]["team_runs"] / ref, 3)
    out["p0"] = p0
    out["ratio_sequential_p0"] = round(out["sequential_p0"]["team_runs"] / ref, 3)
    out["ratio_sequential_p0_shared"] = round(out["sequential_p0_shared"]["team_runs"] / ref, 3)
    out["load"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
