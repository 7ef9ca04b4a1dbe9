"""Where the browser tests find Debian's Chromium, and what a missing one means.

Outside CI a developer without Chromium gets a skip that says why. Under CI (the `CI` variable is
set, as every CI system sets it) a missing browser fails the run: a green CI run must have driven
the dashboard, not silently run seven fewer tests."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("ASSAYGATE_TEST_CHROMIUM", "/usr/bin/chromium")


def under_ci(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require_chromium(path: str = CHROMIUM, environ: Mapping[str, str] = os.environ) -> None:
    """Return when the browser is there; otherwise fail under CI and skip elsewhere."""
    if Path(path).exists():
        return
    why = (
        f"{path} is missing and could not be installed (make test runs "
        "deploy/ensure-chromium.sh, which needs root and Debian's apt)"
    )
    if under_ci(environ):
        pytest.fail(f"CI is set, so the browser tests must run: {why}", pytrace=False)
    pytest.skip(why)
