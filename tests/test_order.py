"""The order the suite runs its files in: longest first by their recorded cost
(tests/file_costs.json); ASSAYGATE_TEST_ORDER=reverse reverses it. Each file keeps its own order."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# What an inner run must not inherit from the suite's own: its order, its import path, and the
# CPU report (the inner folder has no tests.support to write it with).
UNSET = ("ASSAYGATE_TEST_ORDER", "ASSAYGATE_TEST_CPU_REPORT", "PYTHONPATH")


def inner_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in UNSET}


def collected(folder: Path, order: str | None) -> list[str]:
    env = inner_env()
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


def test_a_service_directory_runs_as_one_unit_placed_by_the_cost_of_its_files(
    tmp_path: Path,
) -> None:
    tests = suite(tmp_path, "ab", "def test_one():\n    pass\n")
    api = tests / "api"
    api.mkdir()
    for name in "xy":
        (api / f"test_{name}.py").write_text("def test_one():\n    pass\n")
    # a alone costs more than either api file, less than both together.
    (tests / "file_costs.json").write_text(
        '{"tests/test_a.py": 50.0, "tests/api/test_x.py": 20.0, "tests/api/test_y.py": 35.0}'
    )
    files = ["tests/api/test_y.py", "tests/api/test_x.py", "tests/test_a.py", "tests/test_b.py"]
    assert collected(tmp_path, None) == [f"{f}::test_one" for f in files]
    assert collected(tmp_path, "reverse") == [f"{f}::test_one" for f in reversed(files)]


PYTEST = (sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider")
WHO_RUNS = """import os


def test_one():
    with open(os.environ["RAN"], "a") as out:
        out.write(f"{__name__} {os.environ['PYTEST_XDIST_WORKER']}\\n")
"""


def who_ran(folder: Path, processes: int) -> dict[str, str]:
    """Run the suite under `folder` on `processes` xdist workers: each test module's name and
    the worker that ran it (its tests write them, as WHO_RUNS does)."""
    ran = folder / "ran.txt"
    env = inner_env()
    run = subprocess.run(
        [*PYTEST, "-n", str(processes), "--dist", "loadfile", "--no-loadscope-reorder", "tests"],
        cwd=folder,
        env={**env, "RAN": str(ran)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return dict(line.split() for line in ran.read_text().splitlines())


def api_files(tests: Path, names: str) -> None:
    """A service directory (tests/api) of files that each note who ran them."""
    api = tests / "api"
    api.mkdir()
    (api / "__init__.py").write_text("")
    for name in names:
        (api / f"test_{name}.py").write_text(WHO_RUNS)


def test_under_xdist_a_service_directorys_files_run_on_one_test_process(tmp_path: Path) -> None:
    api_files(suite(tmp_path, "abcdef", WHO_RUNS), "uvwxyz")
    seen = who_ran(tmp_path, 3)
    assert len(seen) == 12
    assert len({seen[f"api.test_{n}"] for n in "uvwxyz"}) == 1
    # The other files are spread: the scheduler still balances the rest.
    assert len({seen[f"test_{n}"] for n in "abcdef"}) > 1


def test_a_package_fixture_ends_before_the_next_directorys_files_run(tmp_path: Path) -> None:
    tests = suite(tmp_path, "b", "def test_one():\n    open('events.txt', 'a').write('b\\n')\n")
    api = tests / "api"
    api.mkdir()
    (api / "__init__.py").write_text("")
    (api / "conftest.py").write_text(
        "import pytest\n\n\n@pytest.fixture(scope='package')\ndef stack():\n"
        "    open('events.txt', 'a').write('up\\n')\n    yield\n"
        "    open('events.txt', 'a').write('down\\n')\n"
    )
    for name in "xy":
        (api / f"test_{name}.py").write_text(
            "def test_one(stack):\n    open('events.txt', 'a').write('api\\n')\n"
        )
    (tests / "file_costs.json").write_text('{"tests/api/test_x.py": 9.0}')
    env = inner_env()
    run = subprocess.run(
        [*PYTEST, "-p", "no:xdist", "-p", "no:randomly", "tests"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "events.txt").read_text().split() == ["up", "api", "api", "down", "b"]


def test_the_service_directories_are_those_whose_conftest_holds_package_fixtures() -> None:
    # A session fixture in one of them would outlive its unit and live to the end of the run on
    # every test process that ran any of its files: the connections this order exists to end.
    from tests.conftest import SERVICE_DIRECTORIES

    root = Path(__file__).resolve().parents[1]
    holding = set()
    for conftest in sorted(root.glob("tests/*/conftest.py")):
        text = conftest.read_text()
        folder = conftest.parent.relative_to(root).as_posix()
        if 'scope="package"' in text:
            holding.add(folder)
        if folder in SERVICE_DIRECTORIES:
            assert 'scope="session"' not in text, folder
    assert holding == set(SERVICE_DIRECTORIES)


PARAMETRIZED = """import os

import pytest


@pytest.mark.parametrize("n", [1, 2])
def test_one(n):
    with open(os.environ["RAN"], "a") as out:
        out.write(f"{__name__}[{n}] {os.environ['PYTEST_XDIST_WORKER']}\\n")
"""


def test_a_split_files_tests_are_units_of_their_own_spread_over_the_test_processes(
    tmp_path: Path,
) -> None:
    tests = suite(tmp_path, "ab", WHO_RUNS)
    mcp = tests / "mcp"
    mcp.mkdir()
    (mcp / "__init__.py").write_text("")
    (mcp / "test_careful_examples.py").write_text(PARAMETRIZED)
    (tests / "file_costs.json").write_text('{"tests/mcp/test_careful_examples.py": 90.0}')
    split = [f"tests/mcp/test_careful_examples.py::test_one[{n}]" for n in (1, 2)]
    assert collected(tmp_path, None)[:2] == split
    seen = who_ran(tmp_path, 2)
    assert seen["mcp.test_careful_examples[1]"] != seen["mcp.test_careful_examples[2]"]


def test_a_service_directory_costing_more_than_a_unit_runs_as_several_dealt_by_cost(
    tmp_path: Path,
) -> None:
    tests = suite(tmp_path, "", WHO_RUNS)
    api_files(tests, "uvwx")
    # 500 s in all: three units of about 200 s (tests/conftest.py, UNIT_S). Longest first to the
    # lightest unit: u, v and w one each, then x joins w's.
    (tests / "file_costs.json").write_text(
        '{"tests/api/test_u.py": 150.0, "tests/api/test_v.py": 150.0,'
        ' "tests/api/test_w.py": 100.0, "tests/api/test_x.py": 100.0}'
    )
    assert collected(tmp_path, None) == [f"tests/api/test_{n}.py::test_one" for n in "wxuv"]
    seen = who_ran(tmp_path, 3)
    assert seen["api.test_w"] == seen["api.test_x"]
    assert len({seen["api.test_u"], seen["api.test_v"], seen["api.test_w"]}) == 3
