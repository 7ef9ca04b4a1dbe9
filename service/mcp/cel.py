"""CEL invariants: priced and compiled once per manifest, evaluated per trial under a deadline.

We use `common-expression-language` (Rust `cel` bindings): it compiles an expression once into a
reusable program and evaluates it in microseconds, which matters at hundreds of trials a second;
the pure-Python `cel-python` is an order of magnitude slower per evaluation. Its errors carry the
position of the problem, which the manifest error repeats.

The bindings have no cost limit and hold the GIL while they evaluate, so nothing here evaluates a
tenant's predicate in the process that submitted it or in the worker that runs the trial:
- at submission each predicate is priced from its source (`service/mcp/cost.py`) before it is
  compiled; over `PREDICATE_BUDGET` (or all of them over `MANIFEST_BUDGET`) it is refused. It is
  compiled, never evaluated: the names it reads come from the pricing parser;
- in a trial the invariants run in a child process (`Evaluator`) that is killed at a deadline
  (`INVARIANT_DEADLINE_S` each, `TRIAL_DEADLINE_S` for all of a trial's): the static price bounds
  `calls`, `new_effects` and `claims` (the proxy and `Evaluator` enforce their caps), but the
  world's own data (records, arguments, replies) is the tenant's and any size, so only a deadline
  is a true bound. An invariant over its deadline, or an activation over a cap, fails with the
  reason, which the trial's record keeps (`sample.invariant_errors`).
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from types import ModuleType
from typing import Any

from service.core.errors import ManifestInvalid
from service.core.system.contract import STANDARD, VARIABLES, Invariants, invariant_table
from service.mcp.cost import (
    MANIFEST_BUDGET,
    MAX_CALLS,
    MAX_CLAIMS,
    MAX_NEW_EFFECTS,
    MAX_PREDICATES,
    PREDICATE_BUDGET,
    CostError,
    estimate,
)


@functools.cache
def bindings() -> ModuleType:
    """The bindings' compiled module (`compile`, `Context`), loaded on first use.

    Alone: the package's `__init__` also imports its command line (typer, prompt_toolkit, rich,
    pygments; about 0.3 CPU-seconds), which every API process and every trial's evaluator child
    would otherwise pay for two functions. Registered as `cel.cel`, so a later `import cel` reuses
    it (the extension initialises once a process). Another layout of the package: all of it."""
    loaded = sys.modules.get("cel.cel")
    if loaded is not None:
        return loaded
    spec = importlib.util.find_spec("cel")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(folder) / f"cel{suffix}"
            if not path.is_file():
                continue
            loader = importlib.machinery.ExtensionFileLoader("cel.cel", str(path))
            module_spec = importlib.util.spec_from_loader("cel.cel", loader, origin=str(path))
            assert module_spec is not None
            module = importlib.util.module_from_spec(module_spec)
            sys.modules["cel.cel"] = module
            loader.exec_module(module)
            return module
    import cel

    return cel


INVARIANT_DEADLINE_S = 2.0
TRIAL_DEADLINE_S = 5.0
# The child's start (a fresh interpreter importing `cel`) is not part of any deadline.
_START_TIMEOUT_S = 60.0
# The functions the bindings define (nothing is added to them): a predicate calling another one
# would fail every trial, so it is refused at submission, which no longer evaluates anything.
FUNCTIONS = frozenset(
    {"size", "contains", "startsWith", "endsWith", "matches", "has", "type", "dyn"}
    | {"all", "exists", "exists_one", "map", "filter"}
    | {"string", "int", "uint", "double", "bytes", "timestamp", "duration"}
    | {"getFullYear", "getMonth", "getDayOfMonth", "getDayOfYear", "getDayOfWeek", "getDate"}
    | {"getHours", "getMinutes", "getSeconds", "getMilliseconds"}
)
# Function names as written (operators are listed as `_&&_`, `!_`, `@in`, ...).
_NAMED = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
# The activation lists whose caps make the static price a bound on them.
_CAPS: dict[str, int] = {"calls": MAX_CALLS, "new_effects": MAX_NEW_EFFECTS, "claims": MAX_CLAIMS}


@dataclass(frozen=True)
class Compiled:
    name: str
    source: str
    severity: str
    program: Any
    standard: bool
    cost: int = 0


def compile_invariants(inv: Invariants) -> tuple[Compiled, ...]:
    """Price and compile every invariant; the first refused is a ManifestInvalid naming it."""
    if len(inv.predicates) > MAX_PREDICATES:
        raise ManifestInvalid(
            f"{len(inv.predicates)} predicates; the limit is {MAX_PREDICATES}",
            field="invariants.predicates",
        )
    out: list[Compiled] = []
    index = {p.name: i for i, p in enumerate(inv.predicates)}
    total = 0
    for name, source, severity in invariant_table(inv):
        field_ = (
            f"invariants.predicates.{index[name]}.expr" if name in index else f"invariants.{name}"
        )
        try:
            priced = estimate(source)
        except CostError as exc:
            raise ManifestInvalid(f"does not compile: {exc}", field=field_) from None
        if priced.cost > PREDICATE_BUDGET:
            raise ManifestInvalid(
                f"estimated cost {priced.cost:,} is over the budget of {PREDICATE_BUDGET:,} "
                "per predicate (docs/mcp.md#the-cost-of-a-predicate)",
                field=field_,
            )
        total += priced.cost
        if total > MANIFEST_BUDGET:
            raise ManifestInvalid(
                f"the invariants' estimated cost {total:,} is over the budget of "
                f"{MANIFEST_BUDGET:,} for a manifest (docs/mcp.md#the-cost-of-a-predicate)",
                field=field_,
            )
        unknown = sorted(priced.names - set(VARIABLES))
        if unknown:
            known = ", ".join(VARIABLES)
            raise ManifestInvalid(
                f"Undefined variable or function: {unknown[0]!r} (variables: {known})",
                field=field_,
            )
        try:
            program = bindings().compile(source)
        except ValueError as exc:
            raise ManifestInvalid(f"does not compile: {exc}", field=field_) from None
        missing = sorted(f for f in program.functions() if _NAMED.match(f) and f not in FUNCTIONS)
        if missing:
            raise ManifestInvalid(
                f"Undefined variable or function: {missing[0]!r} "
                f"(functions: {', '.join(sorted(FUNCTIONS))})",
                field=field_,
            )
        out.append(Compiled(name, source, severity, program, name in STANDARD, priced.cost))
    return tuple(out)


@dataclass
class Evaluation:
    """Each invariant's result (True holds) and, for a failure with a reason, the reason."""

    results: dict[str, bool] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def fail(self, name: str, reason: str) -> None:
        self.results[name] = False
        self.errors[name] = reason


def run_programs(
    compiled: tuple[Compiled, ...] | list[tuple[str, Any]], activation: dict[str, Any]
) -> Evaluation:
    """Evaluate in this process, unbounded: only for the child, and for tests of the rules."""
    ctx = bindings().Context()
    for k, v in activation.items():
        ctx.add_variable(k, v)
    out = Evaluation()
    for c in compiled:
        name, program = (c.name, c.program) if isinstance(c, Compiled) else c
        _one(out, name, program, ctx)
    return out


def _one(out: Evaluation, name: str, program: Any, ctx: Any) -> None:
    try:
        value = program.execute(ctx)
    except Exception as exc:
        out.fail(name, f"evaluation error: {type(exc).__name__}: {exc}"[:500])
        return
    out.results[name] = value is True
    if value is not True and value is not False:
        out.errors[name] = f"evaluated to {type(value).__name__}, not a bool"


def _child(fd: int) -> None:
    """The evaluator process (`python -m service.mcp.cel FD`): receive the invariants and compile
    them once, then per message (activation, start) send one (name, ok, reason) per invariant
    from `start` on. It exits when the worker closes its end."""
    conn = Connection(fd)
    table: list[tuple[str, str]] = conn.recv()
    programs = [(name, bindings().compile(source)) for name, source in table]
    conn.send("ready")
    while True:
        try:
            activation, start = conn.recv()
        except EOFError:
            return
        ctx = bindings().Context()
        for k, v in activation.items():
            ctx.add_variable(k, v)
        for name, program in programs[start:]:
            one = Evaluation()
            _one(one, name, program, ctx)
            conn.send((name, one.results[name], one.errors.get(name)))


class Evaluator:
    """One manifest's invariants, evaluated per trial in a child process killed at a deadline."""

    def __init__(
        self,
        compiled: tuple[Compiled, ...],
        deadline_s: float = INVARIANT_DEADLINE_S,
        trial_deadline_s: float = TRIAL_DEADLINE_S,
    ) -> None:
        self.compiled = compiled
        self.deadline_s = deadline_s
        self.trial_deadline_s = trial_deadline_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None

    def start(self) -> Connection:
        """The child's connection, starting the child first if it is not running."""
        # A process of its own (not multiprocessing: a Celery pool process is daemonic and may
        # not have multiprocessing children), talking over a socket pair.
        if self._conn is not None:
            return self._conn
        ours, theirs = socket.socketpair()
        try:
            # No environment beyond the import path: no secret of the worker's is there. `-P`:
            # not the working directory first (`assaygate assay` run from a team's folder that
            # holds a package named `service` would import the team's instead of this module).
            path = os.pathsep.join(p for p in sys.path if p)
            proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "service.mcp.cel", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env={"PYTHONPATH": path, "PATH": os.defpath},
            )
        finally:
            theirs.close()
        conn = Connection(ours.detach())
        self._proc, self._conn = proc, conn
        conn.send([(c.name, c.source) for c in self.compiled])
        if not conn.poll(_START_TIMEOUT_S) or conn.recv() != "ready":
            self.close()
            raise RuntimeError("the CEL evaluator did not start")
        return conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(5)
        self._proc = self._conn = None

    def evaluate(self, activation: dict[str, Any]) -> Evaluation:
        out = Evaluation()
        for var, cap in _CAPS.items():
            value = activation.get(var)
            if isinstance(value, list) and len(value) > cap:
                for c in self.compiled:
                    out.fail(c.name, f"not evaluated: {var} holds {len(value)}, over the cap {cap}")
                return out
        started = time.monotonic()
        i = 0
        while i < len(self.compiled):
            left = self.trial_deadline_s - (time.monotonic() - started)
            if left <= 0:
                for c in self.compiled[i:]:
                    out.fail(
                        c.name,
                        f"not evaluated: the trial's invariants ran out of their "
                        f"{self.trial_deadline_s:g} s",
                    )
                break
            # A restarted child's start-up is not the invariants' time.
            begun = time.monotonic()
            self.start()
            started += time.monotonic() - begun
            i = self._run(activation, i, started, out)
        return out

    def _run(self, activation: dict[str, Any], i: int, started: float, out: Evaluation) -> int:
        """Evaluate from invariant `i` on until the end or one fails to answer; the next index."""
        conn = self.start()
        try:
            conn.send((activation, i))
            while i < len(self.compiled):
                wait = min(self.deadline_s, self.trial_deadline_s - (time.monotonic() - started))
                if not conn.poll(max(wait, 0)):
                    out.fail(
                        self.compiled[i].name,
                        f"evaluation exceeded its deadline of {max(wait, 0):.3g} s",
                    )
                    self.close()  # the child is busy in Rust: only a kill stops it
                    return i + 1
                name, ok, reason = conn.recv()
                out.results[name] = ok
                if reason is not None:
                    out.errors[name] = reason
                i += 1
        except (EOFError, OSError) as exc:  # the child died (a crash, the OOM killer)
            out.fail(self.compiled[i].name, f"the evaluator stopped: {type(exc).__name__}")
            self.close()
            return i + 1
        return i


if __name__ == "__main__":
    _child(int(sys.argv[1]))
