"""The sandbox's seccomp filter: a BPF program libseccomp compiles, loaded by bubblewrap.

Why this shape: bubblewrap loads a compiled classic-BPF program from a descriptor
(`--seccomp FD`) after it has built the namespaces and before it runs the inner launcher, so the
filter holds for everything the tenant's code runs and bubblewrap's own setup (mounts, pivot_root)
is not refused. The program is compiled once per worker process, outside the sandbox, by calling
the system's libseccomp (`libseccomp.so.2`, Debian package `libseccomp2`, which
`deploy/ensure-sandbox.sh` installs beside bubblewrap) through ctypes. Debian's `python3-seccomp`
binds the same library but only for the Debian interpreter: the worker's venv may run another
Python (pyenv, python.org) and would have to reach into the system's site-packages for it;
ctypes needs nothing but the library. libseccomp rather than a hand-written program because it
knows each architecture's syscall numbers and refuses the syscalls of other ABIs on this one
(x32, i386 through `int 0x80`): a foreign architecture kills the process.

What the filter refuses, with EPERM (the program sees an ordinary error): creating or entering
namespaces (`unshare`, `setns`, and `clone` with any CLONE_NEW* flag; `clone3`, whose flags
libseccomp cannot inspect, answers ENOSYS so the C library falls back to `clone`), mounting
(`mount`, `umount2`, `pivot_root`, `chroot` and the new mount API), tracing and reading other
processes (`ptrace`, `process_vm_readv`/`writev`, `kcmp`), the kernel's extension points (`bpf`,
`perf_event_open`, `userfaultfd`, `init_module`, `finit_module`, `delete_module`, `kexec_load`,
`kexec_file_load`), the kernel keyring (`keyctl`, `add_key`, `request_key`), and the host-wide
knobs (`reboot`, `swapon`, `swapoff`, `acct`, `quotactl`, `syslog`, `settimeofday`,
`clock_settime`, `clock_adjtime`, `adjtimex`, `iopl`, `ioperm`, `open_by_handle_at`,
`name_to_handle_at`, `lookup_dcookie`, `personality`), and the kernel surfaces a tenant's program
never needs and attacks often use: io_uring (`io_uring_setup`, `io_uring_enter`,
`io_uring_register`: a second syscall path that seccomp cannot see into), the x86 descriptor
tables (`modify_ldt`, `vm86`, `vm86old`), reaching into other processes' memory or descriptors
(`pidfd_getfd`, `process_madvise`, `move_pages`, `migrate_pages`), and obsolete calls
(`uselib`, `_sysctl`, `sysfs`, `ustat`, `create_module`, `get_kernel_syms`, `query_module`,
`nfsservctl`, `vhangup`, `quotactl_fd`).

Sockets: only the families a tenant's program needs — `AF_UNIX`, `AF_INET`, `AF_INET6`, and
`AF_NETLINK` for its route protocol alone (the C library's `getaddrinfo` asks it which address
families the host has) — for `socket` and `socketpair`; every other family (`AF_VSOCK`, the
hypervisor's channel to the host; `AF_PACKET`, `AF_ALG`, `AF_BLUETOOTH`, ...) and every other
netlink protocol answers EPERM. A family is compared on its low 32 bits, as the kernel reads it,
so a raw syscall with high bits set does not pass. Everything else is allowed: the rest of the
confinement (namespaces, no capabilities, the file system allowlist) is what keeps it harmless.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading

LIBRARY = "libseccomp.so.2"
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_MASKED_EQ = 7


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


REFUSED = (
    "unshare",
    "setns",
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "keyctl",
    "add_key",
    "request_key",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "syslog",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "iopl",
    "ioperm",
    "open_by_handle_at",
    "name_to_handle_at",
    "lookup_dcookie",
    "personality",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "modify_ldt",
    "vm86",
    "vm86old",
    "pidfd_getfd",
    "process_madvise",
    "move_pages",
    "migrate_pages",
    "uselib",
    "_sysctl",
    "sysfs",
    "ustat",
    "create_module",
    "get_kernel_syms",
    "query_module",
    "nfsservctl",
    "vhangup",
    "quotactl_fd",
)
# The socket families a tenant's program may open: AF_UNIX, AF_INET, AF_INET6, AF_NETLINK (its
# route protocol only, NETLINK_ROUTE = 0). Every other family below FAMILIES_CHECKED is refused;
# the kernel itself refuses any above AF_MAX (46 in Linux 6.x).
AF_NETLINK = 16
SOCKET_FAMILIES = (1, 2, 10, AF_NETLINK)
FAMILIES_CHECKED = 64
NETLINK_PROTOCOLS_CHECKED = 32  # the kernel's MAX_LINKS
LOW_32 = 0xFFFFFFFF
# CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
# CLONE_NEWNET, CLONE_NEWTIME.
CLONE_NEW: tuple[int, ...] = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000)
CLONE_NEW += (0x20000000, 0x40000000, 0x00000080)


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


class SeccompUnavailable(RuntimeError):
    """libseccomp is missing or refused the filter."""


def _library() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(LIBRARY, use_errno=True)
    except OSError as exc:
        raise SeccompUnavailable(
            f"{LIBRARY} is not installed (Debian package libseccomp2): {exc}"
        ) from None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def compile_filter() -> bytes:
    """The filter as the BPF program bubblewrap's `--seccomp` reads; `SeccompUnavailable`."""
    lib = _library()
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        raise SeccompUnavailable("seccomp_init failed")
    try:
        eperm = _errno_action(errno.EPERM)

        def add(name: str, action: int, *cmps: _ArgCmp) -> None:
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr < 0:
                return  # not a syscall of this architecture (iopl on arm64...)
            array = (_ArgCmp * len(cmps))(*cmps) if cmps else None
            rc = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), array)
            if rc != 0:
                raise SeccompUnavailable(f"seccomp_rule_add({name}) failed: {os.strerror(-rc)}")

        for name in REFUSED:
            add(name, eperm)
        for flag in CLONE_NEW:
            add("clone", eperm, _ArgCmp(0, SCMP_CMP_MASKED_EQ, flag, flag))
        add("clone3", _errno_action(errno.ENOSYS))
        for call in ("socket", "socketpair"):
            for family in range(FAMILIES_CHECKED):
                if family not in SOCKET_FAMILIES:
                    add(call, eperm, _ArgCmp(0, SCMP_CMP_MASKED_EQ, LOW_32, family))
            for protocol in range(1, NETLINK_PROTOCOLS_CHECKED):
                netlink = _ArgCmp(0, SCMP_CMP_MASKED_EQ, LOW_32, AF_NETLINK)
                add(call, eperm, netlink, _ArgCmp(2, SCMP_CMP_MASKED_EQ, LOW_32, protocol))
        read, write = os.pipe()
        try:
            rc = lib.seccomp_export_bpf(ctx, write)
            os.close(write)
            write = -1
            if rc != 0:
                raise SeccompUnavailable(f"seccomp_export_bpf failed: {os.strerror(-rc)}")
            chunks = []
            while chunk := os.read(read, 65536):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(read)
            if write >= 0:
                os.close(write)
    finally:
        lib.seccomp_release(ctx)


_program: bytes | None = None
_error: str | None = None
_lock = threading.Lock()


def program() -> bytes | None:
    """The compiled filter, once per process; None (see `why_not`) where it cannot be built."""
    global _program, _error
    with _lock:
        if _program is None and _error is None:
            try:
                _program = compile_filter()
            except SeccompUnavailable as exc:
                _error = str(exc)
        return _program


def why_not() -> str | None:
    program()
    return _error
