"""Under CI a missing Chromium fails the run — in deploy/ensure-chromium.sh (its exit code) and in
the browser tests' fixture — while a developer without the browser gets a skip that says why."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.chromium import require_chromium, under_ci
from tests.support.service import ROOT

SCRIPT = ROOT / "deploy" / "ensure-chromium.sh"


def ensure(chromium: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    # Never let the test itself install a browser: the install path is not what is under test.
    env |= {"ASSAYGATE_TEST_CHROMIUM": str(chromium), "ASSAYGATE_NO_BROWSER_INSTALL": "1"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30
    )


def test_the_script_fails_under_ci_when_the_browser_is_missing(tmp_path: Path) -> None:
    ran = ensure(tmp_path / "no-chromium", ci="true")
    assert ran.returncode == 1
    assert "CI is set" in ran.stderr
    assert str(tmp_path / "no-chromium") in ran.stderr


def test_the_script_lets_a_developer_without_the_browser_go_on_with_a_skip(
    tmp_path: Path,
) -> None:
    ran = ensure(tmp_path / "no-chromium", ci=None)
    assert ran.returncode == 0
    assert "browser tests will be skipped" in ran.stderr


def test_the_script_passes_under_ci_when_the_browser_is_there(tmp_path: Path) -> None:
    browser = tmp_path / "chromium"
    browser.write_text("#!/bin/sh\n")
    browser.chmod(0o755)
    ran = ensure(browser, ci="1")
    assert ran.returncode == 0, ran.stderr
    assert f"using {browser}" in ran.stdout


def test_the_browser_fixture_fails_under_ci_when_the_browser_is_missing(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match="CI is set"):
        require_chromium(str(tmp_path / "no-chromium"), {"CI": "true"})


def test_the_browser_fixture_skips_outside_ci_when_the_browser_is_missing(tmp_path: Path) -> None:
    with pytest.raises(pytest.skip.Exception, match="is missing"):
        require_chromium(str(tmp_path / "no-chromium"), {})


def test_ci_set_to_false_or_empty_is_not_ci() -> None:
    assert under_ci({"CI": "true"}) and under_ci({"CI": "1"})
    assert not under_ci({}) and not under_ci({"CI": ""}) and not under_ci({"CI": "false"})
