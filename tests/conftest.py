"""Shared by every test directory; heavy fixtures (databases, workers) live in the directory
conftests that need them."""

from __future__ import annotations

import asyncio
import os
import warnings
from collections.abc import Iterator

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # ASSAYGATE_TEST_ORDER=reverse runs the test files in reverse order (each file's tests in
    # their own order): a test that passes only because another file ran first shows up. Use it
    # with `-p no:randomly` where that plugin is installed.
    if os.environ.get("ASSAYGATE_TEST_ORDER", "") == "reverse":
        files: dict[str, list[pytest.Item]] = {}
        for item in items:
            files.setdefault(str(item.path), []).append(item)
        items[:] = [item for name in reversed(files) for item in files[name]]
    # Integration tests start processes and wait on them; a hang must fail, not stall CI.
    for item in items:
        if item.get_closest_marker("integration") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(180))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    # A test that leaves an event loop marked running on this thread (a loop stopped from
    # another thread, a coroutine abandoned mid-run) breaks every later `asyncio.run` in the
    # process, in whichever file runs next: name the test that left it, and clear the mark so
    # the next file is not judged by this one.
    yield
    if asyncio.events._get_running_loop() is not None:
        asyncio.events._set_running_loop(None)
        item.warn(pytest.PytestWarning(f"{item.nodeid} left an event loop running on its thread"))
