"""The reference Copperfin workflow (`service.core.trial.copperfin`), configured by an edited
example manifest, for attackers to reuse as a python target."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from service.core.system.manifest import parse_manifest_json
from service.core.trial.copperfin import copperfin
from service.core.trial.sandbox import Task

Workflow = Callable[[Task, Any], None]
_EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def workflow(profile: str, edit: Callable[[dict[str, Any]], None] | None = None) -> Workflow:
    """The reference workflow as an example manifest (optionally edited) configures it."""
    data = json.loads((_EXAMPLES / f"copperfin-{profile}.json").read_text())
    if edit is not None:
        edit(data)
    target: Workflow = copperfin(parse_manifest_json(json.dumps(data)))
    return target


typed_repair = workflow("typed-repair")
naive = workflow("baseline")
