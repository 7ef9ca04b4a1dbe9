"""The command that starts bubblewrap confined: under the seccomp filter, in the sandbox's
cgroup(s), its options handed over a descriptor (split from `bwrap.py`)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from service.sandbox import seccomp

BWRAP = "/usr/bin/bwrap"
SH = "/bin/sh"
# Run by /bin/sh as root on the worker's side, between the spawner and bubblewrap: open the
# seccomp program on descriptor 3 (`--seccomp 3`), the inner launcher on 4 (copied in with
# `--ro-bind-data`: no host path of it shows in /proc/self/mountinfo) and bubblewrap's own
# arguments on 5 (`--args 5`: its command line, which the sandbox reads as /proc/1/cmdline,
# names no host path) and an empty file's contents on 6 (what the sandbox reads as
# /proc/cmdline), enter the sandbox's cgroup(s) (every file up to `--`), then become
# bubblewrap (same process: `--die-with-parent` still follows the spawning thread). A command
# line, not a pre-exec hook, so the MCP SDK's stdio client (which spawns `argv` itself) gets the
# same sandbox.
ENTER = (
    'exec 3<"$1" 4<"$2" 5<"$3" 6</dev/null || exit 125; shift 3; '
    'for f; do shift; [ "$f" = -- ] && break; echo $$ >"$f" || exit 125; done; exec "$@"'
)
ARGS_FD = "5"


def enter_command(
    folder: str,
    procs: Sequence[str],
    bwrap: Sequence[str],
    command: Sequence[str],
    inner: str = os.devnull,
) -> list[str]:
    """The command that puts bubblewrap under the seccomp filter and into the cgroup(s), and
    hands it its options (`bwrap`, from `_base` on: the host paths) through a descriptor; only
    the sandbox's `command` (paths as the sandbox sees them) stays on its command line, where
    bubblewrap reads it."""
    program = seccomp.program()
    path = os.devnull
    if program is not None:
        path = os.path.join(folder, "seccomp.bpf")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(program)
    assert bwrap[0] == BWRAP
    args = os.path.join(folder, "bwrap.args")
    fd = os.open(args, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(b"".join(os.fsencode(a) + b"\0" for a in bwrap[1:]))
    enter = [SH, "-c", ENTER, "sh", path, inner, args, *procs, "--"]
    return [*enter, BWRAP, "--args", ARGS_FD, "--", *command]
