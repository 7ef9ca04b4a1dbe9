"""The CPU report counts what a test file burnt, its reaped children included, and sums it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.cpu import summary
from tests.support.service import ROOT

BURNS = """
import subprocess, sys

def test_a_child_burns_cpu():
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(10_000_000))"], check=True)

def test_nothing():
    pass
"""


def test_a_files_cpu_includes_its_reaped_children_and_the_summary_names_file_and_tests(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_burns.py").write_text(BURNS)
    report = tmp_path / "cpu.jsonl"
    env = {**os.environ, "ASSAYGATE_TEST_CPU_REPORT": str(report), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.support.cpu", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path / "test_burns.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    (burns,) = [r for r in rows if r.get("file") == "test_burns.py"]
    # CPU seconds cannot shrink on a busy machine: the child's loop is a floor, whatever the load.
    child = [r for r in rows if r.get("test", "").endswith("test_a_child_burns_cpu")]
    assert child and child[0]["cpu_s"] >= 0.1, rows
    assert burns["tests"] == 2 and burns["cpu_s"] >= child[0]["cpu_s"]
    table = summary(report, tests=1)
    assert "test_burns.py" in table and "test_a_child_burns_cpu" in table
