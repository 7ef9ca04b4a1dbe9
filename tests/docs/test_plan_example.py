"""The `assaygate plan` example in docs/mcp.md prints what the page shows, run as written."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

from tests.support.service import ROOT

PAGE = ROOT / "docs" / "mcp.md"


def test_the_plan_example_prints_what_the_page_shows() -> None:
    text = PAGE.read_text()
    found = re.search(r"```sh\n(assaygate plan [^\n]*)\n```\n\n```text\n(.*?)```", text, re.S)
    assert found is not None, "the page's `assaygate plan` example and its output"
    command, shown = shlex.split(found.group(1)), found.group(2)
    ran = subprocess.run(
        [sys.executable, "-m", "service.cli", *command[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == shown
