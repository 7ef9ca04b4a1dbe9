"""A python target that fork-bombs its sandbox: forks sleeping children until the kernel refuses
one, tells its own local service (`WITNESS_PORT`, through the egress proxy) how many it holds,
holds them for `HOLD_S` seconds, then raises saying where it was stopped."""

from __future__ import annotations

import os
import time
from typing import Any

from tests.adversarial.agents.kinds import witness


def agent(task: Any, tools: Any) -> None:
    hold = float(os.environ.get("HOLD_S", "8"))
    children, stopped = 0, "never"
    try:
        while children < 100_000:
            if os.fork() == 0:
                time.sleep(hold + 2)
                os._exit(0)
            children += 1
    except OSError as exc:
        stopped = str(exc)
    witness("bomb", {"holding": children, "stopped_by": stopped})
    time.sleep(hold)
    raise RuntimeError(f"fork bomb stopped after {children} processes: {stopped}")
