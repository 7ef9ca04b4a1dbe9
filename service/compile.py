"""Build the mypyc-compiled core into a scratch directory, as the production image ships it.

Used by the throughput bench (pure and compiled, measured in one session) and by the test that
runs the core's suite against the compiled modules.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from service.core.compiled import HOT_MODULES

ROOT = Path(__file__).resolve().parents[1]


def build_compiled_core(dest: Path) -> Path:
    """Copy `service/` into `dest`, compile the hot modules there; `dest` is the import root."""
    shutil.copytree(
        ROOT / "service",
        dest / "service",
        ignore=shutil.ignore_patterns("__pycache__", "*.so"),
        dirs_exist_ok=True,
    )
    mypyc = Path(sys.executable).with_name("mypyc")
    subprocess.run([str(mypyc), *HOT_MODULES], cwd=dest, check=True, capture_output=True)
    return dest
