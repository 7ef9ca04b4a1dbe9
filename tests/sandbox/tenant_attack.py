"""A tenant's program that reaches for what the sandbox must keep from it (copied into the code
dir and run there as `python attack.py NAME ARGS...`; standard library only).

It prints one claim: `{"leaked": ...}` and exits 0 when the attack worked, `{"blocked": "Type:
message"}` and exits 3 when it did not."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any


def read(path: str) -> Any:
    with open(path) as f:
        return f.read()


def env(name: str) -> Any:
    return os.environ[name]


def environment() -> Any:
    return dict(os.environ)


def connect(host: str, port: str) -> Any:
    socket.create_connection((host, int(port)), timeout=3).close()
    return f"connected to {host}:{port}"


def unix(path: str) -> Any:
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    return f"connected to {path}"


def fetch(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def tunnel(host: str, port: str) -> Any:
    """An HTTP CONNECT through the proxy the sandbox names, then a request in the tunnel."""
    proxy = os.environ["HTTPS_PROXY"].removeprefix("http://")
    s = socket.create_connection((proxy.split(":")[0], int(proxy.split(":")[1])), timeout=5)
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    status = s.recv(4096).decode().split("\r\n")[0]
    if " 200 " not in status + " ":
        raise PermissionError(f"the proxy answered {status!r}")
    s.sendall(f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
    reply = b""
    while chunk := s.recv(4096):
        reply += chunk
    return reply.decode().split("\r\n\r\n", 1)[1]


def fork() -> Any:
    children = 0
    try:
        while children < 100_000:
            if os.fork() == 0:
                time.sleep(600)
                os._exit(0)
            children += 1
    except OSError as exc:
        raise OSError(f"after {children} processes: {exc}") from None
    return children


def memory(mb: str) -> Any:
    return len(bytearray(int(mb) * 1024 * 1024))


def write(path: str) -> Any:
    with open(path, "w") as f:
        f.write("tenant was here")
    return path


def processes() -> Any:
    """Every process this program can see, with its command line."""
    seen = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                seen[pid] = f.read().replace(b"\0", b" ").decode()
    # The sandbox's own: bubblewrap's pid 1, the inner launcher and this program.
    if len(seen) > 3 or any("-m pytest" in cmd or "celery" in cmd for cmd in seen.values()):
        return seen
    raise PermissionError(f"only the sandbox's own processes: {sorted(seen.values())}")


def identity() -> Any:
    with open("/proc/self/status") as f:
        caps = {line.split(":")[0]: line.split()[1] for line in f if line.startswith("Cap")}
    return {"ids": [os.getresuid(), os.getresgid(), os.getgroups()], "caps": caps}


def hang(marker: str) -> Any:
    """Outlive the deadline: a child, a detached grandchild, and this process, all asleep."""
    subprocess.Popen(["sleep", marker])
    subprocess.Popen(["sh", "-c", f"setsid sleep {marker} &"])
    time.sleep(1000)
    return "woke up"


ATTACKS: dict[str, Callable[..., Any]] = {
    f.__name__: f
    for f in (read, env, environment, connect, unix, fetch, tunnel, fork, memory, write, processes)
}
ATTACKS.update(identity=identity, hang=hang)


def main() -> None:
    name, *args = sys.argv[1:]
    try:
        got = ATTACKS[name](*args)
    except Exception as exc:
        print(json.dumps({"blocked": f"{type(exc).__name__}: {exc}"}), flush=True)
        sys.exit(3)
    print(json.dumps({"leaked": got}), flush=True)


if __name__ == "__main__":
    main()
