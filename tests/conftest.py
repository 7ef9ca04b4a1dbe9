"""Shared by every test directory; heavy fixtures (databases, workers) live in the directory
conftests that need them."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Integration tests start processes and wait on them; a hang must fail, not stall CI.
    for item in items:
        if item.get_closest_marker("integration") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(180))
