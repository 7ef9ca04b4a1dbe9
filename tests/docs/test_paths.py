"""Every import path the docs and the README name for Assaygate's own code imports as named, so a
move that breaks a documented path fails CI instead of a user's target (issue 39: a target written
against docs/targets.md failed with `No module named 'service.core.sandbox'`).

The forms read: `from X import Y, Z` and `import X` lines, `python -m X`, and a backticked dotted
path (`service.targets.load_target`, `assaygate.target.Task`, `module:attr`), each only for
Assaygate's own packages (a user's `mycompany.agent:run` is an example, not ours to import)."""

from __future__ import annotations

import importlib
import importlib.util
import re
import warnings
from pathlib import Path

import pytest

from tests.support.service import ROOT

OURS = ("assaygate", "service", "worker")
# A tenant's queue is named like a module path (`Settings.tenant_queue`).
QUEUE_PREFIX = "assaygate.tenant."
_PKG = r"(?:assaygate|service|worker)"
_NAME = r"[A-Za-z_]\w*"
FROM_IMPORT = re.compile(rf"^\s*from ({_PKG}(?:\.{_NAME})*) import ([\w, ()]+)$", re.M)
IMPORT = re.compile(rf"^\s*import ({_PKG}(?:\.{_NAME})*)\s*$", re.M)
RUN_MODULE = re.compile(rf"python -m ({_PKG}(?:\.{_NAME})*)")
# A backticked path: the whole span is the path, optionally called or given `:attr`.
DOTTED = re.compile(rf"`({_PKG}(?:\.{_NAME})+)(?::({_NAME}(?:\.{_NAME})*))?(?:\([^`]*\))?`")


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def named_paths(text: str) -> set[str]:
    """Each path as `module:attr.attr` (attr empty for a module)."""
    found: set[str] = set()
    for module, names in FROM_IMPORT.findall(text):
        for name in names.strip("()").split(","):
            if name.strip():
                found.add(f"{module}:{name.split(' as ')[0].strip()}")
    found.update(f"{m}:" for m in IMPORT.findall(text))
    found.update(f"{m}:" for m in RUN_MODULE.findall(text))
    for dotted, attr in DOTTED.findall(text):
        if dotted.startswith(QUEUE_PREFIX):
            continue  # a Celery queue's name (`assaygate.tenant.acme`), not a module
        found.add(f"{dotted}:{attr}" if attr else f"?{dotted}")
    return found


def resolves(path: str) -> bool:
    """`module:attr` imports `module` and reads `attr`; `?a.b.c` takes the longest importable
    prefix as the module and the rest as attributes (a dataclass or model field counts)."""
    if path.startswith("?"):
        parts = path[1:].split(".")
        for cut in range(len(parts), 0, -1):
            module = ".".join(parts[:cut])
            try:
                if importlib.util.find_spec(module) is None:
                    continue
            except ImportError:
                continue
            return resolves(f"{module}:{'.'.join(parts[cut:])}")
        return False
    module, _, attrs = path.partition(":")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # a deprecated path resolves
            obj: object = importlib.import_module(module)
    except ImportError:
        return False
    for attr in filter(None, attrs.split(".")):
        fields = getattr(obj, "__dataclass_fields__", None) or getattr(obj, "model_fields", {})
        if not hasattr(obj, attr):
            return attr in fields
        obj = getattr(obj, attr)
    return True


PATHS = sorted({(doc.name, p) for doc in _documents() for p in named_paths(doc.read_text())})


@pytest.mark.parametrize(("document", "path"), PATHS)
def test_every_path_the_docs_name_imports(document: str, path: str) -> None:
    assert resolves(path), f"{document} names {path.lstrip('?')}, which does not import"


def test_the_docs_name_the_public_package_and_the_reader_finds_a_broken_path() -> None:
    assert ("targets.md", "assaygate.target:Task") in PATHS
    assert ("mcp.md", "assaygate.mcp:serve_lines") in PATHS
    # The form issue 39 met: the path the docs named before the core moved into rooms, and one
    # that never existed.
    assert resolves("service.core.sandbox:ToolTimeout")
    assert not resolves("service.core.nowhere:ToolTimeout")
    assert not resolves("?service.core.trial.sandbox.NoSuchTool")
    assert named_paths("from service.core.sandbox import Task, ToolTimeout\n") == {
        "service.core.sandbox:Task",
        "service.core.sandbox:ToolTimeout",
    }
