"""The sandbox a tenant's code runs in: bubblewrap, an unprivileged user, limits, relays only.

Every tenant process a worker starts (a python target's host and its entrypoint check, a command
runner's run, a python/LangGraph/OpenAI Agents runner's host, a stdio MCP server, a command hook)
runs as `Sandbox(confinement, argv, ...)` when the adapter is given a `Confinement`; `None` (the
local `assaygate assay` on the user's own machine) runs it as the user's own process.

- **Launcher.** `/usr/bin/bwrap` (Debian package `bubblewrap`; `make sandbox` runs
  `deploy/ensure-sandbox.sh`, which installs it with apt-get when missing and root). Each worker
  process builds one empty sandbox (`bwrap ... true`) before its first; if bubblewrap is missing
  or cannot create the namespaces, `SandboxUnavailable` is raised and nothing runs: there is no
  unconfined fallback.
- **File system: an allowlist, not the host's root.** A fresh tmpfs root holding only: `/usr`
  read-only (and `/bin`, `/lib`, `/lib64`, `/sbin` as the host has them: symlinks into `/usr` or
  read-only binds); a minimal `/etc` (`passwd`, `group`, `hosts`, `resolv.conf`,
  `nsswitch.conf`, `host.conf`, `gai.conf`, `services`, `protocols`, `ld.so.cache`,
  `localtime`, `alternatives/`, `ssl/certs/`, `ssl/openssl.cnf`; never `shadow` or
  `ssl/private`); the Python installation (`sys.base_prefix`) and the worker's venv
  (`sys.prefix`) read-only at their own paths; the public `assaygate` package read-only, only for
  the gate's python hosts (`assaygate.host`, `assaygate.mcp_host`: code, not secrets), and the
  gate's own package source beside it; the tenant's `code_dir` read-only at its own path, also
  the working directory;
  `/proc` of the sandbox's own pid namespace; a minimal `/dev`; `/tmp` a tmpfs (mode 1777,
  `ProcessLimits.tmp_mb`, default 256 MB) holding a private `HOME` (`/tmp/home`); the sandbox's run
  directory at `/run/assaygate/run` and the inner launcher (`inner.py`, standard library only) at
  `/run/assaygate/inner.py`. Directories bubblewrap creates on the way are 0755. The signing
  keys, the data dir, PostgreSQL's socket dir (`/var/run/postgresql`) and the rest of the host
  are not bound, so they do not exist inside.
- **Namespaces.** New network, pid, ipc, uts and cgroup namespaces (as root, listed one by one:
  `--unshare-all` would add a user namespace mapping only uid 0; not root, `--unshare-all`),
  `--die-with-parent`, `--new-session` (no terminal to inject into), `--clearenv`, hostname
  `sandbox`. The network namespace holds only its own loopback interface.
- **User.** As root (bubblewrap's privileged mode) the sandbox keeps only CAP_SETUID,
  CAP_SETGID and CAP_SETPCAP; the inner launcher empties the capability bounding set, clears the
  supplementary groups, sets real, effective and saved uid and gid to the sandbox's own uid
  (leased from `Confinement.uids` for the sandbox's life, `layers.UidLease`; 65534 without a
  range) and clears the inheritable set before anything else runs (bubblewrap sets
  no_new_privs): the tenant's code has no capability at all. Not root: a user namespace maps the
  caller to uid/gid 65534 and forbids further user namespaces (`--disable-userns`).
- **Seccomp.** bubblewrap loads the filter of `seccomp.py` (`--seccomp`) before the inner
  launcher runs: namespace creation, mount, ptrace, bpf, keyctl, modules, io_uring, modify_ldt,
  sockets of every family but unix, inet, inet6 and netlink route, and the like answer EPERM;
  `/proc/self/status` inside says `Seccomp: 2`.
- **No host paths on a command line.** bubblewrap (pid 1 inside) reads its options from a
  descriptor (`--args`), so `/proc/1/cmdline` holds only the launcher's command; `/proc/cmdline`
  (the host kernel's) is masked by an empty file.
- **Environment.** Exactly `PATH` (the venv's `bin`, `/usr/local/bin`, `/usr/bin`, `/bin`),
  `HOME`, `LANG=C.UTF-8`, `TMPDIR=/tmp`, `PYTHONDONTWRITEBYTECODE=1`, the confinement's `env`
  (the manifest's declared env and the tenant's named secrets), the adapter's own variables
  (`ASSAYGATE_MCP_URL`, `ASSAYGATE_LISTEN_PORT`, `PYTHONPATH`=the code dir for the python hosts)
  and, with an egress check, the proxy variables. Nothing of the worker's environment. It
  travels in a 0600 file of the run directory that the inner launcher reads (as uid 65534) and
  deletes before the program starts, never on a command line.
- **Limits** (`Confinement.limits`, set by the inner launcher, inherited by the whole tree):
  RLIMIT_CPU (`cpu_s`), RLIMIT_AS (`memory_mb`), RLIMIT_NPROC (`processes`, per uid: per sandbox
  with a uid range), RLIMIT_NOFILE (`open_files`), RLIMIT_FSIZE (`file_mb`), RLIMIT_CORE=0; and
  for the whole tree, where the host has a writable cgroup hierarchy (`cgroup.py`), its memory
  (`memory_mb`) and its number of tasks (`processes`): bubblewrap enters the sandbox's cgroup
  before it execs, so every process is born inside.
- **Network: relays only.** Each sandbox has a run directory (0700, owned by the sandbox user,
  inside a root-only 0700 temp directory; as root its own tmpfs of `layers.RELAY_MB`) holding
  Unix sockets. Outbound, for each endpoint the adapter allows (the trial's MCP proxy for a
  runner, the tool server for a python target), the inner launcher listens on 127.0.0.1 at the
  same port inside and pipes each connection to a Unix socket, which the worker's relay thread
  (`relay.py`) connects on to that one host:port: URLs need no rewriting. Inbound (a python host
  the worker POSTs tasks to), the host listens on `ASSAYGATE_LISTEN_PORT` inside, the inner
  launcher serves a Unix socket piped to it, and the worker listens on an ephemeral 127.0.0.1
  port piped to that socket (`Sandbox.url`). Nothing else is reachable: not PostgreSQL, Redis,
  the API, another sandbox, or any other address. Relays are asyncio on one thread per worker
  process (and in the inner launcher).
- **Egress.** With `Confinement.egress` set, one more relayed port inside is an HTTP forward
  proxy on the worker's side (`HTTPS_PROXY`/`HTTP_PROXY`, `NO_PROXY=127.0.0.1,localhost`):
  every CONNECT, and every absolute-form plain-HTTP request (one per connection), calls
  `egress(host, port)` off the relay loop, which returns the address to connect to or raises
  (the proxy answers 403 with the reason). Without an egress check there is no way out.
- **Deadline.** A deadline kills bubblewrap (SIGKILL); with `--die-with-parent` its pid 1 dies
  and the kernel kills every process of the pid namespace, daemonised or not: no child outlives
  it. A command runner has one sandbox per run; a python runner's or python target's run past
  its deadline ends the host's sandbox and the next run gets a fresh one (a timeout does not
  spend the target's one restart after a crash); stdio servers live for the assay and a command
  hook for its call. `--die-with-parent` follows the thread that spawned bubblewrap, so
  `Sandbox.popen()` spawns from the relay thread, which lives as long as the worker process
  (stdio servers and command hooks are spawned by the MCP engine's loop thread, which lives as
  long as the engine); if the worker dies, every sandbox of it dies too. A sandbox built under a
  `Confinement.tenure` dies when the tenure ends (`tenure.py`), and none is built under it again.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from service.core.system.egress import GATE_LOOPBACK_HOST
from service.sandbox import Confinement, cgroup, layers, relay, seccomp
from service.sandbox.enter import BWRAP as BWRAP
from service.sandbox.enter import enter_command as _enter
from service.sandbox.tenure import SandboxEnded

UID = GID = 65534
INNER = "/run/assaygate/inner.py"
RUN = "/run/assaygate/run"
HOME = "/tmp/home"
LISTEN_ENV = "ASSAYGATE_LISTEN_PORT"
CHECK_TIMEOUT_S = 30.0
KILL_WAIT_S = 10.0
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
_ETC = (
    "passwd",
    "group",
    "hosts",
    "resolv.conf",
    "nsswitch.conf",
    "host.conf",
    "gai.conf",
    "services",
    "protocols",
    "ld.so.cache",
    "localtime",
    "alternatives",
    "ssl/certs",
    "ssl/openssl.cnf",
)
# The gate's package: bound for its python hosts only.
GATE_SOURCE = Path(__file__).resolve().parents[1]
# The public package (installed beside `service`): the python hosts (the python target's, the MCP
# python runner's) run from it.
PUBLIC_SOURCE = GATE_SOURCE.parent / "assaygate"


class SandboxUnavailable(RuntimeError):
    """This machine cannot build the sandbox (no bubblewrap, no namespaces): nothing runs."""


def _namespaces() -> list[str]:
    if os.getuid() == 0:
        # Privileged mode, no user namespace: the inner launcher drops to UID with these three.
        return [
            *("--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts"),
            *("--unshare-cgroup", "--cap-drop", "ALL", "--cap-add", "CAP_SETUID"),
            *("--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"),
        ]
    return ["--unshare-all", "--uid", str(UID), "--gid", str(GID), "--disable-userns"]


def _system() -> tuple[list[str], list[tuple[str, str]]]:
    """The host's merged-/usr symlinks as symlinks, the rest as read-only binds."""
    links: list[str] = []
    binds: list[tuple[str, str]] = []
    for path in _SYSTEM:
        if os.path.islink(path):
            links += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            binds.append((path, path))
    binds += [(f"/etc/{name}",) * 2 for name in _ETC if os.path.exists(f"/etc/{name}")]
    return links, binds


def _binds(read_only: Sequence[tuple[str, str]], writable: Sequence[tuple[str, str]]) -> list[str]:
    """Shallow destinations first, so a deeper bind is never hidden by a shallower one; each
    missing ancestor made 0755 first (bubblewrap would make it 0700, and the sandbox user could
    not pass it)."""
    out: list[str] = []
    made: set[str] = {"/tmp"}  # a tmpfs already, and its mode must stay 1777
    covered: list[str] = []
    marked = [(src, dest, False) for src, dest in read_only]
    marked += [(src, dest, True) for src, dest in writable]
    for src, dest, rw in sorted(marked, key=lambda m: (m[1].count("/"), m[1])):
        parts = dest.strip("/").split("/")
        for depth in range(1, len(parts)):
            parent = "/" + "/".join(parts[:depth])
            inside = any(parent == c or parent.startswith(c + "/") for c in covered)
            if parent not in made and not inside:
                out += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        out += ["--bind" if rw else "--ro-bind", src, dest]
        covered.append(dest)
    return out


def _base(tmp_mb: int, binds: Sequence[tuple[str, str]], run_dir: str | None) -> list[str]:
    links, system = _system()
    return [
        BWRAP,
        *(["--seccomp", "3"] if seccomp.program() is not None else []),
        *_namespaces(),
        *("--die-with-parent", "--new-session", "--clearenv", "--hostname", "sandbox"),
        *links,
        # The host's kernel command line (hypervisor channels, boot paths) masked by an empty
        # file: the sandbox's /proc is its own pid namespace's, /proc/cmdline is the host's.
        *("--proc", "/proc", "--perms", "0444", "--ro-bind-data", "6", "/proc/cmdline"),
        *("--dev", "/dev"),
        # Before the binds: a tenant's code dir may itself live under the host's /tmp.
        *("--perms", "1777", "--size", str(tmp_mb * 1024 * 1024), "--tmpfs", "/tmp"),
        *_binds([*system, *binds], [(run_dir, RUN)] if run_dir else []),
    ]


def _code_binds(code_dir: Path, gate_code: bool) -> list[tuple[str, str]]:
    """Python, the venv, the gate's source (for its hosts), the tenant's code."""
    paths = {sys.base_prefix, sys.prefix, str(code_dir)}
    if gate_code:
        paths.update((str(GATE_SOURCE), str(PUBLIC_SOURCE)))
    binds = [(p, p) for p in paths if not p.startswith("/usr/")]
    return binds


_checked = False
_check_lock = threading.Lock()


def check_available() -> None:
    """Build one empty sandbox (`bwrap ... true`) once per process; `SandboxUnavailable` if not."""
    global _checked
    with _check_lock:
        if _checked:
            return
        if not os.access(BWRAP, os.X_OK):
            raise SandboxUnavailable(
                f"bubblewrap is not installed ({BWRAP}): run deploy/ensure-sandbox.sh; "
                "tenant code never runs unconfined"
            )
        folder = tempfile.mkdtemp(prefix="assaygate-check-")
        try:
            done = subprocess.run(
                _enter(folder, [], _base(1, [], None), ["/usr/bin/true"]),
                capture_output=True,
                env={},
                timeout=CHECK_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxUnavailable(f"bubblewrap did not run: {exc}") from None
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if done.returncode != 0:
            raise SandboxUnavailable(
                "bubblewrap cannot create the sandbox's namespaces: "
                + done.stderr.decode("utf-8", "replace").strip()[:500]
            )
        _checked = True


def _free_port(taken: set[int], start: int) -> int:
    port = start
    while port in taken:
        port += 1
    taken.add(port)
    return port


class Sandbox:
    """One sandboxed process tree: its run directory, relays and (once spawned) bubblewrap.

    `argv` is the bubblewrap command line for whoever spawns it (`popen()`, or the MCP SDK's
    stdio client); `url` is the worker-side address of the program's port when `serve` is set.
    A sandbox runs once: the inner launcher consumes its configuration. `close()` kills the
    tree and removes the relays and the run directory.
    """

    def __init__(
        self,
        confinement: Confinement,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        reach: Sequence[tuple[str, int]] = (),
        serve: bool = False,
        gate_code: bool = False,
    ) -> None:
        check_available()
        self._tenure = confinement.tenure
        self._killing = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.url: str | None = None
        self._servers: list[Any] = []
        self._lease: layers.UidLease | None = None
        self.cgroup: cgroup.TreeCgroup | None = None
        self._oom_kills = 0
        self._relay_mount: str | None = None
        self._limits = confinement.limits
        found = layers.posture(confinement.uids)
        missing = found.missing(confinement.require)
        if missing:
            why = dict(found.why)
            raise SandboxUnavailable(
                "the sandbox posture the operator requires (ASSAYGATE_SANDBOX_MIN_POSTURE) is not "
                "met here: "
                + "; ".join(f"no {layer} ({why.get(layer, 'unavailable')})" for layer in missing)
            )
        self.posture = found.view(confinement.limits.memory_mb, confinement.limits.processes)
        if self._tenure is not None:
            self._tenure.enter(self)  # SandboxEnded once the code's right to run ended
        self._dir = tempfile.mkdtemp(prefix="assaygate-bwrap-")
        try:
            self.argv = self._prepare(confinement, argv, env or {}, reach, serve, gate_code)
        except BaseException:
            self.close()
            raise

    def _prepare(
        self,
        confinement: Confinement,
        argv: Sequence[str],
        env: Mapping[str, str],
        reach: Sequence[tuple[str, int]],
        serve: bool,
        gate_code: bool,
    ) -> list[str]:
        found = layers.posture(confinement.uids)
        uid = gid = UID
        if found.uid is not None and confinement.uids is not None:
            self._lease = layers.UidLease(*confinement.uids)
            uid = gid = self._lease.uid
        run_dir = os.path.join(self._dir, "run")
        os.mkdir(run_dir, 0o700)
        if found.relay_tmpfs_mb is not None:
            layers.mount_relay(run_dir, uid, gid)
            self._relay_mount = run_dir
        elif os.getuid() == 0:
            os.chown(run_dir, uid, gid)
        taken = {port for _, port in reach}
        outbound: dict[int, str] = {}
        for host, port in dict.fromkeys(reach):
            outbound[port] = f"out-{port}.sock"
            self._serve(relay.serve_outbound(self._sock(outbound[port]), host, port))
        program_env = {
            "PATH": f"{sys.prefix}/bin:/usr/local/bin:/usr/bin:/bin",
            "HOME": HOME,
            "LANG": "C.UTF-8",
            "TMPDIR": "/tmp",
            "PYTHONDONTWRITEBYTECODE": "1",
            **confinement.env,
            **env,
        }
        if confinement.egress is not None:
            proxy = _free_port(taken, 3128)
            outbound[proxy] = "egress.sock"
            self._serve(relay.serve_egress(self._sock("egress.sock"), confinement.egress))
            for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
                program_env[name] = f"http://127.0.0.1:{proxy}"
            direct = f"127.0.0.1,localhost,{GATE_LOOPBACK_HOST}"
            program_env["NO_PROXY"] = program_env["no_proxy"] = direct
        inbound: dict[str, int] = {}
        if serve:
            listen = _free_port(taken, 8000)
            inbound["in.sock"] = listen
            program_env[LISTEN_ENV] = str(listen)
            server, port = relay.run(relay.serve_inbound(os.path.join(run_dir, "in.sock")))
            self._servers.append(server)
            self.url = f"http://{GATE_LOOPBACK_HOST}:{port}/"
        limits = confinement.limits
        config = {
            "run_dir": RUN,
            "cwd": str(confinement.code_dir),
            "env": program_env,
            "limits": {
                "cpu_s": limits.cpu_s,
                "memory_mb": limits.memory_mb,
                "processes": limits.processes,
                "open_files": limits.open_files,
                "file_mb": limits.file_mb,
            },
            "outbound": outbound,
            # The gate's relays are on their own loopback address: URLs naming them work inside.
            "outbound_hosts": sorted({"127.0.0.1", GATE_LOOPBACK_HOST}),
            "inbound": inbound,
        }
        fd = os.open(os.path.join(run_dir, "config.json"), os.O_WRONLY | os.O_CREAT, 0o600)
        if os.getuid() == 0:
            # Read by the inner launcher once it is the sandbox user, deleted before the program
            # starts.
            os.fchown(fd, uid, gid)
        with os.fdopen(fd, "w") as f:
            json.dump(config, f)
        hierarchy = cgroup.detect()
        procs: list[str] = []
        if found.cgroup is not None and isinstance(hierarchy, cgroup.Hierarchy):
            self.cgroup = cgroup.TreeCgroup(hierarchy, limits.memory_mb, limits.processes)
            procs = self.cgroup.procs
        bwrap = [
            *_base(limits.tmp_mb, _code_binds(confinement.code_dir, gate_code), run_dir),
            *("--perms", "0644", "--ro-bind-data", "4", INNER),
            *("--chdir", str(confinement.code_dir)),
        ]
        command = [
            *(os.path.realpath(sys.executable), "-I", "-S", INNER),
            *(str(uid), str(gid), f"{RUN}/config.json", "--"),
            *argv,
        ]
        inner = str(Path(__file__).with_name("inner.py"))
        return _enter(self._dir, procs, bwrap, command, inner)

    def memory_exceeded(self) -> str | None:
        """Why the tree died, when the kernel killed part of it for the cgroup's memory limit
        (still known once the sandbox is closed)."""
        if self.cgroup is not None:
            self._oom_kills = self.cgroup.oom_kills()
        if self._oom_kills == 0:
            return None
        return (
            f"the sandbox's memory limit ({self._limits.memory_mb} MB for the whole process "
            "tree, ASSAYGATE_CODE_MEMORY_MB) was exceeded: the kernel killed it"
        )

    def _sock(self, name: str) -> str:
        return os.path.join(self._dir, "run", name)

    def _serve(self, opening: Any) -> None:
        self._servers.append(relay.run(opening))
        path = self._servers[-1].sockets[0].getsockname()
        # Connecting to a Unix socket needs write permission on it; the directories above keep
        # everyone but the sandbox and root out.
        os.chmod(path, 0o666)

    def popen(
        self,
        stdin: int | IO[Any] | None = subprocess.DEVNULL,
        stdout: int | IO[Any] | None = subprocess.DEVNULL,
        stderr: int | IO[Any] | None = subprocess.DEVNULL,
    ) -> subprocess.Popen[bytes]:
        """Spawn the sandbox (on the relay thread, which outlives every caller's thread);
        `SandboxEnded` once its tenure ended, and a tree spawned as it ends is killed."""
        if self._tenure is not None:
            self._tenure.check()
        self.proc = relay.call(
            lambda: subprocess.Popen(
                self.argv, stdin=stdin, stdout=stdout, stderr=stderr, env={}, umask=0o022
            )
        )
        if self._tenure is not None:
            try:
                self._tenure.check()
            except SandboxEnded:
                self.kill()
                raise
        return self.proc

    def kill(self) -> None:
        """End the whole tree now, by every handle on it: bubblewrap (its death takes the pid
        namespace with it), the tree's cgroup (`cgroup.kill` where the kernel has it), and the
        sandbox's own uid when it has one leased, so no daemon it forked (double fork, setsid)
        survives whichever handle it slipped."""
        proc = self.proc
        with self._killing:  # the lease is not handed on while its uid's processes are killed
            if proc is not None and proc.poll() is None:
                proc.kill()
            if (group := self.cgroup) is not None:
                group.kill()
            if self._lease is not None:
                layers.kill_uid(self._lease.uid)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(KILL_WAIT_S)

    def close(self) -> None:
        self.kill()
        if self._tenure is not None:
            self._tenure.leave(self)
        servers, self._servers = self._servers, []
        if servers:
            relay.call(lambda: [server.close() for server in servers])
        if self.cgroup is not None:
            self._oom_kills = self.cgroup.oom_kills()
            self.cgroup.close()
            self.cgroup = None
        if self._relay_mount is not None:
            layers.unmount_relay(self._relay_mount)
            self._relay_mount = None
        shutil.rmtree(self._dir, ignore_errors=True)
        # Only once nothing of the tree is left may another sandbox take its uid.
        with self._killing:
            if self._lease is not None:
                self._lease.release()
                self._lease = None
