"""The `python` target: a callable in the user's own code, named `module:callable`, run in a child.

The callable has the reference workflow's signature, `(task, tools) -> None`, but it never runs in
the assay's process: `PythonTarget` starts `python -m assaygate.host module:callable`
(the parent's interpreter, `sys.path` and working directory), and drives it over the HTTP target
protocol exactly as it drives an `http` target. The callable's `tools` are a `RemoteTools` whose
methods have the core `Tools` signatures and reach the sandbox only through its tool endpoints, so
no attribute, global, frame or `gc` walk can reach the world, the injector or the armed fault.

This module never imports user code. `load_python_target` validates the entrypoint in a throwaway
child (import problems are manifest problems naming `target.entrypoint`); the serving child starts
on first use, is restarted at most once if it dies, and is terminated by `close()` (`close_target`),
when the adapter is collected, or when this interpreter exits.

With a `Confinement` (a worker running a tenant's code) both children run in the sandbox
(`service.sandbox.bwrap`): the host reaches the tool server through a relay at the tool server's
own address, listens on the port the sandbox names, and is posted to through an inbound relay.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import select
import socket
import subprocess
import sys
import threading
import time
import weakref
from typing import Any
from urllib.parse import urlsplit

from service.core.errors import ManifestInvalid
from service.core.system.egress import GATE_LOOPBACK_HOST
from service.core.system.redaction import Redactor
from service.core.system.text import loads_text
from service.core.trial.sandbox import Task, Tools
from service.sandbox import Confinement, SandboxEnded, local
from service.sandbox.bwrap import Sandbox
from service.targets.errors import TargetFailed, TargetRaised, TargetTimeout, TargetUnreachable
from service.targets.http import DEFAULT_TIMEOUT_S, HttpTarget
from service.targets.tool_server import Session, ToolServer

FIELD = "target.entrypoint"
# The host lives in the public package: it imports none of `service`, so a team package of that
# name is the team's own in the child (locally and in the sandbox).
HOST_MODULE = "assaygate.host"
# The first word of the host's report line (assaygate/host.py says the same).
HOST_PROTOCOL = "assaygate-python-host/1"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 5.0
# A child that died is started again once; if it dies again, the remaining trials fail at once.
MAX_STARTS = 2
# How long a dropped connection waits for the child's exit to show (the socket closes first).
_EXIT_GRACE_S = 1.0


def _child_env() -> dict[str, str]:
    """What the team's code sees unconfined (`service.sandbox.local`: never Assaygate's own
    settings), with the parent's import path, so the user's modules import as they would
    in-process."""
    env = local.environ()
    cwd = os.getcwd()
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p or cwd for p in sys.path))
    return env


def _command(entrypoint: str, *flags: str) -> list[str]:
    return [sys.executable, "-m", HOST_MODULE, *flags, entrypoint]


def _report(line: bytes) -> dict[str, Any] | None:
    try:
        data = loads_text(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("host") != HOST_PROTOCOL:
        return None
    return data


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit code {code}"


def _sandbox(
    confinement: Confinement, argv: list[str], reach: tuple[str, int] | None = None
) -> Sandbox:
    """The host in the sandbox: the gate's host module (bound read-only: code, not secrets)
    importing the tenant's code from its directory."""
    return Sandbox(
        confinement,
        argv,
        env={"PYTHONPATH": confinement.python_path()},
        reach=[reach] if reach else [],
        serve=reach is not None,
        gate_code=True,
    )


def _run_check(entrypoint: str, confinement: Confinement | None) -> tuple[int | None, bytes]:
    if confinement is None:
        done = subprocess.run(
            _command(entrypoint, "--check"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            env=_child_env(),
            timeout=START_TIMEOUT_S,
            check=False,
        )
        return done.returncode, done.stdout
    sandbox = _sandbox(confinement, _command(entrypoint, "--check"))
    try:
        proc = sandbox.popen(stdout=subprocess.PIPE)
        out, _ = proc.communicate(timeout=START_TIMEOUT_S)
        return proc.returncode, out
    finally:
        sandbox.close()


def check_entrypoint(entrypoint: str, confinement: Confinement | None = None) -> tuple[str, ...]:
    """Import the entrypoint in a throwaway child; a problem is a `ManifestInvalid` naming it.
    Returns what the import used that is deprecated (`file:line: DeprecationWarning: …`)."""
    module_name, sep, attr_path = entrypoint.partition(":")
    if not sep or not module_name or not attr_path:
        raise ManifestInvalid(f"{entrypoint!r} is not 'module:callable'", field=FIELD)
    try:
        code, stdout = _run_check(entrypoint, confinement)
    except subprocess.TimeoutExpired:
        raise ManifestInvalid(
            f"importing {module_name!r} did not finish within {START_TIMEOUT_S:g} s", field=FIELD
        ) from None
    report = _report(stdout.partition(b"\n")[0])
    if report is None:
        raise ManifestInvalid(
            f"importing {module_name!r} ended its process ({_exit_text(code)})",
            field=FIELD,
        )
    if not report.get("ok"):
        raise ManifestInvalid(str(report.get("error")), field=FIELD)
    said = report.get("deprecated")
    return tuple(str(line) for line in said) if isinstance(said, list) else ()


def load_python_target(
    entrypoint: str, timeout_s: float = DEFAULT_TIMEOUT_S, confinement: Confinement | None = None
) -> PythonTarget:
    deprecated = check_entrypoint(entrypoint, confinement)
    target = PythonTarget(entrypoint, timeout_s=timeout_s, confinement=confinement)
    target.deprecated = deprecated
    return target


def _stop(proc: subprocess.Popen[bytes], owner: int, sandbox: Sandbox | None = None) -> None:
    """Terminate and reap the child; in a forked copy of the owner, leave it alone."""
    if os.getpid() != owner:
        return
    if sandbox is not None:
        sandbox.close()  # kills the whole tree at once
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


class _Child:
    """One running host process. Its finalizer stops it at close, collection or interpreter exit."""

    __slots__ = ("__weakref__", "finalizer", "owner", "port", "proc", "sandbox", "url")

    def __init__(
        self, proc: subprocess.Popen[bytes], url: str, port: int, sandbox: Sandbox | None = None
    ) -> None:
        self.proc = proc
        self.url = url
        self.port = port
        self.owner = os.getpid()
        self.sandbox = sandbox
        self.finalizer = weakref.finalize(self, _stop, proc, self.owner, sandbox)

    @classmethod
    def start(
        cls,
        entrypoint: str,
        confinement: Confinement | None = None,
        tool_server: tuple[str, int] = (GATE_LOOPBACK_HOST, 0),
    ) -> _Child:
        sandbox = None
        if confinement is None:
            proc = subprocess.Popen(
                _command(entrypoint),
                # The host exits when this pipe closes: it never outlives the assay process.
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=_child_env(),
            )
        else:
            try:
                sandbox = _sandbox(confinement, _command(entrypoint), tool_server)
                proc = sandbox.popen(stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            except SandboxEnded as exc:
                # Its right to run ended: never started again, whatever restarts remain.
                if sandbox is not None:
                    sandbox.close()
                raise TargetUnreachable(str(exc)) from None
        try:
            line = _read_line(proc, START_TIMEOUT_S)
        except BaseException:
            _stop(proc, os.getpid(), sandbox)
            raise
        report = _report(line)
        if report is None or not isinstance(report.get("url"), str):
            problem = report.get("error") if report else None
            _stop(proc, os.getpid(), sandbox)
            raise TargetUnreachable(
                f"the python target's process did not start: "
                f"{problem or _exit_text(proc.returncode)}"
            )
        # Confined, the host's own address is inside the sandbox: the adapter posts to the relay.
        url = str(report["url"]) if sandbox is None else str(sandbox.url)
        return cls(proc, url, int(url.rsplit(":", 1)[1].strip("/")), sandbox)

    def exited(self, grace_s: float = 0.0) -> int | None:
        try:
            return self.proc.wait(grace_s) if grace_s else self.proc.poll()
        except subprocess.TimeoutExpired:
            return None


def _read_line(proc: subprocess.Popen[bytes], timeout_s: float) -> bytes:
    """The host's report line, without waiting past the deadline or on a host that died."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TargetUnreachable(
                f"the python target's process did not start within {timeout_s:g} s"
            )
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                proc.wait()
                break
            buf += chunk
    return buf.partition(b"\n")[0]


class PythonTarget(HttpTarget):
    """A `Target` that runs a `module:callable` in its own child process, over the HTTP protocol."""

    def __init__(
        self,
        entrypoint: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        server: ToolServer | None = None,
        confinement: Confinement | None = None,
    ) -> None:
        # The host's port is known once it runs; until then the adapter points nowhere.
        super().__init__("http://127.0.0.1:0/", timeout_s=timeout_s, server=server)
        self.entrypoint = entrypoint
        self.confinement = confinement
        self._child: _Child | None = None
        self._child_lock = threading.Lock()
        self._starts = 0
        self._death: str | None = None
        # The deprecated `assaygate` paths the callable's import used: a worker records them in
        # the assay's events, since its stderr is no author's terminal.
        self.deprecated: tuple[str, ...] = ()

    @property
    def pid(self) -> int | None:
        """The running host's process id (None before first use and after close)."""
        child = self._child
        return child.proc.pid if child is not None else None

    @property
    def starts(self) -> int:
        """Host processes started since the adapter was created or last closed."""
        return self._starts

    def _live_child(self) -> _Child:
        with self._child_lock:
            child = self._child
            if child is not None and child.owner != os.getpid():
                # A forked copy of the adapter: that host belongs to the parent process.
                child.finalizer.detach()
                child, self._child, self._starts = None, None, 0
            if child is not None:
                code = child.exited()
                if code is None:
                    return child
                self._death = f"died ({_exit_text(code)})"
                child.finalizer()
                self._child = None
            if self._starts >= MAX_STARTS:
                raise TargetUnreachable(
                    f"the python target's process {self._death}; it was already restarted once"
                )
            self._starts += 1
            try:
                child = self._child = _Child.start(
                    self.entrypoint, self.confinement, _address(self.server.base_url)
                )
            except TargetUnreachable as exc:
                self._death = "did not start"
                raise exc from None
            self.url = child.url
            # Confined, the relay is on the gate's own loopback address, not the host's.
            self._host = urlsplit(child.url).hostname or self._host
            self._port = child.port
            return child

    def __call__(self, task: Task, tools: Tools) -> None:
        child = self._live_child()
        try:
            self._confined_call(child, task, tools)
        except TargetRaised:
            raise  # the child answered: it is alive, and nothing is worth waiting for
        except TargetTimeout:
            if self.confinement is not None:
                self._end_sandbox(child)
            raise
        except TargetFailed:
            code = child.exited(_EXIT_GRACE_S)
            if code is not None:
                # The kernel killed it for the tree's memory: say so rather than a bare signal.
                exceeded = child.sandbox.memory_exceeded() if child.sandbox else None
                self._death = f"died ({exceeded or _exit_text(code)})"
                raise TargetUnreachable(
                    f"the python target's process died during the task "
                    f"({exceeded or _exit_text(code)})"
                ) from None
            raise

    def _confined_call(self, child: _Child, task: Task, tools: Tools) -> None:
        """The task; a tree that lost a process to its cgroup's memory limit during it fails it
        saying so (whatever the host then answered), and the next task gets a fresh sandbox."""
        try:
            super().__call__(task, tools)
        finally:
            exceeded = child.sandbox.memory_exceeded() if child.sandbox is not None else None
            if exceeded is not None and child.exited() is None:
                self._end_sandbox(child)
                raise TargetFailed(exceeded)

    def _end_sandbox(self, child: _Child) -> None:
        """A confined task past its deadline ends its whole sandbox (nothing it started runs on);
        the next task starts a fresh one, without spending the restart a crash is allowed."""
        self._drop_connection()
        with self._child_lock:
            if self._child is child:
                self._child = None
                self._starts -= 1
        child.finalizer()

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        conn, reused = super()._connection()
        if conn.port != self._port:  # a connection to a host that has since been replaced
            self._drop_connection()
            conn, reused = super()._connection()
        if not reused:
            # http.client writes a request's head and body in two sends: never wait for Nagle.
            # A failed connect is left to the request, which reports it as the target's failure.
            with contextlib.suppress(OSError):
                conn.connect()
                assert conn.sock is not None
                conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, reused

    def _post_task(self, session: Session, sandbox_url: str) -> tuple[int, bytes, str | None]:
        status, body, build = super()._post_task(session, sandbox_url)
        if status == 500 and session.fault is None and not session.crashed:
            raised = _raised(body)
            if raised is not None:
                # Blanked here, whole: the tally keeps a message's first characters only, and a
                # secret's encoding cut short is no longer what the store's redactor knows.
                if self.confinement is not None:
                    raised = Redactor(self.confinement.env.values()).text(raised)
                raise TargetRaised(raised)
        return status, body, build

    def close(self) -> None:
        super().close()
        with self._child_lock:
            child, self._child, self._starts = self._child, None, 0
        if child is not None:
            child.finalizer()


def _address(base_url: str) -> tuple[str, int]:
    host, _, port = base_url.removeprefix("http://").partition(":")
    return host, int(port.strip("/"))


def _raised(body: bytes) -> str | None:
    """`Type: message` of the exception the host reported, if that is what the 500 says."""
    try:
        reply = loads_text(body)
    except ValueError:
        return None
    if not isinstance(reply, dict) or reply.get("error") != "target_raised":
        return None
    return f"{reply.get('type')}: {reply.get('message')}"
