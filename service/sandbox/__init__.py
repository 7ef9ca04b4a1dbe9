"""Running a tenant's code: only inside an OS sandbox, with nothing of the gate's.

`Confinement` is what a worker hands the target adapters (python target, command/python/framework
runners, stdio servers, command hooks) for a tenant's code; `None` means unconfined, which only
the local `assaygate assay` on a user's own machine uses. The sandbox itself (bubblewrap, the
relays that are its only network, the limits) lives in this package's modules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from service.sandbox.tenure import SandboxEnded, Tenure

__all__ = ["VENDOR", "Confinement", "ProcessLimits", "SandboxEnded", "Tenure"]


@dataclass(frozen=True)
class ProcessLimits:
    """Per sandboxed process tree: CPU seconds, address space, processes, open files, file size,
    and the size of its /tmp."""

    cpu_s: int = 300
    memory_mb: int = 2048
    processes: int = 256
    open_files: int = 512
    file_mb: int = 64
    # The sandbox's /tmp (and HOME in it) is memory: bounded apart from the address space.
    tmp_mb: int = 256


@dataclass(frozen=True)
class Confinement:
    """How a tenant's code runs on its worker."""

    # The tenant's code: bound read-only into the sandbox and its working directory.
    code_dir: Path
    # The only variables the code sees besides what the sandbox itself sets (PATH, HOME, LANG,
    # the proxy URLs): the manifest's declared `target.env` and the tenant's named secrets.
    env: Mapping[str, str] = field(default_factory=dict)
    limits: ProcessLimits = field(default_factory=ProcessLimits)
    # Connection-time egress check for the sandbox's forward proxy: (host, port) -> the address
    # to connect to, or raises (service.net.egress.EgressRefused). None: no egress beyond the
    # gate's own relays (the proxy, the tool server).
    egress: Callable[[str, int], str] | None = None
    # The operator's range of sandbox uids (ASSAYGATE_SANDBOX_UID_RANGE): one leased per sandbox
    # (service/sandbox/layers.py). None: every sandbox runs as 65534.
    uids: tuple[int, int] | None = None
    # The layers the operator requires (ASSAYGATE_SANDBOX_MIN_POSTURE, names of
    # service.sandbox.layers.LAYERS): a sandbox that cannot have them all is not built.
    require: frozenset[str] = frozenset()
    # The right to run of every sandbox built under this confinement (service.sandbox.tenure):
    # once it ends, they are killed and none is built again. None: they live until closed.
    tenure: Tenure | None = field(default=None, compare=False)

    def python_path(self) -> str:
        """The import path of the gate's python hosts in the sandbox: the code dir, then its
        `vendor/` folder when it has one (the team's pinned dependencies, inside the artifact
        and so inside its digest; docs/operations.md, "How code reaches the workers")."""
        vendor = self.code_dir / VENDOR
        paths = [self.code_dir, vendor] if vendor.is_dir() else [self.code_dir]
        # Last, the folder of the gate's own packages, which the sandbox binds for its hosts:
        # the hosts then import what is bound however the venv installed the gate (an editable
        # install of another checkout would point at a path the sandbox does not have).
        paths.append(GATE_PACKAGES)
        return ":".join(str(p) for p in paths)


#: The folder of a team's code that holds its vendored dependencies.
VENDOR = "vendor"
#: The folder holding the gate's packages (`service`, `assaygate`), bound for its python hosts.
GATE_PACKAGES = Path(__file__).resolve().parents[2]
