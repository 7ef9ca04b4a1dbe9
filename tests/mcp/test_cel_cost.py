"""Predicates are priced before they compile, and evaluated under a deadline in a child process."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from service.cli import main
from service.core.errors import ManifestInvalid
from service.core.faults.injector import Injector
from service.core.system.contract import TEMPLATES, Invariants, parse_contract
from service.mcp.cel import Evaluator, compile_invariants
from service.mcp.cost import (
    DATA,
    MAX_CALLS,
    MAX_CLAIMS,
    MAX_PREDICATES,
    PREDICATE_BUDGET,
    Shape,
    estimate,
)
from service.mcp.hooks import Upstreams
from service.mcp.proxy import Proxy, Run, TrialState
from tests.mcp.conftest import Sandbox

ROOT = Path(__file__).resolve().parents[2]
LIST_100 = "[" + ",".join(str(i) for i in range(100)) + "]"
# The attack of issue 25: ~1,200 characters, 10^8 iterations, minutes of a frozen API.
NESTED_ALL_BOMB = (
    f"{LIST_100}.all(a, {LIST_100}.all(b, {LIST_100}.all(c, {LIST_100}.all(d, a+b+c+d >= 0))))"
)


def invariants(*exprs: str, builtin: bool = True) -> Invariants:
    predicates = [{"name": f"p{i}", "expr": e} for i, e in enumerate(exprs)]
    return Invariants.model_validate(
        {"predicates": predicates} if builtin else {"predicates": predicates, "builtin": []}
    )


def refusal(*exprs: str) -> ManifestInvalid:
    with pytest.raises(ManifestInvalid) as exc:
        compile_invariants(invariants(*exprs))
    return exc.value


def test_the_nested_all_bomb_over_a_100_element_literal_is_refused_quickly_naming_it() -> None:
    # This thread's CPU seconds, not wall time (a busy machine cannot fail it): refused by the
    # static estimate, not by evaluating ~1.2 billion steps.
    started = time.thread_time()
    err = refusal("size(claims) >= 0", NESTED_ALL_BOMB)
    assert time.thread_time() - started < 0.5
    assert err.field == "invariants.predicates.1.expr"
    assert f"over the budget of {PREDICATE_BUDGET:,}" in err.message
    assert "estimated cost 1,2" in err.message  # ~1.2 billion units


@pytest.mark.parametrize(
    "expr",
    [
        # Free at submission (calls is empty there), 128 x 10^4 iterations in a trial.
        f"calls.all(c, {LIST_100}.all(a, {LIST_100}.all(b, a + b >= c.seq)))",
        # String growth: each level doubles a string that a later function reads.
        "calls.all(c, new_effects.all(e, claims.all(x, (string(c.arguments) + string(e) + "
        "string(x)).contains(subject))))",
        # A map over a map of the world's own data, nested.
        "after.records.all(k, after.records.all(j, after.records.all(i, k + j + i != '')))",
    ],
)
def test_nested_comprehensions_over_trial_data_are_refused(expr: str) -> None:
    err = refusal(expr)
    assert err.field == "invariants.predicates.0.expr"
    assert "over the budget" in err.message


def test_many_cheap_predicates_are_refused_by_the_manifest_budget_or_the_count() -> None:
    near = "calls.all(a, calls.all(b, a.seq >= b.seq))"
    assert estimate(near).cost < PREDICATE_BUDGET
    err = refusal(*[near] * 20)
    assert "for a manifest" in err.message
    err = refusal(*["true"] * (MAX_PREDICATES + 1))
    assert err.field == "invariants.predicates"


def test_the_built_in_templates_fit_the_budget_with_room() -> None:
    for name, source in TEMPLATES.items():
        assert estimate(source).cost < PREDICATE_BUDGET / 2, name


def test_the_examples_predicates_are_accepted() -> None:
    manifests = sorted(ROOT.glob("examples/**/manifest*.json"))
    checked = 0
    for path in manifests:
        data = json.loads(path.read_text())
        if data.get("invariants"):
            compile_invariants(Invariants.model_validate(data["invariants"]))
            checked += 1
    assert checked >= 4


def test_a_predicate_the_pricing_parser_cannot_read_is_refused_as_not_compiling() -> None:
    err = refusal("new_effects.all(e, ")
    assert "does not compile" in err.message


def test_list_literal_sizes_are_as_written_and_variables_as_capped() -> None:
    assert estimate("[1, 2, 3].all(x, x > 0)").cost <= 20
    assert estimate("claims.all(c, true)").cost > MAX_CLAIMS
    small = {"xs": Shape(10, DATA)}
    assert 1_000 < estimate("xs.all(a, xs.all(b, a == b))", small).cost < 4_000


def test_a_trial_evaluation_over_its_deadline_fails_that_invariant_with_a_reason() -> None:
    # Under the static budget only because the world's data is assumed small: a predicate over a
    # huge record is stopped by the deadline, and the other invariants are still evaluated.
    slow = "task.items.all(a, task.items.exists(b, b >= a))"
    compiled = compile_invariants(invariants(slow, "size(claims) == 0", builtin=False))
    evaluator = Evaluator(compiled, deadline_s=0.5, trial_deadline_s=3.0)
    try:
        activation = {v: None for v in ("subject", "expected", "claim", "fault")} | {
            "task": {"items": list(range(3000))},
            "before": {},
            "after": {},
            "new_effects": [],
            "calls": [],
            "claims": [],
        }
        evaluator.start()
        started = time.monotonic()
        out = evaluator.evaluate(activation)
        assert time.monotonic() - started < 4.0  # 0.5 s, then a restarted child for p1
        assert out.results == {"p0": False, "p1": True}
        assert "exceeded its deadline" in out.errors["p0"]
        # The evaluator restarts: the next trial is evaluated normally.
        again = evaluator.evaluate(activation | {"task": {"items": [1, 2]}})
        assert again.results == {"p0": True, "p1": True}
    finally:
        evaluator.close()


def test_an_activation_over_a_cap_fails_every_invariant_without_evaluating() -> None:
    compiled = compile_invariants(invariants("true", builtin=False))
    evaluator = Evaluator(compiled)
    out = evaluator.evaluate({"claims": [{}] * (MAX_CLAIMS + 1)})
    assert out.results == {"p0": False}
    assert "over the cap" in out.errors["p0"]


def test_a_function_the_bindings_do_not_define_is_refused_without_evaluating() -> None:
    err = refusal("subject.lowerAscii() == 'x'")
    assert err.field == "invariants.predicates.0.expr"
    assert "'lowerAscii'" in err.message
    compile_invariants(invariants("size(claims) >= 0 && fault.startsWith('x') || true"))


@pytest.mark.timeout(600)
def test_the_reason_an_invariant_failed_in_a_trial_reaches_the_trial_record(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = sandbox.manifest("careful")
    manifest["invariants"]["predicates"].append(
        {"name": "reads_a_missing_key", "expr": "task.no_such_field == 1", "severity": "hold"}
    )
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    main(["assay", str(path), "--trials", "1", "--json", "--mode", "forked_run"])
    report = json.loads(capsys.readouterr().out)
    sample = report["faults"][0]["samples"][0]
    assert sample["invariants"]["reads_a_missing_key"] is False
    assert "evaluation error" in sample["invariant_errors"]["reads_a_missing_key"]
    assert sample["invariants"]["wrong_subject"] is True


def test_the_proxy_refuses_a_trial_s_calls_beyond_the_cap_without_forwarding_them() -> None:
    manifest = json.loads((ROOT / "examples/mcp-warehouse/manifest.careful.json").read_text())
    contract = parse_contract(manifest["tools"])
    trial = TrialState(None, contract, Injector(None), "o-1", [])
    trial.calls.extend({"seq": i} for i in range(MAX_CALLS))
    proxy = Proxy(Upstreams(contract))
    with pytest.raises(MCPError, match=f"limit of {MAX_CALLS} tool calls"):
        asyncio.run(proxy.call(Run(trial, 0), "ship_order", {}))
    assert len(trial.calls) == MAX_CALLS


def test_the_bindings_load_without_the_packages_command_line_and_a_later_import_shares_them() -> (
    None
):
    # A fresh interpreter, as an API process or a trial's evaluator child starts.
    code = (
        "import sys\n"
        "from service.mcp.cel import Evaluator, bindings, compile_invariants\n"
        "assert 'cel.cel' not in sys.modules, 'loaded at import'\n"
        "from service.core.system.contract import parse_invariants\n"
        "inv = parse_invariants({'predicates': [{'name': 'p', 'expr': 'size(calls) >= 0'}],"
        " 'builtin': []})\n"
        "compiled = compile_invariants(inv)\n"
        "ev = Evaluator(compiled)\n"
        "try:\n"
        "    out = ev.evaluate({'calls': [], 'new_effects': [], 'claims': []})\n"
        "finally:\n"
        "    ev.close()\n"
        "assert out.results == {'p': True}, out\n"
        "heavy = sorted(m for m in ('cel.cli', 'prompt_toolkit', 'typer') if m in sys.modules)\n"
        "import cel\n"
        "assert cel.compile is bindings().compile\n"
        "print(heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
