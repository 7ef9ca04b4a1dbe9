"""Shared by every test directory; heavy fixtures (databases, workers) live in the directory
conftests that need them."""

from __future__ import annotations

import os
import warnings

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
    if os.environ.get("ASSAYGATE_TEST_ORDER", "") == "reverse":
        files: dict[str, list[pytest.Item]] = {}
        for item in items:
            files.setdefault(str(item.path), []).append(item)
        items[:] = [item for name in reversed(files) for item in files[name]]
    # Integration tests start processes and wait on them; a hang must fail, not stall CI. The
    # bound guards against a hang, not slowness: a busy 2-core machine runs them several times
    # slower than a quiet one.
    for item in items:
        if item.get_closest_marker("integration") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(600))
