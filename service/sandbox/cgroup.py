"""Memory and process limits per sandbox *tree*, through the host's cgroups.

RLIMIT_AS and RLIMIT_NPROC hold per process (and per uid); a tree of children each under the
limit could still add up past it. So each sandbox gets its own cgroup, created under the worker's
own (what /proc/self/cgroup names: a worker's sandboxes count against whatever limits its
supervisor set for it), with the tree's memory (no swap) and its number of tasks capped. The
bubblewrap process enters it before it execs (`procs` files), so every process of the sandbox is
born inside.

- **v2** (a `cgroup2` mount whose `cgroup.controllers` offers memory and pids, and a worker
  cgroup that can delegate them: its `cgroup.subtree_control` takes `+memory +pids`):
  `memory.max`, `memory.swap.max` 0, `memory.oom.group` 1 (an out-of-memory kill takes the whole
  tree), `pids.max`.
- **v1** (the `memory` and `pids` controllers each on a `cgroup` mount, as hybrid hosts have
  them): `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes` where swap is accounted),
  `pids.max`; the kernel kills the largest process of the tree when it goes over.
- **Neither writable** (no controller mounted, read-only `/sys/fs/cgroup`, not root): `detect()`
  says why; the worker logs it at start and the posture records `cgroup: null`.

A cgroup is removed when its sandbox closes (once its processes are gone).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from dataclasses import dataclass

MOUNTINFO = "/proc/self/mountinfo"
SELF = "/proc/self/cgroup"
PREFIX = "assaygate-"
RMDIR_WAIT_S = 5.0


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, super options) of every cgroup mount this process sees."""
    out: list[tuple[str, str, set[str]]] = []
    with open(MOUNTINFO, encoding="utf-8") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                out.append((fields[4], tail[0], set(tail[2].split(","))))
    return out


def _own() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and '' for the v2 hierarchy."""
    out: dict[str, str] = {}
    with open(SELF, encoding="utf-8") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                out[name] = path
    return out


def _writable(path: str) -> bool:
    return os.path.isdir(path) and os.access(path, os.W_OK)


@dataclass(frozen=True)
class Hierarchy:
    """Where this worker makes its sandboxes' cgroups: `version` "v2" or "v1", and the parent
    directory per controller (v2: one, keyed "")."""

    version: str
    parents: tuple[tuple[str, str], ...]


def _v2(mounts: list[tuple[str, str, set[str]]], own: dict[str, str]) -> Hierarchy | str:
    found = [m for m, kind, _ in mounts if kind == "cgroup2"]
    if not found:
        return "no cgroup2 mount"
    parent = found[0] + own.get("", "/")
    try:
        with open(os.path.join(parent, "cgroup.controllers"), encoding="utf-8") as f:
            offered = set(f.read().split())
    except OSError as exc:
        return f"cgroup2 at {parent}: {exc.strerror}"
    if not {"memory", "pids"} <= offered:
        return f"cgroup2 at {parent} offers {sorted(offered) or 'no controller'}, not memory+pids"
    if not _writable(parent):
        return f"cgroup2 at {parent} is not writable"
    try:
        with open(os.path.join(parent, "cgroup.subtree_control"), "w", encoding="utf-8") as f:
            f.write("+memory +pids")
    except OSError as exc:
        # A cgroup that holds processes cannot delegate controllers (cgroup v2's "no internal
        # processes" rule) unless it is the root.
        return f"cgroup2 at {parent} cannot delegate memory+pids: {exc.strerror}"
    return Hierarchy("v2", (("", parent),))


def _v1(mounts: list[tuple[str, str, set[str]]], own: dict[str, str]) -> Hierarchy | str:
    parents: list[tuple[str, str]] = []
    for controller in ("memory", "pids"):
        points = [m for m, kind, opts in mounts if kind == "cgroup" and controller in opts]
        if not points:
            return f"no cgroup v1 {controller} mount"
        parent = points[0] + own.get(controller, "/")
        if not _writable(parent):
            return f"cgroup v1 {controller} at {parent} is not writable"
        parents.append((controller, parent))
    return Hierarchy("v1", tuple(parents))


_detected: Hierarchy | str | None = None
_lock = threading.Lock()


def detect() -> Hierarchy | str:
    """This worker's hierarchy for sandbox cgroups, or why there is none (once per process)."""
    global _detected
    with _lock:
        if _detected is None:
            try:
                mounts, own = _mounts(), _own()
            except (OSError, ValueError) as exc:
                _detected = f"cannot read the process's cgroups: {exc}"
            else:
                v2 = _v2(mounts, own)
                v1 = _v1(mounts, own) if isinstance(v2, str) else v2
                _detected = v1 if isinstance(v1, Hierarchy) else f"{v2}; {v1}"
        return _detected


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(value)


class TreeCgroup:
    """One sandbox's cgroup(s): made with its limits; `procs` the files its first process
    writes its pid to; `oom_kills()` how many processes the kernel killed for memory."""

    def __init__(self, hierarchy: Hierarchy, memory_mb: int, processes: int) -> None:
        self.version = hierarchy.version
        name = PREFIX + uuid.uuid4().hex[:16]
        self.dirs: dict[str, str] = {}
        memory = str(memory_mb * 1024 * 1024)
        try:
            for controller, parent in hierarchy.parents:
                path = os.path.join(parent, name)
                os.mkdir(path, 0o755)
                self.dirs[controller] = path
            if self.version == "v2":
                path = self.dirs[""]
                _write(os.path.join(path, "memory.max"), memory)
                swap = os.path.join(path, "memory.swap.max")
                if os.path.exists(swap):
                    _write(swap, "0")
                _write(os.path.join(path, "memory.oom.group"), "1")
                _write(os.path.join(path, "pids.max"), str(processes))
            else:
                path = self.dirs["memory"]
                _write(os.path.join(path, "memory.limit_in_bytes"), memory)
                swap = os.path.join(path, "memory.memsw.limit_in_bytes")
                if os.path.exists(swap):
                    _write(swap, memory)
                _write(os.path.join(self.dirs["pids"], "pids.max"), str(processes))
        except OSError:
            self.close()
            raise
        self.procs = [os.path.join(d, "cgroup.procs") for d in self.dirs.values()]

    def oom_kills(self) -> int:
        path = self.dirs.get("" if self.version == "v2" else "memory")
        name = "memory.events" if self.version == "v2" else "memory.oom_control"
        try:
            with open(os.path.join(path or "", name), encoding="utf-8") as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def pids_refused(self) -> int:
        """How many forks the tree's task limit refused."""
        path = self.dirs.get("" if self.version == "v2" else "pids")
        try:
            with open(os.path.join(path or "", "pids.events"), encoding="utf-8") as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "max":
                        return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def _members(self) -> list[int]:
        pids: set[int] = set()
        for procs in [os.path.join(d, "cgroup.procs") for d in self.dirs.values()]:
            with contextlib.suppress(OSError, ValueError), open(procs, encoding="utf-8") as f:
                pids.update(int(p) for p in f.read().split())
        return sorted(pids)

    def kill(self) -> None:
        """Kill every process of the tree at once: v2's `cgroup.kill` where the kernel has it
        (5.14+: no fork can race it), then each member by pid (v1, or to be sure)."""
        for path in list(self.dirs.values()):
            with contextlib.suppress(OSError):
                _write(os.path.join(path, "cgroup.kill"), "1")
        for _ in range(3):  # a member forking as it is killed leaves a child for the next pass
            members = self._members()
            if not members:
                return
            for pid in members:
                with contextlib.suppress(OSError):
                    os.kill(pid, 9)

    def close(self) -> None:
        """Kill whatever is left in it and remove it (waiting for the kernel to reap)."""
        end = time.monotonic() + RMDIR_WAIT_S
        for _, path in sorted(self.dirs.items(), key=lambda kv: kv[0]):
            while True:
                for pid in self._members():
                    with contextlib.suppress(OSError):
                        os.kill(pid, 9)
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > end:
                        break  # left behind; an empty cgroup costs nothing
                    time.sleep(0.02)
        self.dirs = {}
