"""Executed trials per second against the paper's reference script, in one session.

    .venv/bin/python bench/assay_throughput.py [--trials 200000] [--memory-trials 2000000]

The "executed" rows run the default install's core (compiled by `make venv` when a compiler is
present; the first line says which); the "compiled core" rows build a scratch mypyc copy.

The reference script looks outcomes up in a table; Assaygate builds a world per trial, runs the
Copperfin workflow through the injector and grades the world. Both run the same count of typed
trials in paper mode. Prints figures and ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.core.faults.plan import AssayPlan  # noqa: E402
from service.core.shards.assay import merge, plan_shards, run_assay, run_shard  # noqa: E402
from service.core.system.manifest import parse_manifest_json  # noqa: E402

DEFAULT_REFERENCE = ROOT.parent / "shared" / "seed" / "reference_injector.py"
#: The row issue 17 measures: the default evidence (three arms), one process.
THREE_ARM = "executed, + matched baseline + counterfactual, 1 process"
MANIFEST = parse_manifest_json((ROOT / "examples" / "copperfin-typed.json").read_text())


def _reference(path: Path, trials: int, seed: int) -> float:
    spec = importlib.util.spec_from_file_location("reference_injector", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["reference_injector"] = mod
    spec.loader.exec_module(mod)
    t0 = time.perf_counter()
    mod.run_experiment(mod.Controls.typed(), list(mod.FaultDomain), trials, seed)
    return time.perf_counter() - t0


def _shard(args: tuple[AssayPlan, object]) -> object:
    plan, shard = args
    return run_shard(MANIFEST, plan, shard)  # type: ignore[arg-type]


def _ours(plan: AssayPlan, workers: int) -> float:
    t0 = time.perf_counter()
    if workers == 1:
        run_assay(MANIFEST, plan, trials_per_shard=10_000)
    else:
        shards = plan_shards(MANIFEST, plan, max(1, plan.trials // (workers * 4)))
        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(_shard, [(plan, s) for s in shards]))
        merge(MANIFEST, plan, results)  # type: ignore[arg-type]
    return time.perf_counter() - t0


def _compiled(n: int, seed: int, full: bool) -> float:
    """The same single-process measurement, run against the mypyc-compiled core."""
    import json
    import subprocess
    import tempfile

    from service.compile import build_compiled_core

    with tempfile.TemporaryDirectory() as tmp:
        root = build_compiled_core(Path(tmp))
        code = (
            "import json, sys, time\n"
            "from pathlib import Path\n"
            "import service.core.trial.sandbox as s\n"
            "assert s.__file__.endswith('.so')\n"
            "from service.core.shards.assay import run_assay\n"
            "from service.core.system.manifest import parse_manifest_json\n"
            "from service.core.faults.plan import AssayPlan\n"
            f"m = parse_manifest_json(Path({str(ROOT / 'examples' / 'copperfin-typed.json')!r})"
            ".read_text())\n"
            f"p = AssayPlan(catalogue='paper', trials={n}, seed={seed}, "
            f"matched_baseline={full}, counterfactuals={full})\n"
            "t = time.perf_counter(); run_assay(m, p, trials_per_shard=10_000)\n"
            "print(json.dumps(time.perf_counter() - t))\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONPATH": str(root)},
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
        return float(json.loads(out.stdout))


_PEAK = (
    "import resource, sys, json\n"
    "{body}\n"
    "print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))\n"
)


def _peak_mb(body: str, pythonpath: Path | None = None) -> float:
    """Peak resident memory (MB) of a fresh interpreter that runs `body`."""
    import json
    import subprocess

    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    out = subprocess.run(
        [sys.executable, "-c", _PEAK.format(body=body)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


def memory(n: int, seed: int, reference: Path) -> float:
    """Peak memory (MB) of the default 3-arm assay, printed against the lookup script's."""
    ours = _peak_mb(
        "from pathlib import Path\n"
        "from service.core.shards.assay import run_assay\n"
        "from service.core.system.manifest import parse_manifest_json\n"
        "from service.core.faults.plan import AssayPlan\n"
        "m = parse_manifest_json(Path('examples/copperfin-typed.json').read_text())\n"
        f"run_assay(m, AssayPlan(catalogue='paper', trials={n}, seed={seed}))"
    )
    print(f"peak memory, default 3-arm assay, {n:,} trials          {ours:7.1f} MB")
    if reference.exists():
        ref = _peak_mb(
            "import importlib.util\n"
            f"spec = importlib.util.spec_from_file_location('ri', {str(reference)!r})\n"
            "mod = importlib.util.module_from_spec(spec); sys.modules['ri'] = mod\n"
            "spec.loader.exec_module(mod)\n"
            f"mod.run_experiment(mod.Controls.typed(), list(mod.FaultDomain), {n}, {seed})"
        )
        print(
            f"peak memory, reference script, {n:,} trials               {ref:7.1f} MB  "
            f"ratio {ours / ref:5.2f}x"
        )
    return ours


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=188)
    ap.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE)
    ap.add_argument("--no-compiled", action="store_true", help="skip the scratch compiled build")
    ap.add_argument(
        "--memory-trials",
        type=int,
        default=2_000_000,
        help="trials for the peak-memory rows (0 skips them)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="runs of the reference and of the 3-arm row, interleaved; each prints its best",
    )
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = ap.parse_args()
    figures: dict[str, object] = {"trials": args.trials, "memory_trials": args.memory_trials}
    n = args.trials
    intervention = AssayPlan(
        catalogue="paper", trials=n, seed=args.seed, matched_baseline=False, counterfactuals=False
    )
    full = AssayPlan(catalogue="paper", trials=n, seed=args.seed)
    # The extra arms on every trial instead of the default evidence sample: what sampling saves.
    everything = AssayPlan(catalogue="paper", trials=n, seed=args.seed, evidence_sample=None)
    from service.compile import state

    print(
        f"typed trials: {n:,} (paper catalogue, seed {args.seed}); cores: {os.cpu_count()}; "
        f"default install's core: {state()}"
    )
    figures["core"] = state()
    ref = None
    # The reference and the row issue 17 measures run in turns, each kept at its best (fastest)
    # run: on a shared machine the other load only ever slows a run down, so the minimum is the
    # least disturbed figure of each, taken under the same conditions.
    best: dict[str, float] = {}
    if args.reference.exists():
        refs, arms = [], []
        for _ in range(max(1, args.repeat)):
            refs.append(_reference(args.reference, n, args.seed))
            arms.append(_ours(full, 1))
        ref, best[THREE_ARM] = min(refs), min(arms)
        figures["reference_s"] = ref
        print(
            f"reference script (table lookup)        {ref:7.2f} s  {n / ref:10,.0f} trials/s"
            f"  (best of {len(refs)}: {', '.join(f'{r:.2f}' for r in refs)})"
        )
        # This box's speed drifts within seconds (the script alone has read 1.07-1.99 s in one
        # run), so the two bests can come from different moments: each round's own ratio, taken
        # seconds apart, and their median drift least.
        rounds = [a / r for a, r in zip(arms, refs, strict=True)]
        figures["three_arm_ratio_rounds"] = rounds
        figures["three_arm_ratio_median"] = statistics.median(rounds)
        print(
            f"3-arm / reference, round by round      {statistics.median(rounds):7.2f}x median"
            f"  ({', '.join(f'{r:.2f}' for r in rounds)})"
        )
    else:
        print(f"reference script not found at {args.reference}: ratios skipped")
    rows = [
        ("executed, intervention arm, 1 process", intervention, 1),
        ("executed, intervention arm, 2 processes", intervention, 2),
        (THREE_ARM, full, 1),
        ("executed, + matched baseline + counterfactual, 2 processes", full, 2),
        ("executed, every arm on every trial, 1 process", everything, 1),
    ]
    for label, plan, workers in rows:
        t = best[label] if label in best else _ours(plan, workers)
        figures[label] = t
        ratio = f"  ratio {t / ref:5.2f}x" if ref else ""
        print(f"{label:58} {t:7.2f} s  {n / t:10,.0f} trials/s{ratio}")
    if not args.no_compiled:
        # What the production image runs: the same source, its hot modules compiled by mypyc.
        for label, full in (
            ("compiled core, intervention arm, 1 process", False),
            ("compiled core, + matched baseline + counterfactual, 1 process", True),
        ):
            t = _compiled(n, args.seed, full)
            ratio = f"  ratio {t / ref:5.2f}x" if ref else ""
            print(f"{label:58} {t:7.2f} s  {n / t:10,.0f} trials/s{ratio}")
    if args.memory_trials:
        figures["peak_mb"] = memory(args.memory_trials, args.seed, args.reference)
    if args.json is not None:
        import json

        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
