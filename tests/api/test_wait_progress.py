"""`submit --wait` without a terminal: a progress line when the assay moved, never a flood."""

from __future__ import annotations

import pytest

from service.cli.progress import ProgressLines, progress_text

RUNNING = {
    "shard_count": 3,
    "shards_done": 1,
    "trials_planned": 30,
    "trials_done": 10,
    "runs_done": 25,
    "gate_runs_done": 3,
    "slots_busy": 3,
    "waiting": {"reset": 1, "agent": 2},
}


def test_the_progress_line_says_runs_and_what_busy_slots_wait_for() -> None:
    assert progress_text(RUNNING) == (
        "1/3 shards, 10/30 trials, 25 runs (+ 3 by the gate), 3 slots busy: agent 2, reset 1"
    )
    idle = {**RUNNING, "runs_done": 0, "slots_busy": 0, "waiting": {}}
    assert progress_text(idle) == "1/3 shards, 10/30 trials"


def test_a_line_is_printed_when_progress_moved_at_most_every_interval(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = ProgressLines(every_s=3600)
    lines({"status": "running", "progress": RUNNING})
    lines({"status": "running", "progress": RUNNING})  # nothing moved
    lines({"status": "running", "progress": {**RUNNING, "runs_done": 26}})  # too soon
    lines({"status": "running", "progress": {**RUNNING, "shards_done": 2}})  # a shard finished
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "assaygate: assay running: 1/3 shards, 10/30 trials, 25 runs (+ 3 by the gate), "
        "3 slots busy: agent 2, reset 1",
        "assaygate: assay running: 2/3 shards, 10/30 trials, 25 runs (+ 3 by the gate), "
        "3 slots busy: agent 2, reset 1",
    ]
