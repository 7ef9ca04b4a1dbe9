"""One trial at a time per world on this host, keyed by tenant and by what the world really is.

A team's sandbox is one world: two trials on it (two shards on two worker processes, or two
assays) must not interleave their resets, calls and probes. The key is the tenant and the
upstreams the world hooks reach (the admin server's URL or command, an http hook's URL, a hook
command), as canonical JSON — never the admin server's *name*, which two tenants' unrelated
worlds may share. The wait is bounded: a waiter says whom it waits for (the holder writes its
assay id into the lock file) and, past its bound, fails the trial as "sandbox busy".
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from service.core.system.contract import Contract

POLL_S = 0.05


class SandboxBusy(Exception):
    """Another trial held the world for longer than this trial may wait."""


def world_identity(
    contract: Contract, tenant: str | None, slot: int | None = None
) -> dict[str, Any]:
    """What the world is: the tenant and, per hook, the upstream it reaches; and which of the
    world's isolated copies (`slot`, for a world that offers slots: the same hook command
    reaches another copy per slot, told by its environment)."""
    hooks: dict[str, Any] = {}
    for name in ("reset", "probe", "mutate"):
        hook = getattr(contract.hooks, name)
        if hook is None:
            continue
        if hook.kind == "mcp":
            assert hook.server is not None
            up = contract.servers[hook.server]
            reach: Any = {"url": up.url} if up.url is not None else {"command": up.command}
        elif hook.kind == "http":
            reach = {"url": hook.url}
        else:
            reach = {"command": hook.command}
        hooks[name] = {"kind": hook.kind, **reach}
    identity: dict[str, Any] = {"tenant": tenant, "hooks": hooks}
    if slot is not None:
        identity["slot"] = slot
    return identity


def world_key(contract: Contract, tenant: str | None, slot: int | None = None) -> str:
    identity = world_identity(contract, tenant, slot)
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def lock_path(key: str) -> str:
    return os.path.join(tempfile.gettempdir(), f"assaygate-sandbox-{key}.lock")


def _holder(fd: int) -> str:
    with contextlib.suppress(OSError):
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
        if text:
            return text
    return "unknown"


@contextlib.contextmanager
def sandbox_lock(
    key: str,
    holder: str,
    wait_s: float,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold the world `key` for the block, as `holder` (an assay id). Waits at most `wait_s`,
    telling `on_wait` whom it waits for (once, and again when the holder changes); then raises
    `SandboxBusy` naming the holder."""
    fd = os.open(lock_path(key), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        end = time.monotonic() + wait_s
        told: str | None = None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
            held_by = _holder(fd)
            if time.monotonic() >= end:
                raise SandboxBusy(
                    f"sandbox busy: world {key} held by assay {held_by} for more than {wait_s:g} s"
                )
            if on_wait is not None and held_by != told:
                told = held_by
                on_wait(f"waiting for sandbox {key}, held by assay {held_by}")
            time.sleep(POLL_S)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, holder.encode(), 0)
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
