"""Shared by every test directory; heavy fixtures (databases, workers) live in the directory
conftests that need them."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # A compiled core built from older sources would test yesterday's code: drop it (the tests then
    # run the pure-Python source; `make venv` compiles the current one).
    from service.compile import clean, state

    if state() == "stale":
        clean()
        warnings.warn(
            "the compiled core was stale and is removed: testing the pure-Python core "
            "(`make venv` recompiles)",
            stacklevel=1,
        )
    # ASSAYGATE_TEST_CPU_REPORT=path: CPU seconds per test file (tests/support/cpu.py); read
    # only when asked, so a suite run from elsewhere (tests/test_order.py's) needs no package.
    if os.environ.get("ASSAYGATE_TEST_CPU_REPORT"):
        from tests.support import cpu

        cpu.configure(config)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # ASSAYGATE_TEST_ORDER=reverse runs the test files in reverse order (each file's tests in
    # their own order): a test that passes only because another file ran first shows up. Use it
    # with `-p no:randomly` where that plugin is installed.
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    # The files longest first (tests/file_costs.json: wall seconds from a measured run, written by
    # `python -m tests.support.cpu REPORT --costs tests/file_costs.json`), those it does not list
    # after them in their own order. Each xdist worker takes the next file as it frees up
    # (`--no-loadscope-reorder`), so the long files start early and the short ones fill the gaps
    # at the end, instead of a long file running alone at the end while the other worker idles.
    costs = Path(__file__).with_name("file_costs.json")
    cost: dict[str, float] = json.loads(costs.read_text()) if costs.exists() else {}
    names = sorted(files, key=lambda name: -cost.get(name, 0.0))
    if os.environ.get("ASSAYGATE_TEST_ORDER", "") == "reverse":
        names.reverse()
    items[:] = [item for name in names for item in files[name]]
    # Integration tests start processes and wait on them; a hang must fail, not stall CI. The
    # bound guards against a hang, not slowness: a busy 2-core machine runs them several times
    # slower than a quiet one.
    for item in items:
        if item.get_closest_marker("integration") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(600))
