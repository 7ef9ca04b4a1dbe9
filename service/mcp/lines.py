"""The warm command agent (`runner.protocol: "lines"`): one process per slot for the whole assay,
a task line in and a claim line out per run (docs/mcp.md, Claims and runners)."""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import threading
import time
from collections import deque
from typing import Any

from service.mcp.runners import (
    URL_ENV,
    RunResult,
    _exit_text,
    address_of,
    child_env,
    last_line,
    parse_claims,
    slot_env,
)
from service.sandbox import Confinement
from service.sandbox.bwrap import Sandbox


class LinesRunner:
    """A command agent kept warm: one process per slot for the whole assay, one run a line.

    Each run writes `{"task": …, "mcp_url": …}` as one JSON line to the process's stdin and reads
    one line back from its stdout: a claim object, or `{"claims": [...]}`. The interpreter start
    and imports (about a second with the MCP SDK) are paid once per slot instead of once per run.
    A process that exits during a run makes that run a target error (its last stderr line says
    why), one that passes the run's deadline or is crashed by a fault is killed; either way the
    next run starts a fresh process, so no run inherits a broken agent's state."""

    def __init__(
        self,
        command: tuple[str, ...],
        confinement: Confinement | None = None,
        slot: int | None = None,
    ) -> None:
        self.command = list(command)
        self.confinement = confinement
        self.slot = slot
        self.started = 0  # processes started so far: the first, and one per restart
        self._proc: subprocess.Popen[bytes] | None = None
        self._sandbox: Sandbox | None = None
        self._lines: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._stderr: deque[bytes] = deque(maxlen=20)

    def _start(self, url: str) -> subprocess.Popen[bytes]:
        pipe = subprocess.PIPE
        if self.confinement is None:
            proc = subprocess.Popen(
                self.command, stdin=pipe, stdout=pipe, stderr=pipe, env=child_env(url, self.slot)
            )
        else:
            # The proxy's port is the slot's for the assay: reachable for every later run.
            self._sandbox = Sandbox(
                self.confinement,
                self.command,
                env={URL_ENV: url, **slot_env(self.slot)},
                reach=[address_of(url)],
            )
            proc = self._sandbox.popen(stdin=pipe, stdout=pipe, stderr=pipe)
        self.started += 1
        lines: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        said: deque[bytes] = deque(maxlen=20)
        threading.Thread(target=_pump_lines, args=(proc, lines), daemon=True).start()
        threading.Thread(target=_pump_stderr, args=(proc, said), daemon=True).start()
        self._proc, self._lines, self._stderr = proc, lines, said
        return proc

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None

    def run(
        self, task: dict[str, Any], url: str, deadline_s: float, crashed: threading.Event
    ) -> RunResult:
        proc = self._proc
        try:
            if proc is None or proc.poll() is not None:
                self._stop()
                proc = self._start(url)
            assert proc.stdin is not None
            proc.stdin.write(json.dumps({"task": task, "mcp_url": url}).encode() + b"\n")
            proc.stdin.flush()
        except OSError as exc:
            if proc is not None and self._proc is proc:
                return self._died(proc)
            return RunResult(error=f"TargetUnreachable: {exc}")
        end = time.monotonic() + deadline_s
        while True:
            try:
                line = self._lines.get(timeout=0.005)
                break
            except queue.Empty:
                if crashed.is_set():
                    self._stop()
                    return RunResult(crashed=True)
                if time.monotonic() > end:
                    self._stop()
                    return RunResult(
                        error="TargetTimeout: the run passed its deadline", timed_out=True
                    )
        if line is None:
            return self._died(proc)
        claims, problem = parse_claims(line.decode("utf-8", "replace"))
        if len(claims) == 1 and isinstance(claims[0].get("claims"), list):
            claims = [c for c in claims[0]["claims"] if isinstance(c, dict)]
        return RunResult(claims=claims, error=f"TargetFailed: {problem}" if problem else None)

    def _died(self, proc: subprocess.Popen[bytes]) -> RunResult:
        """The warm process ended during a run: the run is a target error, the next run starts
        a fresh process."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
        code = proc.returncode
        self._stop()
        why = last_line(b"\n".join(self._stderr), self.confinement)
        status = _exit_text(code) if code is not None else "closed its output"
        return RunResult(
            error=f"TargetFailed: the agent process ended during the run ({status})"
            + (f": {why}" if why else "")
        )

    def close(self) -> None:
        self._stop()


def _pump_lines(proc: subprocess.Popen[bytes], lines: queue.SimpleQueue[bytes | None]) -> None:
    """A warm process's stdout, a line at a time; None once it closes."""
    assert proc.stdout is not None
    with contextlib.suppress(OSError, ValueError):
        for line in proc.stdout:
            if line.strip():
                lines.put(line)
    lines.put(None)


def _pump_stderr(proc: subprocess.Popen[bytes], said: deque[bytes]) -> None:
    """Drained so the process never blocks on a full pipe; the last lines say why it failed."""
    assert proc.stderr is not None
    with contextlib.suppress(OSError, ValueError):
        for line in proc.stderr:
            said.append(line)
