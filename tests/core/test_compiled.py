"""The mypyc-compiled core (what the production image runs) behaves exactly as the source does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.compile import ROOT, build_compiled_core
from service.core.compiled import HOT_MODULES


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_compiled_core(tmp_path_factory.mktemp("compiled"))


def test_the_compiled_core_passes_the_cores_own_tests(compiled: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(compiled)}
    probe = subprocess.run(
        [sys.executable, "-c", "import service.core.sandbox as m; print(m.__file__)"],
        env=env,
        cwd=compiled,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip().endswith(".so"), "the compiled module was not the one imported"
    assert len(HOT_MODULES) == len(list((compiled / "service" / "core").glob("*.so")))
    tests = [
        str(ROOT / "tests" / "core" / name)
        for name in (
            "test_assay_paper_mode.py",
            "test_replay.py",
            "test_counterfactual.py",
            "test_catalogue.py",
            "test_injector.py",
            "test_credential.py",
            "test_gate.py",
        )
    ]
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--import-mode=append",
            *tests,
        ],
        env=env,
        cwd=compiled,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
