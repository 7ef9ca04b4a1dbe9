"""A python target that leaves a daemon behind and holds its tenant's secret (`HELD_KEY`).

On its first task it double-forks a process that leaves the host's session (setsid), lets go of
the host's pipes and, every `BEAT_S`, tells its own local service (`WITNESS_PORT`, through the
egress proxy) that it lives, with the secret it holds, under the kind `LABEL`, for as long as it
is let live. Each task then says so too (kind `LABEL-task`), lingers `LINGER_S` seconds (so its
assay is still running when its right to run is taken away), and claims with the secret."""

from __future__ import annotations

import os
import time
from typing import Any

from tests.adversarial.agents.kinds import witness

_left: list[int] = []


def _linger_forever(label: str, secret: str) -> None:
    beat = float(os.environ.get("BEAT_S", "0.2"))
    n = 0
    while True:
        n += 1
        witness(label, {"secret": secret, "beat": n})
        time.sleep(beat)


def _leave_a_daemon(label: str, secret: str) -> None:
    middle = os.fork()
    if middle:
        os.waitpid(middle, 0)  # the middle exits at once: the daemon is nobody's child
        return
    try:
        os.setsid()
        if os.fork() == 0:
            quiet = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(quiet, fd)
            _linger_forever(label, secret)
    finally:
        os._exit(0)


def agent(task: Any, tools: Any) -> None:
    label, secret = os.environ["LABEL"], os.environ.get("HELD_KEY", "")
    if not _left:
        _left.append(1)
        _leave_a_daemon(label, secret)
    witness(f"{label}-task", {"secret": secret})
    time.sleep(float(os.environ.get("LINGER_S", "0")))
    tools.respond("completed", "a1", f"held {secret}")
