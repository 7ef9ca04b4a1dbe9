"""Trials per second of an assay over the HTTP target, with 1 and 2 worker processes.

    .venv/bin/python bench/http_target.py [--trials 100] [--agent-processes 2]

Starts the example agent (examples/http-agent, typed switches) as its own process, then assays it
over loopback on the full catalogue: each worker process runs its shards with its own HTTP target
adapter and sandbox tool server, as a Celery worker would. A "trial" is one planned fault trial;
each also runs its matched baseline and, where a control is nominated, its counterfactual, so the
agent serves more tasks than there are trials: both rates are printed, with the CPU time a trial
costs the workers and the agent together (steadier than the wall clock on a shared machine).
`--json FILE` writes the figures for bench/summary.py. Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.core.faults.plan import AssayPlan, parse_plan  # noqa: E402
from service.core.shards.assay import ShardResult, ShardSpec, merge, plan_shards, run_shard  # noqa: E402
from service.core.system.manifest import Manifest, parse_manifest  # noqa: E402
from service.core.trial.sandbox import Task, Tools  # noqa: E402
from service.targets import HttpTarget  # noqa: E402

AGENT = ROOT / "examples" / "http-agent" / "agent.py"

# Issue 17: the HTTP target path on 2 workers (intervention arm), and what a proxy peer does.
ANCHOR = 367.0
AIM = 565.0

_target: HttpTarget | None = None
_runs = 0


def _manifest(url: str) -> Manifest:
    data = json.loads((ROOT / "examples" / "copperfin-typed.json").read_text())
    data["target"] = {"kind": "http", "url": url}
    return parse_manifest(data)


def _counting(task: Task, tools: Tools) -> None:
    global _runs
    _runs += 1
    assert _target is not None
    _target(task, tools)


def _init(url: str) -> None:
    global _target
    _target = HttpTarget(url)


def _shard(args: tuple[str, AssayPlan, ShardSpec]) -> tuple[ShardResult, int]:
    global _runs
    url, plan, shard = args
    before = _runs
    result = run_shard(_manifest(url), plan, shard, target=_counting)
    return result, _runs - before


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU time so far of these processes and their threads."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def agent_pids(agent: int) -> list[int]:
    """The example agent and the processes it forked."""
    children = Path(f"/proc/{agent}/task/{agent}/children").read_text().split()
    return [agent, *map(int, children)]


def _measure(
    url: str, plan: AssayPlan, workers: int, agent: list[int]
) -> tuple[float, int, int, float]:
    """Seconds, trials, agent tasks, and CPU seconds of the workers and the agent together: on a
    shared machine the CPU a trial costs is steadier than the wall clock."""
    manifest = _manifest(url)
    shards = plan_shards(manifest, plan, max(1, plan.trials // 2))
    cpu0 = cpu_seconds(agent)
    t0 = time.perf_counter()
    with ProcessPoolExecutor(workers, initializer=_init, initargs=(url,)) as pool:
        out = list(pool.map(_shard, [(url, plan, s) for s in shards]))
        elapsed = time.perf_counter() - t0
        cpu = cpu_seconds([*agent, *pool._processes]) - cpu0
    report = merge(manifest, plan, [r for r, _ in out]).to_dict()
    errors = sum(f["target_errors"] for f in report["faults"])
    if errors:
        print(f"  warning: {errors} target errors", file=sys.stderr)
    return elapsed, int(report["trials_executed"]), sum(n for _, n in out), cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=100, help="trials per fault (full catalogue)")
    ap.add_argument("--seed", type=int, default=188)
    ap.add_argument(
        "--agent-processes", type=int, default=2, help="processes serving the example agent"
    )
    ap.add_argument(
        "--intervention-only", action="store_true", help="skip the full-assay rows (faster)"
    )
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    ap.add_argument("--agent", type=Path, default=AGENT, help="the agent script (to compare)")
    args = ap.parse_args()
    agent = subprocess.Popen(
        [
            sys.executable,
            str(args.agent),
            "--port",
            "0",
            "--controls",
            "typed",
            "--processes",
            str(args.agent_processes),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert agent.stdout is not None
        url = agent.stdout.readline().split()[-1]
        plan = parse_plan({"catalogue": "full", "trials": args.trials, "seed": args.seed})
        print(
            f"HTTP target: example agent ({args.agent_processes} processes) at {url}; "
            f"full catalogue, {args.trials} trials per fault, seed {args.seed}; "
            f"{os.cpu_count()} CPUs"
        )
        pids = agent_pids(agent.pid)
        warm = parse_plan({"catalogue": "full", "trials": 2, "seed": 1})
        _measure(url, warm, 1, pids)
        header = ("workers", "trials", "tasks", "seconds", "trials/s", "tasks/s", "CPU ms/trial")
        intervention = plan.model_copy(update={"matched_baseline": False, "counterfactuals": False})
        only = ("intervention arm only: one agent task per trial", "intervention", intervention)
        variants = [only]
        if not args.intervention_only:
            variants.insert(
                0, ("full assay: intervention, matched baseline and counterfactual", "full", plan)
            )
        figures: dict[str, dict[str, float]] = {}
        for label, key, variant in variants:
            print(label)
            print("{:>7} {:>7} {:>7} {:>8} {:>9} {:>8} {:>13}".format(*header))
            for workers in (1, 2):
                elapsed, trials, runs, cpu = _measure(url, variant, workers, pids)
                print(
                    f"{workers:>7} {trials:>7} {runs:>7} {elapsed:>8.2f} "
                    f"{trials / elapsed:>9.0f} {runs / elapsed:>8.0f} {cpu / trials * 1000:>13.2f}"
                )
                figures[f"{key}_{workers}"] = {
                    "trials_per_s": trials / elapsed,
                    "cpu_ms_per_trial": cpu / trials * 1000,
                }
        two = figures["intervention_2"]
        # What two otherwise idle cores could do: the wall-clock rate depends on the neighbours.
        print(
            f"2 workers, intervention arm: {two['trials_per_s']:.0f} trials/s measured, "
            f"{2000 / two['cpu_ms_per_trial']:.0f} trials/s on 2 idle cores at "
            f"{two['cpu_ms_per_trial']:.2f} CPU ms per trial; anchor {ANCHOR:.0f}, aim {AIM:.0f}"
        )
        if args.json is not None:
            args.json.write_text(json.dumps({"anchor": ANCHOR, "aim": AIM, **figures}, indent=2))
    finally:
        agent.terminate()
        agent.wait(timeout=10)


if __name__ == "__main__":
    main()
