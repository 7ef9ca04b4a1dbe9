"""Whether this worker may run an assay's tenant code, which code, and how it confines it
(docs/operations.md, "Running tenant code" and "How code reaches the workers").

Shards of a manifest that names code are queued on the tenant's own queue, which only that
tenant's workers consume (`Settings.worker_queue`). Defence in depth, here: such a shard runs only
on a worker started for its tenant (`ASSAYGATE_WORKER_TENANT`), while an operator still allows the
tenant's code; otherwise its assay fails with the reason and the code never runs.

Which code: the candidate's artifact when it names one (`code: sha256:…`). The worker fetches the
bytes by digest, hashes them again (bytes that do not hash to their digest fail the assay: nothing
of them runs), and unpacks them safely, read-only, into its cache, one folder per digest
(`service.packing`); that folder is the sandbox's code dir. A candidate that names none runs the
operator's folder (`ASSAYGATE_TENANT_CODE_DIR`), hashed the same way when the worker loads it.
Either digest is recorded with each shard the code ran, and the dossier names it as an `executed`
subject. The code runs inside the OS sandbox (`service.sandbox.Confinement`) that the worker
hands `service.targets.load_target`; it is never run unconfined by a worker.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.app.records import AssayInputs
from service.core.errors import ArtifactInvalid
from service.core.system.artifact import Source, check_bytes, written
from service.core.system.manifest import Manifest, code_parts
from service.core.system.secret import code_env
from service.packing import UnpackLimits, folder_digest, folder_entries, materialise
from service.sandbox import Confinement, ProcessLimits, layers
from service.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Code:
    """The tenant's code an assay runs: the folder the sandbox sees, and the SHA-256 of its
    deterministic packing (the artifact's digest, or the operator's folder's)."""

    folder: Path
    sha256: str
    source: Source


class CodeRefused(Exception):
    """The code an assay names cannot be run: its assay fails with `reason`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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
    missing = posture_missing(settings)
    if missing:
        return (
            f"tenant code refused: {first} is code, and this worker cannot give its sandbox the "
            f"layers the operator requires (ASSAYGATE_SANDBOX_MIN_POSTURE): {missing}"
        )
    if settings.tenant_code_dir is None and inputs.code_sha256 is None:
        return (
            f"tenant code refused: {first} is code, the candidate names no code artifact "
            f"(`assaygate submit --code PATH`), and tenant {inputs.tenant}'s worker was started "
            "without ASSAYGATE_TENANT_CODE_DIR (an operator's folder of the tenant's code)"
        )
    return None


def posture_missing(settings: Settings) -> str | None:
    """The required layers this worker's sandboxes lack, and why (None: it has them all)."""
    found = layers.posture(settings.sandbox_uids)
    missing = found.missing(settings.sandbox_required)
    if not missing:
        return None
    why = dict(found.why)
    return "; ".join(f"no {layer} ({why.get(layer, 'unavailable')})" for layer in missing)


def posture_view(settings: Settings) -> dict[str, Any]:
    """The layers this worker's sandboxes have, as a shard, the report and the dossier carry
    them."""
    found = layers.posture(settings.sandbox_uids)
    return found.view(settings.code_memory_mb, settings.code_processes)


def say_posture(settings: Settings) -> None:
    """At a tenant worker's start: each layer its sandboxes will lack, and whether it will
    therefore refuse code (a log line each)."""
    found = layers.posture(settings.sandbox_uids)
    for layer, why in found.why:
        required = layer in settings.sandbox_required
        log.warning(
            "sandbox layer %s unavailable: %s%s",
            layer,
            why,
            " (required by ASSAYGATE_SANDBOX_MIN_POSTURE: this worker refuses tenant code)"
            if required
            else " (tenant code runs without it; the dossier records so)",
        )


def unpack_limits(settings: Settings) -> UnpackLimits:
    return UnpackLimits(settings.artifact_unpacked_max_bytes, settings.artifact_max_entries)


def prepare(settings: Settings, inputs: AssayInputs, fetch: Callable[[], bytes | None]) -> Code:
    """The code this assay runs (call only after `refusal` returned None). The candidate's
    artifact: `fetch()` reads its bytes as stored, they are hashed again and unpacked into the
    cache; or the operator's folder, hashed. Raises `CodeRefused` with the reason otherwise."""
    sha256 = inputs.code_sha256
    if sha256 is None:
        assert settings.tenant_code_dir is not None  # `refusal` refuses a worker without one
        return Code(
            settings.tenant_code_dir, operator_digest(settings.tenant_code_dir), Source.OPERATOR_DIR
        )
    named = written(sha256)
    data = fetch()
    if data is None:
        raise CodeRefused(
            f"tenant code refused: the candidate names artifact {named}, which tenant "
            f"{inputs.tenant} does not hold"
        )
    try:
        check_bytes(data, sha256)
        assert settings.artifact_cache_dir is not None  # settings derive it
        folder = materialise(data, sha256, settings.artifact_cache_dir, unpack_limits(settings))
    except ArtifactInvalid as exc:
        raise CodeRefused(f"tenant code refused: artifact {named}: {exc.message}") from None
    return Code(folder, sha256, Source.ARTIFACT)


_digests: dict[tuple[str, str], str] = {}
_digests_lock = threading.Lock()


def _content(folder: Path) -> str:
    """A hash of everything the packed digest depends on (each entry's path, kind, executable
    bit, link target and every file's bytes), read afresh each time: a file rewritten to the
    same size with its mtime put back changes it. Only the archive (tar and gzip) is cached."""
    h = hashlib.sha256()
    for entry in folder_entries(folder, lazy=True):
        h.update(f"{entry.path}\0{entry.kind}\0{entry.executable}\0{entry.target}\0".encode())
        if entry.source is not None:
            with entry.source.open("rb") as data:
                while chunk := data.read(1 << 20):
                    h.update(chunk)
            h.update(b"\0")
    return h.hexdigest()


def operator_digest(folder: Path) -> str:
    """The operator's folder's digest, as `assaygate pack` gives it outside git (every file
    but `.git`), by content: every file is read at each call, and only the packing of the same
    content is not repeated."""
    key = (str(folder), _content(folder))
    with _digests_lock:
        found = _digests.get(key)
    if found is None:
        found, _ = folder_digest(folder)
        # A file changed while it was packed: the digest is of no one state, so none is kept.
        if _content(folder) == key[1]:
            with _digests_lock:
                _digests[key] = found
    return found


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
    code: Code,
) -> Confinement | None:
    """How this worker confines the assay's code; None when the manifest names no code (a
    remote or reference target runs nothing of the tenant's). Call only after `refusal`
    returned None. `secrets`: the tenant's named secrets the manifest asks for, decrypted;
    with the manifest's declared `target.env` they are the only variables the code sees.
    `egress`: the connection-time check of the sandbox's forward proxy. `code`: what
    `prepare` found; its folder is the sandbox's code dir."""
    if not code_parts(manifest):
        return None
    return Confinement(
        code_dir=code.folder,
        env=code_env(manifest.target.env, secrets),
        limits=limits(settings),
        egress=egress,
        uids=settings.sandbox_uids,
        require=settings.sandbox_required,
    )
