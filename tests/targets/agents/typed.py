"""The reference Copperfin workflow with the typed controls, assayed as a user's `python` target.

It is the same code the `reference` target runs, so a python target built from it must give the
reference target's per-fault outcomes: whatever differs is the adapter's doing.
"""

from __future__ import annotations

from pathlib import Path

from service.core.copperfin import copperfin
from service.core.manifest import parse_manifest_json

_MANIFEST = Path(__file__).resolve().parents[3] / "examples" / "copperfin-typed.json"

run = copperfin(parse_manifest_json(_MANIFEST.read_text()))
