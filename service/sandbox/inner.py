"""The first process inside the sandbox: drop to the sandbox user, set the limits, relay, run.

Run by bubblewrap as `python -I -S inner.py UID GID CONFIG -- ARGV...`; standard library only
(the sandbox binds this file, not the gate's package). CONFIG is a JSON file the gate wrote into
the run directory, readable only by the sandbox user, which this process becomes first: the
program's environment (so no secret is ever on a command line), the limits and the relays. It is
read and deleted before the program starts.

Relays (the sandbox's network namespace is empty: these are its only ways out or in):
- `outbound` {port: socket name}: listen on 127.0.0.1:port here and pipe each connection to the
  Unix socket of that name in the run directory, where the gate's side connects on to the real
  address (so a URL such as the trial's MCP proxy needs no rewriting);
- `inbound` {socket name: port}: listen on that Unix socket and pipe each connection to
  127.0.0.1:port here, where the program serves (a python host the gate POSTs tasks to).

This process then forks the program as its only child, hands it stdin/stdout/stderr, keeps
relaying, and exits with the program's status; bubblewrap's pid 1 then ends every other process
in the namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import resource
import signal
import sys
from collections.abc import Awaitable
from typing import Any

PR_CAPBSET_DROP = 24
_CAPABILITY_VERSION_3 = 0x20080522
CHUNK = 65536


def _drop_privileges(uid: int, gid: int) -> None:
    """As root (bubblewrap's privileged mode, no user namespace): empty the capability bounding
    set while CAP_SETPCAP is still held, then become uid/gid for good (setresuid clears the
    permitted and effective capabilities). Not root: bubblewrap already mapped us to uid."""
    if os.getuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        # EINVAL past the kernel's last capability: nothing left to drop.
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:
            break
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    # setresuid emptied the permitted and effective sets; the inheritable set goes too.
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    if libc.capset(header, data) != 0:
        raise SystemExit("sandbox: could not clear the inheritable capabilities")
    if os.getresuid() != (uid, uid, uid) or os.getgroups():
        raise SystemExit("sandbox: could not drop privileges")


def _set_limits(limits: dict[str, int]) -> None:
    mb = 1024 * 1024
    for which, value in (
        (resource.RLIMIT_CPU, limits["cpu_s"]),
        (resource.RLIMIT_AS, limits["memory_mb"] * mb),
        (resource.RLIMIT_NPROC, limits["processes"]),
        (resource.RLIMIT_NOFILE, limits["open_files"]),
        (resource.RLIMIT_FSIZE, limits["file_mb"] * mb),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(which, (value, value))


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        pass
    finally:
        writer.close()


Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _splice(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connect: Awaitable[Streams]
) -> None:
    try:
        far_reader, far_writer = await connect
    except OSError:
        writer.close()
        return
    await asyncio.gather(pipe(reader, far_writer), pipe(far_reader, writer))


async def _serve(config: dict[str, Any], argv: list[str]) -> int:
    run_dir = str(config["run_dir"])
    servers: list[asyncio.Server] = []
    for port, name in dict(config["outbound"]).items():
        path = os.path.join(run_dir, str(name))

        async def out(r: asyncio.StreamReader, w: asyncio.StreamWriter, p: str = path) -> None:
            await _splice(r, w, asyncio.open_unix_connection(p))

        hosts = list(config.get("outbound_hosts") or ["127.0.0.1"])
        servers.append(await asyncio.start_server(out, hosts, int(port)))
    for name, port in dict(config["inbound"]).items():

        async def inb(r: asyncio.StreamReader, w: asyncio.StreamWriter, p: int = port) -> None:
            await _splice(r, w, asyncio.open_connection("127.0.0.1", p))

        servers.append(await asyncio.start_unix_server(inb, os.path.join(run_dir, str(name))))
    env = {str(k): str(v) for k, v in dict(config["env"]).items()}
    # A HOME the tenant's env moved somewhere unwritable is the program's problem, not ours.
    with contextlib.suppress(OSError):
        os.makedirs(env["HOME"], mode=0o700, exist_ok=True)
    try:
        child = await asyncio.create_subprocess_exec(*argv, env=env, cwd=str(config["cwd"]))
    except OSError as exc:
        print(f"sandbox: cannot run {argv[0]!r}: {exc}", file=sys.stderr, flush=True)
        return 127
    # Only the program holds the standard streams now: its end of output is the gate's EOF.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    code = await child.wait()
    for server in servers:
        server.close()
    return code if code >= 0 else 128 - code


def main() -> int:
    uid, gid, config_path, _, *argv = sys.argv[1:]
    # Whatever descriptors bubblewrap or the gate left open stay outside the program.
    os.closerange(3, 65536)
    # First the user (the run directory is the sandbox user's own), then its configuration.
    _drop_privileges(int(uid), int(gid))
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    os.unlink(config_path)
    _set_limits(config["limits"])
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    return asyncio.run(_serve(config, argv))


if __name__ == "__main__":
    sys.exit(main())
