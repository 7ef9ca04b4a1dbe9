"""Targets that cost the gate time: a hung agent must stop an assay quickly, and block it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
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


def cli(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "assay", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done, time.monotonic() - started


def test_a_hung_http_agent_stops_the_cli_assay_quickly_and_blocks(
    start_agent: StartAgent, tmp_path: Path
) -> None:
    url = start_agent("--mode", "hang", script=LIAR_HTTP)
    path = write_manifest(tmp_path / "hung.json", manifest(kind="http", url=url))

    done, elapsed = cli(str(path), *ARGS, "--json")
    assert elapsed < 30
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["decision"] == "block"
    assert "target errors above the limit" in report["stopped"]
    assert "stopped" in {r["code"] for r in report["reasons"]}
    assert report["target_errors"]["by_kind"]["TargetTimeout"] == report["target_errors"]["total"]
    assert report["target_errors"]["total"] > 2
    assert report["trials_executed"] < 5

    done, elapsed = cli(str(path), *ARGS)
    assert elapsed < 30
    assert done.returncode == 1, done.stderr
    total = report["target_errors"]["total"]
    assert f"Target errors: {total} (TargetTimeout {total})" in done.stdout
    assert "Stopped: target errors above the limit" in done.stdout
    assert "Decision: BLOCK" in done.stdout
