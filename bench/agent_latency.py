"""A real agent's cost: the MCP warehouse example with a simulated model latency per step.

The careful and the blind (commit-blind) agents of examples/mcp-warehouse wait `--model-ms` before
each tool call (WAREHOUSE_MODEL_MS: a model deciding the step) and report their usage. Several
faults (`--mode`, four by default) are assayed at once, so what is measured is the scheduler that
runs them side by side on the example's 8 slots (`--slots 8`; the agents are warm, `--lines`),
each with the fixed plan and with the sequential plan at the same error and cap (`--trials`
trials per fault). Prints one JSON object:

- `speedup_concurrency_8`: the careful agent's fixed-plan wall time at concurrency 1 over 8;
- `team_runs_ratio`: what the team pays, the team's agent runs (intervention, matched baseline,
  counterfactual pairs; not the sensitivity pair's naive agent, the gate's own) of the sequential
  plan with its baselines shared per tool (`baseline: shared`) over the fixed plan's with a
  baseline per fault (the plan every assay ran before sharing) for the careful agent, at
  concurrency 1 (`team_runs_ratio_8` at 8); `team_runs_ratio_sharing` is the fixed plan with
  shared baselines over the same denominator (what sharing alone saves, at 8), and
  `team_runs_ratio_same_baselines` the sequential plan over the fixed plan both shared (what
  the sequential rule alone saves: 1.00 for a careful agent without a declared tolerance);
- `runs_ratio_sequential`: every agent run (the naive agent's too) of the sequential plan over
  the fixed plan's for the careful agent, at concurrency 1 and at 8 (`runs_ratio_sequential_8`);
  `runs_ratio_sequential_blind` likewise for the blind agent (its first violation ends each
  fault);
- `runs_same_any_concurrency`: every fault's runs, per arm, and the assay's runs per arm (the
  shared baselines' among them) are the same at concurrency 1 and 8, under both plans and for
  both agents, and under a budget;
- `budget_overshoot_runs`: a `max_runs` budget of half the careful fixed plan's team runs, at
  concurrency 8: the team's runs paid past it, those of trials run past the stop included
  (documented bound: the trials in flight);
- `decision_same`: both plans decide alike for the careful and the blind agent, at 1 and 8;
- `load`: the box's load average (1, 5, 15 minutes) when the bench ended;
- `cpu_concurrency_8`: the CPU seconds the careful agent's fixed-plan assay at 8 used, by process
  (`engine`: the gate, its proxies and its CEL child; `agent`: the warm agents; `servers`: the
  example's), beside `box`, what every process on the box used meanwhile (other work included),
  and `box_cores`: at 8 slots the assay can be bound by CPU, not by the model's latency;
- the runs, seconds, CPU and decisions behind them (`assays`).

`--only KEY` runs one assay of the grid (`careful_fixed_8`, `blind_sequential_1`, ...) and prints
its figures alone: what to profile. Benchmarks print figures; they assert nothing.

    .venv/bin/python bench/agent_latency.py --json [--model-ms 200] [--trials 6]
        [--mode ship_order_timeout_after_commit ...] [--only careful_fixed_8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
EXAMPLE = ROOT / "examples" / "mcp-warehouse"

from bench.mcp_target import _cpu_by_role, _port, _wait  # noqa: E402
from service.core.faults.contract_catalogue import catalogue_for  # noqa: E402
from service.core.faults.plan import validate_plan  # noqa: E402
from service.core.shards.assay import run_assay  # noqa: E402
from service.core.system.manifest import parse_manifest  # noqa: E402
from service.net.egress import EgressPolicy  # noqa: E402
from service.targets import close_target, load_target  # noqa: E402

SLOTS = 8


def _manifest(agent: str, shop: int, admin: int) -> Any:
    data = json.loads((EXAMPLE / "manifest.careful.json").read_text())
    data["version"] = f"1.0.0-{agent}"
    # Warm agents (a process per slot): a real agent loads its SDK and model client once.
    data["target"]["runner"]["command"] = [
        *(sys.executable, str(EXAMPLE / "agents.py"), agent, "--lines")
    ]
    data["target"]["runner"]["protocol"] = "lines"
    data["tools"]["slots"] = SLOTS
    data["tools"]["servers"] = {
        "shop": {"url": f"http://127.0.0.1:{shop}/s/{{slot}}/mcp"},
        "admin": {"url": f"http://127.0.0.1:{admin}/s/{{slot}}/mcp"},
    }
    return parse_manifest(data)


MODES = [
    "ship_order_timeout_after_commit",
    "issue_credit_timeout_after_commit",
    "ship_order_partial_reply",
    "get_order_subject_swap",
]


def _box_cpu() -> float:
    """CPU seconds every process on the box has used since it booted (/proc/stat's first line:
    every state but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = sum(fields[:8]) - fields[3] - fields[4]
    return busy / os.sysconf("SC_CLK_TCK")


def _assay(manifest: Any, plan: dict[str, Any], concurrency: int = 1) -> dict[str, Any]:
    parsed = validate_plan({**plan, "catalogue": catalogue_for(manifest)})
    target = load_target(manifest, egress=EgressPolicy.local(), slots=concurrency)
    before, box = _cpu_by_role(os.getpid()), _box_cpu()
    start = time.monotonic()
    try:
        report = run_assay(
            manifest, parsed, target=target, clock=time.monotonic, concurrency=concurrency
        )
        seconds = time.monotonic() - start
        # Read before the target closes: its warm agents are still running.
        after, box = _cpu_by_role(os.getpid()), _box_cpu() - box
    finally:
        close_target(target)
    cpu = {role: round(after[role] - before[role], 2) for role in after}
    cpu["box"] = round(box, 2)
    cpu["box_cores"] = round(box / seconds, 2) if seconds > 0 else 0.0
    data = report.to_dict()
    spend = data.get("spend") or {}
    past = spend.get("past_stop") or {}
    return {
        "decision": data["decision"],
        "seconds": round(seconds, 2),
        "cpu": cpu,
        "runs": (spend.get("total") or {}).get("runs"),
        "team_runs": (spend.get("team") or {}).get("runs"),
        "gate_runs": (spend.get("gate") or {}).get("runs"),
        "past_stop_team_runs": past.get("team_runs", 0),
        "arms": {a: s["runs"] for a, s in (spend.get("arms") or {}).items()},
        "stops": {f["id"]: (f.get("stop") or {}).get("code") for f in data["faults"]},
        "fault_runs": {
            f["id"]: {a: s["runs"] for a, s in (f.get("spend") or {}).items()}
            for f in data["faults"]
        },
        "stopped": data.get("stopped"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--model-ms", type=float, default=200.0)
    ap.add_argument("--trials", type=int, default=6, help="trials per fault (the cap)")
    ap.add_argument("--mode", action="append", default=None)
    grid = [
        f"{n}_{r}_{c}"
        for n in ("careful", "blind")
        for r in ("fixed", "sequential")
        for c in (1, SLOTS)
    ]
    ap.add_argument("--only", default=None, choices=grid, help="one assay of the grid alone")
    args = ap.parse_args(argv)
    os.environ["WAREHOUSE_MODEL_MS"] = str(args.model_ms)
    modes = args.mode or MODES
    with tempfile.TemporaryDirectory() as tmp:
        shop, admin = _port(), _port()
        servers = subprocess.Popen(
            [
                *(sys.executable, str(EXAMPLE / "servers.py"), "http", "--db", f"{tmp}/world.db"),
                *("--shop-port", str(shop), "--admin-port", str(admin), "--slots", str(SLOTS)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait(shop)
            _wait(admin)
            out = _measure(args, modes, shop, admin)
        finally:
            servers.terminate()
            servers.wait(10)
    print(json.dumps(out, indent=None if args.json else 2))
    return 0


def _measure(args: argparse.Namespace, modes: list[str], shop: int, admin: int) -> dict[str, Any]:
    careful, blind = _manifest("careful", shop, admin), _manifest("blind", shop, admin)
    base = {"trials": args.trials, "seed": 188, "modes": modes}
    # The fixed plan as every assay ran it before sharing (a baseline per fault); the sequential
    # plan shares its baselines per tool.
    shares: dict[str, dict[str, Any]] = {"fixed": {}, "sequential": {"baseline": "shared"}}
    runs: dict[str, dict[str, Any]] = {}
    for name, manifest in (("careful", careful), ("blind", blind)):
        for rule in ("fixed", "sequential"):
            for concurrency in (1, SLOTS):
                key = f"{name}_{rule}_{concurrency}"
                if args.only not in (None, key):
                    continue
                runs[key] = _assay(manifest, {**base, "rule": rule, **shares[rule]}, concurrency)
    if args.only is not None:
        return {"load": [round(x, 2) for x in os.getloadavg()], "assays": runs}
    runs[f"careful_fixed_shared_{SLOTS}"] = _assay(
        careful, {**base, "rule": "fixed", "baseline": "shared"}, SLOTS
    )
    fixed = runs[f"careful_fixed_{SLOTS}"]
    budget = max(1, fixed["team_runs"] // 2)
    stop = {"max_runs": budget}
    for concurrency in (1, SLOTS):
        runs[f"careful_fixed_budget_{concurrency}"] = _assay(
            careful, {**base, "rule": "fixed", "stop": stop}, concurrency
        )
    one, eight = runs["careful_fixed_1"], runs[f"careful_fixed_{SLOTS}"]
    spent = runs[f"careful_fixed_budget_{SLOTS}"]

    def ratio(name: str, concurrency: int, what: str = "runs") -> float:
        seq = runs[f"{name}_sequential_{concurrency}"][what]
        return round(seq / runs[f"{name}_fixed_{concurrency}"][what], 3)

    pairs = [
        (f"{n}_{r}_1", f"{n}_{r}_{SLOTS}")
        for n in ("careful", "blind")
        for r in ("fixed", "sequential")
    ] + [("careful_fixed_budget_1", f"careful_fixed_budget_{SLOTS}")]
    return {
        "speedup_concurrency_8": round(one["seconds"] / eight["seconds"], 2),
        "speedup_note": f"{one['seconds']} s at concurrency 1, {eight['seconds']} s at {SLOTS}",
        "team_runs_ratio": ratio("careful", 1, "team_runs"),
        "team_runs_ratio_8": ratio("careful", SLOTS, "team_runs"),
        "runs_ratio_sequential": ratio("careful", 1),
        "runs_ratio_sequential_8": ratio("careful", SLOTS),
        "runs_ratio_sequential_blind": ratio("blind", 1),
        "team_runs_ratio_sharing": round(
            runs[f"careful_fixed_shared_{SLOTS}"]["team_runs"] / eight["team_runs"], 3
        ),
        "team_runs_ratio_same_baselines": round(
            runs[f"careful_sequential_{SLOTS}"]["team_runs"]
            / runs[f"careful_fixed_shared_{SLOTS}"]["team_runs"],
            3,
        ),
        "runs_same_any_concurrency": all(
            (runs[a]["fault_runs"], runs[a]["arms"]) == (runs[b]["fault_runs"], runs[b]["arms"])
            for a, b in pairs
        ),
        "budget_overshoot_runs": max(0, spent["team_runs"] + spent["past_stop_team_runs"] - budget),
        "budget_max_runs": budget,
        "decision_same": all(
            runs[f"{n}_fixed_{c}"]["decision"] == runs[f"{n}_sequential_{c}"]["decision"]
            for n in ("careful", "blind")
            for c in (1, SLOTS)
        ),
        "defective_runs_to_block": runs["blind_sequential_1"]["runs"],
        "model_ms": args.model_ms,
        "trials_per_fault": args.trials,
        "modes": modes,
        "load": [round(x, 2) for x in os.getloadavg()],
        "cpu_concurrency_8": eight["cpu"],
        "assays": runs,
    }


if __name__ == "__main__":
    sys.exit(main())
