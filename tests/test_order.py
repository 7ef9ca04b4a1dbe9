"""The order the suite runs its files in: longest first by their recorded cost
(tests/file_costs.json); ASSAYGATE_TEST_ORDER=reverse reverses it. Each file keeps its own order."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def collected(folder: Path, order: str | None) -> list[str]:
    # The inner run reports no CPU (its folder has no tests.support to do it with).
    unset = ("ASSAYGATE_TEST_ORDER", "ASSAYGATE_TEST_CPU_REPORT", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    if order is not None:
        env["ASSAYGATE_TEST_ORDER"] = order
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return [line for line in run.stdout.splitlines() if "::" in line]


def suite(folder: Path, names: str, body: str) -> Path:
    """A suite under `folder`/tests: the real conftest and a file `test_{name}.py` a name."""
    tests = folder / "tests"
    tests.mkdir()
    conftest = Path(__file__).with_name("conftest.py").read_text()
    (tests / "conftest.py").write_text(
        conftest.replace("from service.compile import clean, state", "state = lambda: 'ok'")
    )
    for name in names:
        (tests / f"test_{name}.py").write_text(body)
    return tests


def test_reverse_order_reverses_the_files_and_keeps_each_files_tests_in_order(
    tmp_path: Path,
) -> None:
    # The real hook, in a suite of three files of two tests each.
    suite(tmp_path, "abc", "def test_one():\n    pass\n\n\ndef test_two():\n    pass\n")
    forward = collected(tmp_path, None)
    assert forward == [f"tests/test_{n}.py::test_{t}" for n in "abc" for t in ("one", "two")]
    assert collected(tmp_path, "reverse") == [
        f"tests/test_{n}.py::test_{t}" for n in "cba" for t in ("one", "two")
    ]


def test_the_files_run_longest_first_by_their_recorded_cost_and_the_rest_after_in_order(
    tmp_path: Path,
) -> None:
    tests = suite(tmp_path, "abcd", "def test_one():\n    pass\n")
    # c costs most, then b; a and d were never measured and keep their own order after them.
    (tests / "file_costs.json").write_text('{"tests/test_c.py": 90.0, "tests/test_b.py": 12.5}')
    assert collected(tmp_path, None) == [f"tests/test_{n}.py::test_one" for n in "cbad"]
    assert collected(tmp_path, "reverse") == [f"tests/test_{n}.py::test_one" for n in "dabc"]
