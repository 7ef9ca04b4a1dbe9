"""What the deploy tests share: a copy of the checkout as a clone holds it, Assaygate's sdist and
wheel built from that copy, and a fresh virtualenv (outside the checkout) with the wheel
installed, made once per test session because installing every dependency from nothing takes a
minute of the 2-core machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.k8s import filled_copy
from tests.support.service import ROOT


def fresh_checkout(dest: Path) -> Path:
    """The working tree as a clone would hold it: tracked and new files, nothing ignored."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: none of ours (no ASSAYGATE_*, no PYTHONPATH to the
    checkout, no virtualenv of the test run)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSAYGATE_", "PYTHON"))}
    env.pop("VIRTUAL_ENV", None)
    return {**env, **extra}


@dataclass(frozen=True)
class Built:
    sdist: Path
    wheel: Path


@dataclass(frozen=True)
class Installed:
    """A virtualenv with only the wheel (and its dependencies) installed."""

    bin: Path

    def env(self, **extra: str) -> dict[str, str]:
        return clean_env(PATH=f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}", **extra)


@pytest.fixture(scope="package")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """`python -m build` as a release does: the sdist first, then the wheel built from the
    unpacked sdist, so a file the sdist forgets is missing from the wheel too."""
    checkout = fresh_checkout(tmp_path_factory.mktemp("package-checkout"))
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(checkout)],
        check=True,
        capture_output=True,
        env=clean_env(),
    )
    (sdist,) = dist.glob("assaygate-*.tar.gz")
    (wheel,) = dist.glob("assaygate-*.whl")
    return Built(sdist, wheel)


@pytest.fixture(scope="package")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    venv = tmp_path_factory.mktemp("user-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(built.wheel)],
        check=True,
        cwd=venv,
        env=clean_env(),
    )
    return Installed(venv / "bin")


@pytest.fixture(scope="package")
def filled_k8s(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """deploy/k8s as docs/kubernetes.md has an operator fill it in (the site's address, the
    image's digest), in a copy of the test session's own."""
    return filled_copy(tmp_path_factory.mktemp("filled"))
