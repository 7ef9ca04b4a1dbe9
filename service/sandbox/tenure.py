"""A tenure: the right of one group of sandboxes (one assay's, on one worker process) to run.

A worker hands each assay's confinement a `Tenure`; every sandbox built under it registers
while it lives. `end(reason)` is final: it kills every live sandbox's whole tree at once, and
no sandbox is built or spawned under the tenure afterwards (`SandboxEnded`, with the reason).
So an adapter that restarts a host that died (a python target, a runner) cannot bring the
tenant's code back after its right to run ended: its assay ended, its code was revoked, or a
secret it holds was deleted or rotated (worker.rights).
"""

from __future__ import annotations

import threading
from typing import Protocol


class SandboxEnded(RuntimeError):
    """The sandbox's tenure ended: nothing of it runs again."""


class Killable(Protocol):
    def kill(self) -> None: ...


class Tenure:
    """Which sandboxes live under one right to run, and whether it still holds."""

    def __init__(self, holder: str = "") -> None:
        self.holder = holder
        self._lock = threading.Lock()
        self._live: list[Killable] = []
        self._ended: str | None = None

    @property
    def ended(self) -> str | None:
        """Why the tenure ended, or None while it holds."""
        return self._ended

    def enter(self, sandbox: Killable) -> None:
        """Count a sandbox as living under the tenure; `SandboxEnded` once it ended."""
        with self._lock:
            self._refuse()
            self._live.append(sandbox)

    def leave(self, sandbox: Killable) -> None:
        with self._lock:
            self._live = [s for s in self._live if s is not sandbox]

    def check(self) -> None:
        """`SandboxEnded` once the tenure ended (before a sandbox spawns its tree)."""
        with self._lock:
            self._refuse()

    def _refuse(self) -> None:
        if self._ended is not None:
            raise SandboxEnded(f"the tenant's sandbox was ended: {self._ended}")

    def end(self, reason: str) -> bool:
        """End the tenure now: every live sandbox's tree is killed; False if it had ended."""
        with self._lock:
            if self._ended is not None:
                return False
            self._ended = reason
            live, self._live = self._live, []
        for sandbox in live:
            sandbox.kill()
        return True
