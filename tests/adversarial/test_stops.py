"""Targets that cost the gate time: a hung agent must stop an assay quickly, and block it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.adversarial.conftest import LIAR_HTTP, ROOT, StartAgent, manifest, write_manifest

ARGS = (
    "--mode",
    "timeout_after_commit",
    "--trials",
    "5",
    "--trial-timeout",
    "0.3",
    "--max-target-errors",
    "2",
)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    # "Quickly" is shown by what the report counts (each trial cut at its 0.3 s deadline, the
    # assay stopped before its last trial), not by a stopwatch a busy machine would fail; the
    # timeout only turns a hang into a failure.
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "assay", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_hung_http_agent_stops_the_cli_assay_quickly_and_blocks(
    start_agent: StartAgent, tmp_path: Path
) -> None:
    url = start_agent("--mode", "hang", script=LIAR_HTTP)
    path = write_manifest(tmp_path / "hung.json", manifest(kind="http", url=url))

    done = cli(str(path), *ARGS, "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["decision"] == "block"
    assert "target errors above the limit" in report["stopped"]
    assert "stopped" in {r["code"] for r in report["reasons"]}
    assert report["target_errors"]["by_kind"]["TargetTimeout"] == report["target_errors"]["total"]
    assert report["target_errors"]["total"] > 2
    assert report["trials_executed"] < 5

    done = cli(str(path), *ARGS)
    assert done.returncode == 1, done.stderr
    total = report["target_errors"]["total"]
    assert f"Target errors: {total} (TargetTimeout {total})" in done.stdout
    assert "Stopped: target errors above the limit" in done.stdout
    assert "Decision: BLOCK" in done.stdout
