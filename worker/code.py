"""Whether this worker may run an assay's tenant code, and how it confines it (DESIGN.md §7).

Shards of a manifest that names code are queued on the tenant's own queue, which only that
tenant's workers consume (`Settings.worker_queue`). Defence in depth, here: such a shard runs only
on a worker started for its tenant (`ASSAYGATE_WORKER_TENANT`), with the tenant's code
(`ASSAYGATE_TENANT_CODE_DIR`), while an operator still allows the tenant's code; otherwise its
assay fails with the reason and the code never runs. The code runs inside the OS sandbox
(`service.sandbox.Confinement`) that the worker hands `service.targets.load_target`; it is
never run unconfined by a worker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from service.app.records import AssayInputs
from service.core.system.manifest import Manifest, code_parts
from service.core.system.secret import code_env
from service.sandbox import Confinement, ProcessLimits
from service.settings import Settings


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


def limits(settings: Settings) -> ProcessLimits:
    return ProcessLimits(
        cpu_s=settings.code_cpu_s,
        memory_mb=settings.code_memory_mb,
        processes=settings.code_processes,
        open_files=settings.code_open_files,
        file_mb=settings.code_file_mb,
    )


def confinement_for(
    settings: Settings,
    manifest: Manifest,
    secrets: Mapping[str, str],
    egress: Callable[[str, int], str] | None,
) -> Confinement | None:
    """How this worker confines the assay's code; None when the manifest names no code (a
    remote or reference target runs nothing of the tenant's). Call only after `refusal`
    returned None. `secrets`: the tenant's named secrets the manifest asks for, decrypted;
    with the manifest's declared `target.env` they are the only variables the code sees.
    `egress`: the connection-time check of the sandbox's forward proxy."""
    if not code_parts(manifest):
        return None
    assert settings.tenant_code_dir is not None  # `refusal` refuses a worker without one
    return Confinement(
        code_dir=settings.tenant_code_dir,
        env=code_env(manifest.target.env, secrets),
        limits=limits(settings),
        egress=egress,
    )
