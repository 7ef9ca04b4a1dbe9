"""CEL invariants: compiled once per manifest, evaluated per trial.

We use `common-expression-language` (Rust `cel` bindings): it compiles an expression once into a
reusable program and evaluates it in microseconds, which matters at hundreds of trials a second;
the pure-Python `cel-python` is an order of magnitude slower per evaluation. Its errors carry the
position of the problem, which the manifest error repeats.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cel

from service.core.contract import STANDARD, VARIABLES, Invariants, invariant_table
from service.core.errors import ManifestInvalid

# A shaped, empty activation: a dry run against it finds names that are not variables.
_DRY: dict[str, Any] = {
    "task": {},
    "subject": "",
    "expected": "complete",
    "before": {"effects": [], "records": {}},
    "after": {"effects": [], "records": {}},
    "new_effects": [],
    "calls": [],
    "claim": None,
    "claims": [],
    "fault": None,
}
assert set(_DRY) == set(VARIABLES)


@dataclass(frozen=True)
class Compiled:
    name: str
    source: str
    severity: str
    program: Any
    standard: bool


def compile_invariants(inv: Invariants) -> tuple[Compiled, ...]:
    """Compile every invariant; the first that does not compile is a ManifestInvalid naming it."""
    out: list[Compiled] = []
    index = {p.name: i for i, p in enumerate(inv.predicates)}
    for name, source, severity in invariant_table(inv):
        field = (
            f"invariants.predicates.{index[name]}.expr" if name in index else f"invariants.{name}"
        )
        try:
            program = cel.compile(source)
        except ValueError as exc:
            raise ManifestInvalid(f"does not compile: {exc}", field=field) from None
        try:
            cel.evaluate(source, _DRY)
        except RuntimeError as exc:
            if "Undefined variable" in str(exc):
                known = ", ".join(VARIABLES)
                raise ManifestInvalid(f"{exc} (variables: {known})", field=field) from None
        except Exception:  # other evaluation errors depend on the data; they fail the trial
            pass
        out.append(Compiled(name, source, severity, program, name in STANDARD))
    return tuple(out)


def evaluate(compiled: tuple[Compiled, ...], activation: dict[str, Any]) -> dict[str, bool]:
    """Each invariant's result: True holds; False, a non-boolean or an error fails."""
    ctx = cel.Context()
    for k, v in activation.items():
        ctx.add_variable(k, v)
    results: dict[str, bool] = {}
    for c in compiled:
        try:
            value = c.program.execute(ctx)
        except Exception:
            value = False
        results[c.name] = value is True
    return results
