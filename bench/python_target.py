"""Trials per second of a `python` target: called in the assay's process vs served by its child.

    .venv/bin/python bench/python_target.py [--trials 500] [--mode timeout_after_commit]

The target is the typed Copperfin workflow as a user's callable (tests/targets/agents/typed.py).
"in-process" calls it directly with the core `Tools`, as the python target did before it moved to a
child process; "child process" is what `load_target` gives now: the callable in its own process,
driven over the HTTP target protocol. Each row is the best of `--repeat` runs (the machine may be
shared). Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.core.faults.plan import AssayPlan, parse_plan  # noqa: E402
from service.core.shards.assay import run_assay  # noqa: E402
from service.core.system.manifest import Manifest, parse_manifest  # noqa: E402
from service.core.trial.target import Target  # noqa: E402
from service.targets import close_target, load_target  # noqa: E402

ENTRYPOINT = "tests.targets.agents.typed:run"


def _manifest() -> Manifest:
    data = json.loads((ROOT / "examples" / "copperfin-typed.json").read_text())
    data["target"] = {"kind": "python", "entrypoint": ENTRYPOINT}
    return parse_manifest(data)


def _best(manifest: Manifest, plan: AssayPlan, target: Target, repeat: int) -> tuple[float, int]:
    best, errors = float("inf"), 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        report = run_assay(manifest, plan, target=target).to_dict()
        best = min(best, time.perf_counter() - t0)
        errors = max(errors, sum(f["target_errors"] for f in report["faults"]))
    return best, errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=500)
    ap.add_argument("--mode", default="timeout_after_commit")
    ap.add_argument("--seed", type=int, default=188)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    manifest = _manifest()
    base = {"catalogue": "full", "trials": args.trials, "seed": args.seed, "modes": [args.mode]}
    plans = (
        (
            "intervention arm only",
            parse_plan({**base, "matched_baseline": False, "counterfactuals": False}),
        ),
        ("+ matched baseline + counterfactual", parse_plan(base)),
    )
    warm_up = parse_plan({**base, "trials": 5})
    from tests.targets.agents.typed import run as in_process

    child = load_target(manifest)
    assert child is not None
    print(
        f"python target {ENTRYPOINT}: {args.trials} trials of {args.mode}, seed {args.seed}, "
        f"best of {args.repeat}; {os.cpu_count()} CPUs"
    )
    print(f"{'':38} {'in-process':>14} {'child process':>14} {'ratio':>7}")
    try:
        for target in (in_process, child):
            run_assay(manifest, warm_up, target=target)
        for label, plan in plans:
            t_in, _ = _best(manifest, plan, in_process, args.repeat)
            t_child, errors = _best(manifest, plan, child, args.repeat)
            print(
                f"{label:38} {args.trials / t_in:>8,.0f} tr/s {args.trials / t_child:>8,.0f} tr/s "
                f"{t_child / t_in:>6.0f}x"
            )
            if errors:
                print(
                    f"  warning: {errors} target errors in the child-process runs", file=sys.stderr
                )
    finally:
        close_target(child)


if __name__ == "__main__":
    main()
