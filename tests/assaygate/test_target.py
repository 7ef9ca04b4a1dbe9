"""The public package a target imports: small, standard library only, and the one set of classes
behind every path the docs have named."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest

import assaygate.target
from service.core.trial import sandbox as core_sandbox

PUBLIC = ("assaygate", "assaygate.target", "assaygate.mcp", "assaygate.host")
PUBLIC += ("assaygate.mcp_host", "assaygate.frameworks")
# Nothing a target's process would pay for or collide with: the service, the worker, frameworks.
FOREIGN = ("service", "worker", "pydantic", "fastapi", "starlette", "sqlmodel", "sqlalchemy")
FOREIGN += ("celery", "redis", "psycopg", "httpx", "uvicorn", "rich", "mcp", "cryptography")


def _imported_after(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_importing_the_public_package_imports_nothing_but_the_standard_library() -> None:
    modules = _imported_after("\n".join(f"import {m}" for m in PUBLIC))
    foreign = {m for m in modules if m.split(".")[0] in FOREIGN}
    assert foreign == set()
    assert set(PUBLIC) <= modules


def test_the_core_raises_the_public_packages_own_error_classes() -> None:
    for name in ("ToolError", "ToolTimeout", "ToolMalformed", "ToolRejected", "RateLimited"):
        assert getattr(core_sandbox, name) is getattr(assaygate.target, name)
    assert core_sandbox.PreconditionFailed is assaygate.target.PreconditionFailed
    assert core_sandbox.RunCrashed is assaygate.target.RunCrashed
    assert core_sandbox.Task is assaygate.target.Task


def test_the_core_tools_satisfy_the_public_tools_protocol() -> None:
    public = {n for n in vars(assaygate.target.Tools) if not n.startswith("_")}
    assert public <= set(dir(core_sandbox.Tools))


@pytest.mark.parametrize(
    ("old", "name"),
    [
        ("service.core.sandbox", "ToolTimeout"),
        ("service.targets.clients", "ToolClients"),
        ("service.targets.python_host", "RemoteTools"),
        ("service.core.gate", "block_first"),
        ("service.mcp.host", "main"),
    ],
)
def test_a_path_earlier_docs_named_imports_with_a_deprecation_warning(old: str, name: str) -> None:
    code = (
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        f"    from {old} import {name}\n"
        "print([str(x.message) for x in w if issubclass(x.category, DeprecationWarning)])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "deprecated" in done.stdout, done.stdout + done.stderr


def test_the_deprecated_core_path_gives_the_same_classes_as_the_public_one() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from service.core.sandbox import ToolError, ToolTimeout
    assert ToolTimeout is assaygate.target.ToolTimeout
    assert issubclass(ToolTimeout, ToolError)


def test_the_claim_statuses_are_the_four_a_run_may_release() -> None:
    assert {"completed", "denied", "held", "failed"} == assaygate.target.CLAIM_STATUSES
