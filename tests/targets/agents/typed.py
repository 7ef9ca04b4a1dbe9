"""The reference Copperfin workflow, configured by an example manifest, as a user's `python` target.

It is the same code the `reference` target runs, so a python target built from it must give the
reference target's per-fault outcomes: whatever differs is the adapter's doing.
"""

from __future__ import annotations

from pathlib import Path

from service.core.system.manifest import parse_manifest_json
from service.core.trial.copperfin import copperfin
from service.core.trial.target import Target

_EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _workflow(name: str) -> Target:
    return copperfin(parse_manifest_json((_EXAMPLES / f"copperfin-{name}.json").read_text()))


run = _workflow("typed")
typed_repair = _workflow("typed-repair")
baseline = _workflow("baseline")
