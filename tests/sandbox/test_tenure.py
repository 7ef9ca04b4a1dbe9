"""A sandbox's tenure: ending it kills the whole tree at once, a daemon that double-forked and
left the session included, and no sandbox is built or spawned under it again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.sandbox import Confinement, SandboxEnded, Tenure
from service.sandbox.bwrap import Sandbox
from tests.support.service import wait_for

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(os.getuid() != 0, reason="a leased uid per sandbox needs root"),
]

UIDS = (266000, 266999)
# Leaves a daemon (double fork, setsid, its own pipes let go) asleep, says "left", and exits.
DAEMON = (
    "import os, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        fd = os.open(os.devnull, os.O_RDWR)\n"
    "        [os.dup2(fd, n) for n in (0, 1, 2)]\n"
    "        time.sleep(120)\n"
    "    os._exit(0)\n"
    "os.wait()\n"
    "print('left', flush=True)\n"
    "time.sleep(120)\n"
)


def running_as(uid: int) -> list[int]:
    pids = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/status", encoding="utf-8") as f:
                if any(line.split()[1:2] == [str(uid)] for line in f if line.startswith("Uid:")):
                    pids.append(int(name))
        except OSError:
            continue
    return pids


def test_ending_a_tenure_kills_its_sandboxs_daemon_and_builds_none_again(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    tenure = Tenure("an assay")
    confinement = Confinement(code_dir=tmp_path, uids=UIDS, tenure=tenure)
    sandbox = Sandbox(confinement, [sys.executable, "-c", DAEMON])
    try:
        proc = sandbox.popen(stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline() == b"left\n"
        assert sandbox._lease is not None
        uid = sandbox._lease.uid
        assert len(running_as(uid)) >= 2  # the program and its daemon
        assert tenure.end("its assay ended")
        # SIGKILLed at once; the kernel may take a moment to reap them.
        wait_for(lambda: running_as(uid) == [], 10, f"no process left as uid {uid}")
        with pytest.raises(SandboxEnded, match="its assay ended"):
            Sandbox(confinement, [sys.executable, "-c", "print('again')"])
    finally:
        sandbox.close()
