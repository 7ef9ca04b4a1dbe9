"""The test support leaves nothing behind: the copy of tenant code a test process makes for its
tenant workers is removed when that process ends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.service import ROOT


def test_the_tenant_code_copy_is_removed_when_the_test_process_exits() -> None:
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "from tests.support.service import tenant_code; print(tenant_code())",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    folder = Path(made.stdout.strip())
    assert folder.name.startswith("assaygate-tenant-code-")
    assert not folder.exists()
