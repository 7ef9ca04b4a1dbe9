"""Tenant code that pushes at the sandbox's layers, through the real sandbox a worker builds (the
command runner's): the seccomp filter refuses namespaces, mounts, tracing and the kernel's
extension points; the relay folder is a small tmpfs that names no host path; one tree's fork bomb
never stops another's sandbox; a tree's memory and tasks are capped together, not per process."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.mcp.runners import CommandRunner, RunResult
from service.sandbox import Confinement, ProcessLimits
from service.sandbox.bwrap import Sandbox
from service.sandbox.layers import RELAY_MB
from service.targets import close_target, load_target
from service.targets.python import PythonTarget
from tests.sandbox.conftest import serve
from tests.targets.conftest import assay, example, plan

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(os.getuid() != 0, reason="the per-sandbox layers need root"),
]

CONTAIN = Path(__file__).resolve().parent / "agents" / "contain.py"
UIDS = (200000, 265535)


@pytest.fixture(scope="module")
def proxy_url() -> Iterator[str]:
    """The one address a command runner's sandbox is given (a real server on loopback)."""
    server = serve("the trial's proxy")
    yield f"http://127.0.0.1:{server.server_address[1]}/t/token/mcp"
    server.shutdown()


@pytest.fixture
def code(tmp_path: Path) -> Path:
    folder = tmp_path / "code"
    folder.mkdir()
    shutil.copy(CONTAIN, folder / "contain.py")
    folder.chmod(0o755)
    (folder / "contain.py").chmod(0o644)
    return folder


def confined(code: Path, **limits: int) -> Confinement:
    return Confinement(code_dir=code, limits=ProcessLimits(**limits), uids=UIDS)


def attack(code: Path, url: str, *args: str, **limits: int) -> RunResult:
    runner = CommandRunner((sys.executable, "contain.py", *args), confined(code, **limits))
    return runner.run({"order": "o-1"}, url, 60.0, threading.Event())


def blocked(result: RunResult) -> str:
    assert result.error == "TargetFailed: exit code 3", result
    reason: str = result.claims[0]["blocked"]
    return reason


def leaked(result: RunResult) -> object:
    assert result.error is None, result
    return result.claims[0]["leaked"]


# ------------------------------------------------------------------------------ seccomp


def test_the_code_runs_under_a_seccomp_filter_as_a_uid_of_the_range(
    code: Path, proxy_url: str
) -> None:
    seen = leaked(attack(code, proxy_url, "status"))
    assert isinstance(seen, dict)
    assert seen["Seccomp"] == "2"
    assert UIDS[0] <= int(seen["Uid"]) <= UIDS[1] and seen["Gid"] == seen["Uid"]


def test_code_that_runs_unshare_to_make_a_user_namespace_is_refused(
    code: Path, proxy_url: str
) -> None:
    assert "Operation not permitted" in blocked(attack(code, proxy_url, "unshare-command"))


only_x86_64 = pytest.mark.skipif(
    platform.machine() != "x86_64", reason="the attack calls x86_64 syscall numbers"
)


@only_x86_64
@pytest.mark.parametrize(
    "name",
    [
        "unshare",
        "setns",
        "mount",
        "umount2",
        "pivot_root",
        "chroot",
        "ptrace",
        "process_vm_readv",
        "bpf",
        "perf_event_open",
        "userfaultfd",
        "keyctl",
        "add_key",
        "request_key",
        "kexec_load",
        "init_module",
        "finit_module",
        "delete_module",
        "open_by_handle_at",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "modify_ldt",
        "pidfd_getfd",
    ],
)
def test_code_that_makes_a_refused_syscall_gets_eperm(
    code: Path, proxy_url: str, name: str
) -> None:
    assert blocked(attack(code, proxy_url, "syscall", name)) == "EPERM"


@only_x86_64
@pytest.mark.parametrize("namespace", ["user", "mount", "net"])
def test_code_that_clones_into_a_new_namespace_gets_eperm(
    code: Path, proxy_url: str, namespace: str
) -> None:
    assert blocked(attack(code, proxy_url, "clone", namespace)) == "EPERM"


@only_x86_64
@pytest.mark.parametrize(
    ("family", "protocol"),
    [
        ("40", "0"),  # AF_VSOCK: the hypervisor's channel to the host
        ("high:40", "0"),  # the same, high bits set: the kernel reads only the low 32
        ("38", "0"),  # AF_ALG
        ("16", "12"),  # AF_NETLINK, NETLINK_NETFILTER
        ("16", "4"),  # AF_NETLINK, NETLINK_SOCK_DIAG: every socket of the namespace
    ],
)
def test_code_that_opens_a_socket_of_a_family_it_never_needs_gets_eperm(
    code: Path, proxy_url: str, family: str, protocol: str
) -> None:
    assert blocked(attack(code, proxy_url, "socket", family, protocol)) == "EPERM"


@only_x86_64
@pytest.mark.parametrize("family", ["1", "2", "10", "16"])
def test_code_may_still_open_unix_inet_inet6_and_netlink_route_sockets(
    code: Path, proxy_url: str, family: str
) -> None:
    assert leaked(attack(code, proxy_url, "socket", family)) == (
        f"socket of family {family} protocol 0"
    )


def test_code_may_still_resolve_a_name_under_the_filter(code: Path, proxy_url: str) -> None:
    assert leaked(attack(code, proxy_url, "resolve", "localhost")) == ["127.0.0.1"]


def test_the_host_kernels_command_line_reads_empty_in_the_sandbox(
    code: Path, proxy_url: str
) -> None:
    assert leaked(attack(code, proxy_url, "read", "/proc/cmdline")) == ""


@pytest.mark.parametrize("path", ["/proc/1/cmdline", "/proc/2/cmdline", "/proc/self/cmdline"])
def test_no_command_line_in_the_sandbox_names_the_sandboxs_host_paths(
    code: Path, proxy_url: str, path: str
) -> None:
    line = str(leaked(attack(code, proxy_url, "read", path)))
    # Neither bubblewrap's binds (the run folder's host path, the tenant's code dir as a bind
    # source) nor its options: they reach bubblewrap through a descriptor.
    assert "assaygate-bwrap" not in line and "--bind" not in line and "--ro-bind" not in line
    assert "--chdir" not in line and "--seccomp" not in line, line


def test_code_may_still_fork_and_run_programs_under_the_filter(code: Path, proxy_url: str) -> None:
    assert leaked(attack(code, proxy_url, "children", "2", "1", "0")) == (
        "2 children held 2 MB together"
    )


# ------------------------------------------------------------------------------ relay folder


def test_code_that_fills_the_relay_folder_stops_at_its_tmpfs_size(
    code: Path, proxy_url: str
) -> None:
    reason = blocked(attack(code, proxy_url, "fill-relay", "64"))
    assert reason.startswith("OSError: No space left on device"), reason
    assert int(reason.split("after ")[1].split()[0]) <= RELAY_MB


def test_the_sandboxs_mountinfo_names_no_host_path_of_the_gates(code: Path, proxy_url: str) -> None:
    table = str(leaked(attack(code, proxy_url, "mountinfo")))
    assert "assaygate-bwrap" not in table and "service/sandbox" not in table, table
    relay = [line for line in table.splitlines() if " /run/assaygate/run " in line]
    assert len(relay) == 1 and " - tmpfs " in relay[0], relay


# ------------------------------------------------------------------------------ per-tree accounting


def test_one_sandboxs_fork_bomb_at_its_limit_does_not_stop_another_from_starting(
    code: Path, proxy_url: str
) -> None:
    bomb = Sandbox(
        confined(code, processes=32), [sys.executable, "contain.py", "hold", "500", "30"]
    )
    try:
        proc = bomb.popen(stdout=subprocess.PIPE)
        assert proc.stdout is not None
        held = json.loads(proc.stdout.readline())
        # The bomb is at its own limit, and holds it.
        assert held["stopped_by"] is not None and held["holding"] < 32, held
        assert leaked(attack(code, proxy_url, "hello", processes=32)) == "hello"
    finally:
        bomb.close()


def test_children_over_the_trees_memory_together_are_killed_and_the_run_says_why(
    code: Path, proxy_url: str
) -> None:
    # Each child is under the limit (and under RLIMIT_AS); the three together are not.
    result = attack(code, proxy_url, "children", "3", "200", "3", memory_mb=512)
    assert result.error is not None and "memory limit (512 MB" in result.error, result
    assert "whole process tree" in result.error


def test_a_tree_stops_at_its_task_limit_in_its_own_cgroup(code: Path) -> None:
    bomb = Sandbox(confined(code, processes=20), [sys.executable, "contain.py", "hold", "500", "5"])
    try:
        assert bomb.cgroup is not None, "no cgroup for the sandbox's tree"
        proc = bomb.popen(stdout=subprocess.PIPE)
        assert proc.stdout is not None
        held = json.loads(proc.stdout.readline())
        assert held["stopped_by"] is not None and held["holding"] < 20, held
        assert bomb.cgroup.pids_refused() > 0
    finally:
        bomb.close()


def test_a_python_targets_children_over_the_trees_memory_fail_the_task_saying_why(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "hog"
    folder.mkdir()
    folder.chmod(0o755)
    (folder / "hog.py").write_text(
        "import subprocess, sys\n"
        "def run(task, tools):\n"
        "    code = 'import time; b = bytearray(200 * 1024 * 1024); time.sleep(3)'\n"
        "    procs = [subprocess.Popen([sys.executable, '-c', code]) for _ in range(3)]\n"
        "    [p.wait() for p in procs]\n"
    )
    (folder / "hog.py").chmod(0o644)
    manifest = example("typed", kind="python", entrypoint="hog:run")
    target = load_target(manifest, http_timeout_s=30.0, confinement=confined(folder, memory_mb=512))
    assert isinstance(target, PythonTarget)
    try:
        report = assay(manifest, plan(1, "timeout_before_send"), target)
    finally:
        close_target(target)
    errors = json.dumps(report["target_errors"])
    assert "memory limit (512 MB for the whole process tree" in errors, errors
