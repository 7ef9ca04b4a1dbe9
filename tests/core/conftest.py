from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.core.system.manifest import Manifest, parse_manifest_json

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ASSETS = ROOT / "tests" / "assets"


def load_example(name: str) -> Manifest:
    return parse_manifest_json((EXAMPLES / f"copperfin-{name}.json").read_text())


def example_dict(name: str) -> dict[str, object]:
    data: dict[str, object] = json.loads((EXAMPLES / f"copperfin-{name}.json").read_text())
    return data


@pytest.fixture(scope="session")
def baseline() -> Manifest:
    return load_example("baseline")


@pytest.fixture(scope="session")
def typed() -> Manifest:
    return load_example("typed")


@pytest.fixture(scope="session")
def typed_repair() -> Manifest:
    return load_example("typed-repair")


@pytest.fixture(scope="session")
def refuse_all() -> Manifest:
    return load_example("refuse-all")
