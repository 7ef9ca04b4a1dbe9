"""The mypyc-compiled core (what `make venv` and the production image run) behaves exactly as
the pure-Python core (what a machine without a C compiler runs) does.

The suite itself runs whichever core this checkout has; this test runs the core's own tests
against the other one, in a scratch copy of `service/`: the pure source when `make venv`
compiled the core in place, a fresh mypyc build when it did not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from service.compile import ROOT, build_compiled_core, state
from service.core.compiled import HOT_MODULES


@dataclass(frozen=True)
class Core:
    root: Path
    compiled: bool


@pytest.fixture(scope="module")
def other_core(tmp_path_factory: pytest.TempPathFactory) -> Core:
    """The core this suite is not running: its pure source, or a fresh compiled build."""
    scratch = tmp_path_factory.mktemp("core")
    if state() == "compiled":
        shutil.copytree(
            ROOT / "service",
            scratch / "service",
            ignore=shutil.ignore_patterns("__pycache__", "*.so", ".compiled.json"),
        )
        return Core(scratch, compiled=False)
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler: only the pure-Python core can run here")
    return Core(build_compiled_core(scratch), compiled=True)


def test_the_suite_runs_the_compiled_core_whenever_make_venv_built_one() -> None:
    import service.core.trial.sandbox as sandbox

    assert sandbox.__file__ is not None
    assert sandbox.__file__.endswith(".so") == (state() == "compiled")


def test_the_other_core_passes_the_cores_own_tests(other_core: Core) -> None:
    compiled = other_core.root
    env = {**os.environ, "PYTHONPATH": str(compiled)}
    probe = subprocess.run(
        [sys.executable, "-c", "import service.core.trial.sandbox as m; print(m.__file__)"],
        env=env,
        cwd=compiled,
        capture_output=True,
        text=True,
        check=True,
    )
    imported = probe.stdout.strip()
    assert imported.startswith(str(compiled)), "the scratch core was not the one imported"
    assert imported.endswith(".so") == other_core.compiled
    built = list((compiled / "service" / "core").rglob("*.so"))
    assert len(built) == (len(HOT_MODULES) if other_core.compiled else 0)
    tests = [
        str(ROOT / "tests" / "core" / name)
        for name in (
            "shards/test_assay_paper_mode.py",
            "shards/test_replay.py",
            "evidence/test_counterfactual.py",
            "faults/test_catalogue.py",
            "faults/test_injector.py",
            "signing/test_credential.py",
            "decision/test_gate.py",
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


def test_a_build_whose_runtime_left_with_the_old_virtualenv_is_stale(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if state() != "compiled":
        pytest.skip("only a compiled build has a runtime to lose")
    import service.compile as compile_module

    monkeypatch.setattr(compile_module, "_site", lambda: tmp_path)
    assert state() == "stale"
