"""The sandbox's layers beyond bubblewrap's namespaces, and the posture a worker records.

- **A uid per sandbox.** As root, each sandbox runs as a uid leased from the operator's range
  (`ASSAYGATE_SANDBOX_UID_RANGE`, default 200000-265535) for as long as it lives: RLIMIT_NPROC
  counts per uid, so one tree's processes never count against another's (a tenant's fork bomb
  stops at its own limit and nobody else's). A lease is an exclusive `flock` on a file named by
  the uid in a root-only folder every worker of the host shares (`/run/assaygate-uids`), so two
  worker processes never hand out the same uid at once; a dead worker's locks go with it. Not
  root, the user namespace maps the caller to 65534 and the real uid is the caller's: shared.
- **The relay folder on its own tmpfs.** As root, the run directory (its Unix sockets and the
  launcher's configuration) is a tmpfs of `RELAY_MB`, owned by the sandbox's uid and mounted on
  the worker's side, so what the tenant writes there is capped and never reaches the host's disk;
  inside, `/proc/self/mountinfo` then names it `tmpfs` at `/run/assaygate/run`, not a host path.
- **The posture** (`Posture`): which layers this worker puts around every sandbox, measured once
  per process, carried with each shard that ran tenant code into the report and the signed
  dossier; `missing(required)` is what the operator's minimum (`ASSAYGATE_SANDBOX_MIN_POSTURE`)
  asks for and this worker cannot give, and such a worker runs no tenant code.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import random
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

from service.sandbox import cgroup, seccomp

LEASES = "/run/assaygate-uids"
RELAY_MB = 16
#: The layers an operator may require (`ASSAYGATE_SANDBOX_MIN_POSTURE`).
LAYERS = ("namespaces", "seccomp", "cgroup", "uid", "relay_tmpfs")
# What the filter refuses (service/sandbox/seccomp.py), as the posture and the dossier state it.
SECCOMP_SAYS = (
    "refuses namespaces, mount, ptrace, bpf, keyctl, modules, io_uring, modify_ldt; sockets "
    "only unix, inet, inet6 and netlink route (EPERM)"
)
MNT_DETACH = 2
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8


class UidLease:
    """An exclusive hold on one uid of `first..last` until `release()`; `SandboxUnavailable`-
    worthy `OSError` when every uid is held."""

    def __init__(self, first: int, last: int) -> None:
        os.makedirs(LEASES, mode=0o700, exist_ok=True)
        size = last - first + 1
        start = random.randrange(size)
        for step in range(size):
            uid = first + (start + step) % size
            fd = os.open(os.path.join(LEASES, str(uid)), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.uid, self._fd = uid, fd
            return
        raise OSError(f"every sandbox uid of {first}-{last} is in use")

    def release(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def kill_uid(uid: int) -> int:
    """SIGKILL every process whose real or effective uid is `uid` (a leased sandbox uid: only
    its own tree runs as it); how many were signalled."""
    killed = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", encoding="utf-8") as f:
                uids = next((line.split()[1:3] for line in f if line.startswith("Uid:")), [])
            if str(uid) in uids:
                os.kill(int(name), 9)
                killed += 1
        except (OSError, ValueError):
            continue  # gone already, or not ours to read
    return killed


def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return libc


def mount_relay(path: str, uid: int, gid: int) -> None:
    """A tmpfs of RELAY_MB at `path`, 0700 and owned by the sandbox's uid; `OSError`."""
    options = f"size={RELAY_MB}m,mode=0700,uid={uid},gid={gid}"
    libc = _libc()
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    if libc.mount(b"tmpfs", path.encode(), b"tmpfs", flags, options.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot mount the relay tmpfs: {os.strerror(err)}")


def unmount_relay(path: str) -> None:
    with contextlib.suppress(OSError):
        _libc().umount2(path.encode(), MNT_DETACH)


def _can_mount() -> str | None:
    """Why this process cannot mount the relay tmpfs (None: it can)."""
    if os.getuid() != 0:
        return "not root: the run directory stays a plain folder of the worker's temp dir"
    probe = tempfile.mkdtemp(prefix="assaygate-relay-probe-")
    try:
        mount_relay(probe, 0, 0)
    except OSError as exc:
        return str(exc)
    finally:
        unmount_relay(probe)
        with contextlib.suppress(OSError):
            os.rmdir(probe)
    return None


@dataclass(frozen=True)
class Posture:
    """The layers this worker's sandboxes have: each None where absent, with `why` saying so."""

    namespaces: tuple[str, ...]
    seccomp: str | None
    cgroup: str | None
    uid: str | None
    relay_tmpfs_mb: int | None
    why: tuple[tuple[str, str], ...] = ()

    def has(self, layer: str) -> bool:
        if layer == "namespaces":
            return bool(self.namespaces)
        if layer == "relay_tmpfs":
            return self.relay_tmpfs_mb is not None
        return getattr(self, layer) is not None

    def missing(self, required: frozenset[str]) -> list[str]:
        return [layer for layer in LAYERS if layer in required and not self.has(layer)]

    def view(self, memory_mb: int, processes: int) -> dict[str, Any]:
        """As the report and the dossier carry it, with the tree limits in force."""
        out: dict[str, Any] = {
            "namespaces": list(self.namespaces),
            "seccomp": self.seccomp,
            "cgroup": None
            if self.cgroup is None
            else {"version": self.cgroup, "memory_mb": memory_mb, "pids": processes},
            "uid": self.uid,
            "relay_tmpfs_mb": self.relay_tmpfs_mb,
        }
        if self.why:
            out["missing"] = dict(self.why)
        return out


NAMESPACES_ROOT = ("net", "pid", "ipc", "uts", "cgroup", "mount")
NAMESPACES_USER = ("user", *NAMESPACES_ROOT)

_posture: dict[tuple[int, int] | None, Posture] = {}
_lock = threading.Lock()


def posture(uids: tuple[int, int] | None) -> Posture:
    """What this process's sandboxes get (`uids`: the operator's range), measured once."""
    with _lock:
        found = _posture.get(uids)
        if found is None:
            found = _posture[uids] = _measure(uids)
        return found


def _measure(uids: tuple[int, int] | None) -> Posture:
    root = os.getuid() == 0
    why: dict[str, str] = {}
    program = seccomp.program()
    if program is None:
        why["seccomp"] = seccomp.why_not() or "no filter"
    hierarchy = cgroup.detect()
    if isinstance(hierarchy, str):
        why["cgroup"] = hierarchy
    uid = None
    if not root:
        why["uid"] = "not root: every sandbox is the caller's uid outside its user namespace"
    elif uids is None:
        why["uid"] = "no ASSAYGATE_SANDBOX_UID_RANGE: every sandbox runs as 65534"
    else:
        uid = f"per sandbox from {uids[0]}-{uids[1]}"
    relay = _can_mount()
    if relay is not None:
        why["relay_tmpfs"] = relay
    return Posture(
        namespaces=NAMESPACES_ROOT if root else NAMESPACES_USER,
        seccomp=SECCOMP_SAYS if program is not None else None,
        cgroup=None if isinstance(hierarchy, str) else hierarchy.version,
        uid=uid,
        relay_tmpfs_mb=RELAY_MB if relay is None else None,
        why=tuple(sorted(why.items())),
    )
