"""The `python` target: a callable in the user's own code, named `module:callable`.

The callable has the reference workflow's signature, `(task, tools) -> None`, and receives the same
core `Tools`, so every call crosses the injector. It may wrap them in `ToolClients` for namespaced
clients. Import problems are manifest problems: they name `target.entrypoint`.
"""

from __future__ import annotations

import importlib
from typing import cast

from service.core.copperfin import Target
from service.core.errors import ManifestInvalid

FIELD = "target.entrypoint"


def load_python_target(entrypoint: str) -> Target:
    module_name, sep, attr_path = entrypoint.partition(":")
    if not sep or not module_name or not attr_path:
        raise ManifestInvalid(f"{entrypoint!r} is not 'module:callable'", field=FIELD)
    try:
        obj: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise ManifestInvalid(f"cannot import {module_name!r}: {exc}", field=FIELD) from None
    except Exception as exc:  # user code failing at import is still the manifest's entrypoint
        raise ManifestInvalid(
            f"importing {module_name!r} raised {type(exc).__name__}: {exc}", field=FIELD
        ) from None
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ManifestInvalid(
                f"{module_name!r} has no attribute {attr_path!r}", field=FIELD
            ) from None
    if not callable(obj):
        raise ManifestInvalid(f"{entrypoint!r} is not callable", field=FIELD)
    return cast(Target, obj)
