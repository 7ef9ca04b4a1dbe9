"""What a team's code sees when it runs unconfined, on the user's own machine (`assaygate assay`).

On a worker the code sees only the manifest's declared `target.env`, the tenant's named secrets
and the few variables a process needs (`service.sandbox.bwrap`). The local CLI gives it the same
(`declare`), so a manifest that depends on a variable it never declared decides alike on both:
it fails on both. Until `declare` is called (a library caller, the tests) the code sees the
user's environment without Assaygate's own settings, as before.

Process-wide on purpose: the local CLI is one assay in one process, and the code is started from
the engine's slot threads, which no context variable would reach.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from service.core.errors import ManifestInvalid

#: Kept from the user's environment in a declared run: what any process needs to start, find its
#: interpreter and files, and speak the user's language (the sandbox sets its own of each).
ESSENTIAL = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ")

_declared: dict[str, str] | None = None


def declare(env: Mapping[str, str] | None) -> None:
    """From now on the team's code sees `env` (its declared variables and named secrets) and the
    essentials; None: the user's whole environment again."""
    global _declared
    _declared = None if env is None else dict(env)


def environ() -> dict[str, str]:
    """The environment a team's unconfined process starts from (callers add their own: the
    import path, the proxy's URL, the slot)."""
    if _declared is None:
        return {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    base = {k: os.environ[k] for k in ESSENTIAL if k in os.environ}
    return {**base, **_declared}


def secrets_from(names: Sequence[str], path: Path | None) -> dict[str, str]:
    """The values of the secrets a manifest names (`target.secrets`), for a local run: from
    `path` (a JSON object of names to values) or else each from the environment variable of its
    name; one not found is a `ManifestInvalid` naming it."""
    if not names:
        return {}
    source: Mapping[str, object] = os.environ
    where = "the environment"
    if path is not None:
        try:
            loaded = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ManifestInvalid(f"cannot read {path} as JSON: {exc}", field="--secrets") from None
        if not isinstance(loaded, dict):
            raise ManifestInvalid(f"{path} is not a JSON object of names", field="--secrets")
        source, where = loaded, str(path)
    out: dict[str, str] = {}
    for i, name in enumerate(names):
        value = source.get(name)
        if not isinstance(value, str):
            raise ManifestInvalid(
                f"the secret {name} is not set in {where} (pass --secrets FILE, or set it)",
                field=f"target.secrets.{i}",
            )
        out[name] = value
    return out
