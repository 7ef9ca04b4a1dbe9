"""HTTP agent scripts started as processes of their own, for the target and red-team tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

StartAgent = Callable[..., str]


@contextmanager
def agent_processes(default_script: Path) -> Iterator[StartAgent]:
    """`start(*args, script=...)` runs an agent on a free port and returns its URL; every agent
    started is stopped when the block ends."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str, script: Path = default_script) -> str:
        proc = subprocess.Popen(
            [sys.executable, str(script), "--port", "0", *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on "), f"the agent did not start: {line!r}"
        return line.split()[-1]

    try:
        yield start
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)
