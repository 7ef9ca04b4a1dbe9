"""Regenerate tests/assets/reference_figures.json from the paper's reference script.

The figures are the reference script's own output: `reference_injector.py`, extracted verbatim
from the paper (the seed, `seed/reference_injector.py` beside the design documents; it is not
part of this repository and its code is never copied into it). The seed's README publishes its
table — seed 188, 2,000 trials: the baseline profile releases unsafe effects in 69.5 % of injected
cases; the typed profile has 0 % unsafe escape and 90.6 % recovery, proof and useful service —
and the first case of each profile is that table; the other cases vary seed, trial count and
family so the paper mode is compared on more than one draw.

    python tests/assets/regenerate_reference_figures.py /path/to/seed/reference_injector.py

rewrites the asset in place (`--check` only compares). Run it when the case list changes; the
figures themselves never change, as the script is fixed."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ASSET = Path(__file__).with_name("reference_figures.json")
# (seed, trials, family) for each profile, in the asset's order; the first is the published table.
CASES: list[tuple[int, int, str]] = [
    (188, 2000, "all"),
    (1, 137, "all"),
    (42, 999, "tool"),
    (7, 50, "evidence"),
    (2026, 3001, "all"),
    (99, 11, "state"),
    (123456789, 500, "identity"),
    (5, 1, "all"),
]
PROFILES = ("baseline", "typed")
SOURCE = (
    "python3 reference_injector.py --profile P --trials N --seed S --fault F --json (the paper's "
    "script from the seed; regenerate with tests/assets/regenerate_reference_figures.py)"
)


def figures(script: Path) -> dict[str, Any]:
    cases = []
    for profile in PROFILES:
        for seed, trials, fault in CASES:
            command = [sys.executable, str(script), "--profile", profile, "--trials", str(trials)]
            command += ["--seed", str(seed), "--fault", fault, "--json"]
            out = json.loads(subprocess.run(command, capture_output=True, check=True).stdout)
            cases.append(
                {
                    "by_domain": out["by_domain"],
                    "fault": fault,
                    "overall": out["overall"],
                    "profile": profile,
                    "seed": seed,
                    "trials": trials,
                }
            )
    return {"cases": cases, "source": SOURCE}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", type=Path, help="the seed's reference_injector.py")
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    fresh = figures(args.script)
    if args.check:
        held = json.loads(ASSET.read_text())
        same = held["cases"] == fresh["cases"]
        print("the asset matches the script" if same else "the asset differs from the script")
        return 0 if same else 1
    ASSET.write_text(json.dumps(fresh, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
