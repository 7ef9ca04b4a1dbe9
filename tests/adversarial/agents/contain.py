"""A tenant's program that pushes at the sandbox's layers from inside (copied into the code dir and
run as `python contain.py NAME ARGS...`; standard library only).

It prints one claim: `{"leaked": ...}` and exits 0 when the attack worked, `{"blocked": "..."}`
and exits 3 when it did not; `hold` prints a line first and then sleeps, holding what it made."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

# x86_64 numbers: the attack calls the kernel directly, past any library wrapper.
SYSCALLS = {
    "unshare": 272,
    "setns": 308,
    "mount": 165,
    "umount2": 166,
    "pivot_root": 155,
    "chroot": 161,
    "ptrace": 101,
    "process_vm_readv": 310,
    "bpf": 321,
    "perf_event_open": 298,
    "userfaultfd": 323,
    "keyctl": 250,
    "add_key": 248,
    "request_key": 249,
    "kexec_load": 246,
    "init_module": 175,
    "finit_module": 313,
    "delete_module": 176,
    "open_by_handle_at": 304,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "modify_ldt": 154,
    "pidfd_getfd": 438,
}
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, SIGCHLD = 0x10000000, 0x00020000, 0x40000000, 17
KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING = 0, -3
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


class Refused(Exception):
    pass


def _call(nr: int, *args: Any) -> int:
    rc = int(libc.syscall(ctypes.c_long(nr), *args))
    if rc < 0:
        raise Refused(errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno())))
    return rc


def _args(name: str) -> tuple[Any, ...]:
    """Arguments each syscall would accept from a process that may make it."""
    s, null = ctypes.c_char_p, None
    return {
        "unshare": (ctypes.c_long(CLONE_NEWUSER),),
        "setns": (os.open("/proc/self/ns/net", os.O_RDONLY), 0),
        "mount": (s(b"none"), s(b"/tmp"), s(b"tmpfs"), ctypes.c_ulong(0), null),
        "umount2": (s(b"/tmp"), 0),
        "pivot_root": (s(b"/tmp"), s(b"/tmp")),
        "chroot": (s(b"/tmp"),),
        "ptrace": (0, 0, 0, 0),  # PTRACE_TRACEME
        "process_vm_readv": (os.getpid(), null, 0, null, 0, 0),
        "bpf": (0, null, 0),
        "perf_event_open": (null, 0, -1, -1, 0),
        "userfaultfd": (0,),
        "keyctl": (KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 1),
        "add_key": (s(b"user"), s(b"stolen"), s(b"x"), 1, KEY_SPEC_SESSION_KEYRING),
        "request_key": (s(b"user"), s(b"stolen"), null, KEY_SPEC_SESSION_KEYRING),
        "kexec_load": (0, 0, null, 0),
        "init_module": (null, 0, s(b"")),
        "finit_module": (os.open("/dev/null", os.O_RDONLY), s(b""), 0),
        "delete_module": (s(b"nothing"), 0),
        "open_by_handle_at": (-100, null, 0),
        "io_uring_setup": (1, ctypes.create_string_buffer(120)),
        "io_uring_enter": (-1, 0, 0, 0, null, 0),
        "io_uring_register": (-1, 0, null, 0),
        "modify_ldt": (0, ctypes.create_string_buffer(16), 16),  # read the LDT
        "pidfd_getfd": (-1, 0, 0),
    }[name]


def syscall(name: str) -> Any:
    """The raw syscall: its result when the kernel took it, the errno name when refused."""
    return f"{name} returned {_call(SYSCALLS[name], *_args(name))}"


def clone_namespace(which: str) -> Any:
    """clone(2) with a CLONE_NEW* flag, as fork() would be (the child exits at once)."""
    flag = {"user": CLONE_NEWUSER, "mount": CLONE_NEWNS, "net": CLONE_NEWNET}[which]
    pid = _call(56, ctypes.c_long(flag | SIGCHLD), 0, 0, 0, 0)
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return f"cloned into a new {which} namespace (pid {pid})"


def unshare_command() -> Any:
    done = subprocess.run(["unshare", "-U", "id"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise Refused(done.stderr.strip())
    return done.stdout.strip()


def status() -> Any:
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    return {k: fields[k].split()[0] for k in ("Seccomp", "Uid", "Gid") if k in fields}


def mountinfo() -> Any:
    with open("/proc/self/mountinfo") as f:
        return f.read()


def fill_relay(mb: str) -> Any:
    """Write `mb` MB into the relay folder, one 1 MB file at a time (the per-file limit is
    larger: only the folder's own size can stop it)."""
    written = 0
    try:
        for i in range(int(mb)):
            with open(f"/run/assaygate/run/fill-{i}", "wb") as f:
                f.write(b"\0" * (1024 * 1024))
            written += 1
    except OSError as exc:
        raise Refused(f"{type(exc).__name__}: {exc.strerror} after {written} MB") from None
    return f"wrote {written} MB"


def hold(most: str, seconds: str) -> Any:
    """Fork sleepers until the kernel refuses (at most `most`), say how many, hold them."""
    made = 0
    try:
        for _ in range(int(most)):
            pid = os.fork()
            if pid == 0:
                time.sleep(float(seconds))
                os._exit(0)
            made += 1
    except OSError as exc:
        print(json.dumps({"holding": made, "stopped_by": exc.strerror}), flush=True)
    else:
        print(json.dumps({"holding": made, "stopped_by": None}), flush=True)
    time.sleep(float(seconds))
    return made


def children(count: str, mb: str, seconds: str) -> Any:
    """`count` children holding `mb` MB each at once, for `seconds`; how many came through."""
    code = f"import time; b = bytearray({int(mb)} * 1024 * 1024); time.sleep({float(seconds)})"
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(int(count))]
    codes = [p.wait() for p in procs]
    if any(c != 0 for c in codes):
        raise Refused(f"children ended with {codes}")
    return f"{count} children held {int(count) * int(mb)} MB together"


def open_socket(family: str, protocol: str = "0") -> Any:
    """socket(2) of a family (and protocol) by number, called raw: high bits set on request
    (`family` prefixed with `high:`), as the kernel ignores them."""
    number = int(family.removeprefix("high:"), 0)
    if family.startswith("high:"):
        number |= 1 << 32
    kind = 3 if number & 0xFFFFFFFF == 16 else 1  # SOCK_RAW for netlink, else SOCK_STREAM
    fd = _call(41, ctypes.c_long(number), kind, int(protocol))
    os.close(fd)
    return f"socket of family {family} protocol {protocol}"


def read(path: str) -> Any:
    with open(path, "rb") as f:
        return f.read().replace(b"\0", b" ").decode("utf-8", "replace")


def resolve(host: str) -> Any:
    import socket

    return sorted({a[4][0] for a in socket.getaddrinfo(host, 80, type=socket.SOCK_STREAM)})


def hello() -> Any:
    return "hello"


ATTACKS: dict[str, Callable[..., Any]] = {
    "syscall": syscall,
    "clone": clone_namespace,
    "unshare-command": unshare_command,
    "status": status,
    "mountinfo": mountinfo,
    "fill-relay": fill_relay,
    "hold": hold,
    "children": children,
    "socket": open_socket,
    "read": read,
    "resolve": resolve,
    "hello": hello,
}


def main() -> int:
    sys.stdin.read()
    name, *args = sys.argv[1:]
    try:
        got = ATTACKS[name](*args)
    except (Refused, OSError) as exc:
        print(json.dumps({"blocked": str(exc)}))
        return 3
    print(json.dumps({"leaked": got}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
