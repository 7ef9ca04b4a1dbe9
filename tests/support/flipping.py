"""A team's own HTTP agent (examples/http-agent), started on a port the test chooses, so the same
manifest (the same URL, the same digest) can meet another behaviour from one attempt to the next:
the careful agent, or the one whose commit quietly broke its idempotency (a duplicate refund when
a commit times out)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from tests.support.service import ROOT, example

AGENT = ROOT / "examples" / "http-agent" / "agent.py"
#: What the broken build switches off: idempotency, and the two controls that would hide that.
BROKEN = ("--no-idempotency", "--no-state-precondition", "--no-effect-readback")
#: One fault the broken agent duplicates under, few trials: an attempt is a quick draw.
PLAN: dict[str, Any] = {
    "catalogue": "full",
    "modes": ["timeout_after_commit"],
    "trials": 10,
    "seed": 1,
}


def manifest(port: int) -> dict[str, Any]:
    """The careful profile's manifest, its target the agent at `port` on loopback."""
    data = example("typed-repair")
    data["target"] = {"kind": "http", "url": f"http://127.0.0.1:{port}"}
    return data


@contextlib.contextmanager
def agent_at(port: int, *, broken: bool = False) -> Iterator[str]:
    """The agent serving on `port` until the block ends (careful, or `broken`); yields its URL."""
    flags = BROKEN if broken else ()
    command = [sys.executable, str(AGENT), "--port", str(port), "--controls", "typed-repair"]
    proc = subprocess.Popen([*command, *flags], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on "), f"the agent did not start: {line!r}"
        yield line.split()[-1]
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
