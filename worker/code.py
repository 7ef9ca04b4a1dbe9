"""Whether this worker may run an assay's tenant code, and how it confines it (DESIGN.md §7).

Shards of a manifest that names code are queued on the tenant's own queue, which only that
tenant's workers consume (`Settings.worker_queue`). Defence in depth, here: such a shard runs only
on a worker started for its tenant (`ASSAYGATE_WORKER_TENANT`), with the tenant's code
(`ASSAYGATE_TENANT_CODE_DIR`), while an operator still allows the tenant's code; otherwise its
assay fails with the reason and the code never runs. The code runs inside the OS sandbox
(`service.sandbox.Confinement`), which the target adapters receive from `load_confined`.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping

from service.core.engine import TrialEngine
from service.core.execution import code_parts
from service.core.manifest import Manifest
from service.core.target import Target
from service.db.assay import AssayInputs
from service.sandbox import Confinement, Limits
from service.settings import Settings
from service.targets import load_target

log = logging.getLogger("assaygate.worker")


def refusal(
    settings: Settings, inputs: AssayInputs, manifest: Manifest, allowed: bool
) -> str | None:
    """Why this worker must not run the assay's code (None: it may, or there is no code).
    `allowed`: the tenant's `code_allowed`, read afresh for this shard."""
    parts = code_parts(manifest)
    if not parts:
        return None
    first = f"{parts[0].field} ({parts[0].kind})"
    hint = f"`assaygate tenants allow-code {inputs.tenant}`"
    if not allowed:
        return (
            f"tenant code refused: {first} is code, and tenant {inputs.tenant} is no longer "
            f"allowed to run code (an operator allows it again with {hint})"
        )
    if settings.worker_tenant != inputs.tenant:
        where = (
            f"tenant {settings.worker_tenant}'s worker"
            if settings.worker_tenant
            else "a shared worker"
        )
        return (
            f"tenant code refused: {first} is code of tenant {inputs.tenant}, and {where} never "
            f"runs it; it runs only on a worker started with ASSAYGATE_WORKER_TENANT="
            f"{inputs.tenant}"
        )
    if settings.tenant_code_dir is None:
        return (
            f"tenant code refused: {first} is code, and tenant {inputs.tenant}'s worker was "
            "started without ASSAYGATE_TENANT_CODE_DIR (where the tenant's code lives)"
        )
    return None


def limits(settings: Settings) -> Limits:
    return Limits(
        cpu_s=settings.code_cpu_s,
        memory_mb=settings.code_memory_mb,
        processes=settings.code_processes,
        open_files=settings.code_open_files,
        file_mb=settings.code_file_mb,
    )


def secrets_env(inputs: AssayInputs, manifest: Manifest) -> Mapping[str, str]:
    """TENANT SECRETS PLUG IN HERE: the tenant's named secrets the manifest asks for
    (`target.secrets`), decrypted for this tenant only (service/app/secrets.py). Empty until
    tenant secrets are merged."""
    return {}


def confinement_for(
    settings: Settings, inputs: AssayInputs, manifest: Manifest
) -> Confinement | None:
    """How this worker confines the assay's code; None when the manifest names no code (a
    remote or reference target runs nothing of the tenant's). Call only after `refusal`
    returned None."""
    if not code_parts(manifest):
        return None
    assert settings.tenant_code_dir is not None  # `refusal` refuses a worker without one
    env: dict[str, str] = {}
    # The manifest's declared `target.env` joins here once the manifest has it.
    env.update(secrets_env(inputs, manifest))
    return Confinement(code_dir=settings.tenant_code_dir, env=env, limits=limits(settings))


def sandbox_available() -> bool:
    """Whether this build's target adapters take a `Confinement` (the sandbox is merged)."""
    return "confinement" in inspect.signature(load_target).parameters


def load_confined(
    manifest: Manifest, confinement: Confinement | None
) -> Target | TrialEngine | None:
    """`load_target`, handing tenant code its confinement.

    SANDBOX PLUGS IN HERE: once `service.targets.load_target` takes `confinement=` (the sandbox
    branch), this passes it; the fallback below, which runs the tenant's code on its own worker
    without the OS sandbox, must then be deleted so code never runs unconfined."""
    if confinement is None:
        return load_target(manifest)
    if sandbox_available():
        # Through `...`: until the sandbox is merged, `load_target` has no such parameter.
        load: Callable[..., Target | TrialEngine | None] = load_target
        return load(manifest, confinement=confinement)
    log.warning(
        "the OS sandbox is not in this build: tenant code runs unconfined on its tenant's worker"
    )
    return load_target(manifest)
