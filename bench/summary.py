"""Every issue-17 figure in one table, against its anchor and its aim.

    .venv/bin/python bench/summary.py [--quick] [--out DIR] [--reuse]

Runs bench/assay_throughput.py (the 3-arm assay against the paper's lookup script, and peak
memory), bench/http_target.py (the example HTTP agent on 2 workers) and bench/gate_latency.py
(16 clients on the gate route, against PostgreSQL), each writing its figures as JSON into `--out`;
`--reuse` reads a bench's JSON from there instead of running it again. `--quick` shortens every
bench (fewer trials, a shorter load; the memory row then runs fewer than 2,000,000 trials and
says so) so the whole table takes a few minutes; the full run takes longer. Prints figures and
ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

# The anchors are issue 17's measurements on the default install; the aims are what it asks for.
ASSAY_ANCHOR, ASSAY_AIM = 16.3, 3.0
MEMORY_ANCHOR_MB, MEMORY_AIM_MB = 462.0, 100.0
MEMORY_TRIALS = 2_000_000


@dataclass(frozen=True)
class Row:
    figure: str
    anchor: float
    measured: float | None
    aim: float
    unit: str
    lower_is_better: bool
    note: str = ""

    def cells(self) -> list[str]:
        if self.measured is None:
            return [self.figure, f"{self.anchor:g} {self.unit}", "not run", "", "", self.note]
        ratio = self.measured / self.anchor
        met = self.measured <= self.aim if self.lower_is_better else self.measured >= self.aim
        sign = "≤" if self.lower_is_better else "≥"
        return [
            self.figure,
            f"{self.anchor:g} {self.unit}",
            f"{_number(self.measured)} {self.unit}",
            f"{ratio:.2f}x",
            f"{sign} {self.aim:g} {self.unit}: {'met' if met else 'not met'}",
            self.note,
        ]


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _run(script: str, out: Path, reuse: bool, *args: str) -> dict[str, Any] | None:
    """Run one bench (its output passes through) and read the JSON it wrote."""
    target = out / f"{Path(script).stem}.json"
    if not (reuse and target.exists()):
        print(f"\n$ {script} {' '.join(args)}", flush=True)
        done = subprocess.run([sys.executable, str(BENCH / script), *args, "--json", str(target)])
        if done.returncode != 0:
            print(f"{script} failed with exit {done.returncode}", file=sys.stderr)
            return None
    loaded: dict[str, Any] = json.loads(target.read_text())
    return loaded


def assay_rows(figures: dict[str, Any] | None) -> list[Row]:
    from assay_throughput import THREE_ARM

    ratio = memory = None
    note = memory_note = ""
    if figures is not None:
        reference = figures.get("reference_s")
        if reference:
            ratio = figures[THREE_ARM] / reference
        else:
            note = "reference script not found"
        note = note or f"{figures['trials']:,} trials, {figures['core']} core"
        memory = figures.get("peak_mb")
        if figures["memory_trials"] != MEMORY_TRIALS:
            memory_note = f"at {figures['memory_trials']:,} trials, not {MEMORY_TRIALS:,}"
    return [
        Row("3-arm assay / script time", ASSAY_ANCHOR, ratio, ASSAY_AIM, "x", True, note),
        Row(
            "peak memory, 2M trials",
            MEMORY_ANCHOR_MB,
            memory,
            MEMORY_AIM_MB,
            "MB",
            True,
            memory_note,
        ),
    ]


def http_rows(figures: dict[str, Any] | None) -> list[Row]:
    if figures is None:
        return [Row("HTTP target, 2 workers", 367.0, None, 565.0, "trials/s", False)]
    two = figures["intervention_2"]
    idle = 2000 / two["cpu_ms_per_trial"]
    return [
        Row(
            "HTTP target, 2 workers",
            figures["anchor"],
            two["trials_per_s"],
            figures["aim"],
            "trials/s",
            False,
            f"{two['cpu_ms_per_trial']:.2f} CPU ms/trial: {idle:.0f}/s on 2 idle cores",
        )
    ]


def gate_rows(figures: dict[str, Any] | None, processes: str) -> list[Row]:
    from gate_latency import AIM_P99_MS, ANCHOR

    label = f"gate p99, 16 clients, {processes} process(es)"
    if figures is None or processes not in figures["processes"]:
        return [Row(label, ANCHOR["p99_ms"], None, AIM_P99_MS, "ms", True)]
    row = figures["processes"][processes]
    return [
        Row(
            label,
            ANCHOR["p99_ms"],
            row["p99_ms"],
            AIM_P99_MS,
            "ms",
            True,
            f"{row['requests_per_s']:.0f} req/s (anchor {ANCHOR['requests_per_s']:g})",
        )
    ]


def table(rows: list[Row]) -> str:
    header = ["figure", "anchor", "measured", "vs anchor", "aim", "note"]
    cells = [header, *(r.cells() for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs: a few minutes in all")
    ap.add_argument("--out", type=Path, default=None, help="where the benches' JSON goes")
    ap.add_argument("--reuse", action="store_true", help="read a bench's JSON from --out if there")
    ap.add_argument("--skip", nargs="*", default=[], choices=("assay", "http", "gate"))
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="assaygate-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.quick:
        assay_args = ["--trials", "50000", "--memory-trials", "500000", "--no-compiled"]
        http_args = ["--trials", "50", "--intervention-only"]
        gate_args = ["--seconds", "3"]
    else:
        assay_args, http_args, gate_args = ["--no-compiled"], ["--intervention-only"], []
    skip = set(args.skip)
    assay = None if "assay" in skip else _run("assay_throughput.py", out, args.reuse, *assay_args)
    http = None if "http" in skip else _run("http_target.py", out, args.reuse, *http_args)
    gate = None if "gate" in skip else _run("gate_latency.py", out, args.reuse, *gate_args)
    rows = [*assay_rows(assay), *http_rows(http), *gate_rows(gate, "1"), *gate_rows(gate, "2")]
    print(f"\nissue 17, every figure against its anchor (JSON in {out}):\n")
    print(table(rows))


if __name__ == "__main__":
    main()
