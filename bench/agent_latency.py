"""A real agent's cost: the MCP warehouse example with a simulated model latency per step.

The careful and the blind (commit-blind) agents of examples/mcp-warehouse wait `--model-ms` before
each tool call (WAREHOUSE_MODEL_MS: a model deciding the step) and report their usage. Each is
assayed with the fixed plan and with the sequential plan at the same error and cap (`--trials`
trials per fault), and prints one JSON object:

- `speedup_concurrency_8`: wall time to the decision at concurrency 1 over concurrency 8 (the
  example's servers offer 8 isolated worlds, `--slots 8`; the agents are warm, `--lines`);
- `runs_ratio_sequential`: agent runs (every arm: intervention, matched baseline, sensitivity
  pair) of the sequential plan over the fixed plan's, for the careful agent;
- `decision_same`: both plans decide alike for the careful and the blind agent;
- `defective_runs_to_block`: the sequential plan's agent runs before the blind agent's block;
- the runs, seconds and decisions behind them.

Benchmarks print figures; they assert nothing.

    .venv/bin/python bench/agent_latency.py --json [--model-ms 200] [--trials 60]
        [--mode ship_order_timeout_after_commit]
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

from bench.mcp_target import _port, _wait  # noqa: E402
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


def _assay(manifest: Any, plan: dict[str, Any], concurrency: int = 1) -> dict[str, Any]:
    parsed = validate_plan({**plan, "catalogue": catalogue_for(manifest)})
    target = load_target(manifest, egress=EgressPolicy.local(), slots=concurrency)
    start = time.monotonic()
    try:
        report = run_assay(
            manifest, parsed, target=target, clock=time.monotonic, concurrency=concurrency
        )
    finally:
        close_target(target)
    data = report.to_dict()
    spend = data.get("spend") or {}
    return {
        "decision": data["decision"],
        "seconds": round(time.monotonic() - start, 2),
        "runs": (spend.get("total") or {}).get("runs"),
        "arms": {a: s["runs"] for a, s in (spend.get("arms") or {}).items()},
        "stops": {f["id"]: (f.get("stop") or {}).get("code") for f in data["faults"]},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--model-ms", type=float, default=200.0)
    ap.add_argument("--trials", type=int, default=60, help="trials per fault (the cap)")
    ap.add_argument("--mode", action="append", default=None)
    args = ap.parse_args(argv)
    os.environ["WAREHOUSE_MODEL_MS"] = str(args.model_ms)
    modes = args.mode or ["ship_order_timeout_after_commit"]
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
    runs: dict[str, dict[str, Any]] = {}
    for name, manifest in (("careful", careful), ("blind", blind)):
        for rule in ("fixed", "sequential"):
            runs[f"{name}_{rule}"] = _assay(manifest, {**base, "rule": rule})
    one = _assay(careful, {**base, "rule": "fixed"}, concurrency=1)
    eight = _assay(careful, {**base, "rule": "fixed"}, concurrency=SLOTS)
    speedup = round(one["seconds"] / eight["seconds"], 2)
    note = f"{one['seconds']} s at concurrency 1, {eight['seconds']} s at {SLOTS}"
    runs["careful_fixed_concurrency_8"] = eight
    fixed, seq = runs["careful_fixed"], runs["careful_sequential"]
    return {
        "speedup_concurrency_8": speedup,
        "speedup_note": note,
        "runs_ratio_sequential": round(seq["runs"] / fixed["runs"], 3),
        "decision_same": all(
            runs[f"{n}_fixed"]["decision"] == runs[f"{n}_sequential"]["decision"]
            for n in ("careful", "blind")
        ),
        "defective_runs_to_block": runs["blind_sequential"]["runs"],
        "model_ms": args.model_ms,
        "trials_per_fault": args.trials,
        "modes": modes,
        "assays": runs,
    }


if __name__ == "__main__":
    sys.exit(main())
