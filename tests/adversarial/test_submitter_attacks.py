"""A submitter attacking the service itself (issue 25): predicates that cost minutes, and target
fields that would only fail later, in a worker. Each is refused at submission naming its field,
quickly; a predicate that is cheap on its face but slow on the world's data is stopped in its
trial by the deadline, and the other invariants still run. And a submitter who retries (issue 44)
until an attempt looks clean: a release blocked once stays blocked, whatever a later attempt of
the same code, manifest and policy shows.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.core.errors import ManifestInvalid
from service.core.system.manifest import invariants_of, parse_manifest
from service.mcp.cel import Evaluator, compile_invariants
from tests.adversarial.deployment import Deployment, deployment
from tests.support.flipping import PLAN, agent_at, manifest
from tests.support.service import free_port, wait_decided

ROOT = Path(__file__).resolve().parents[2]
WAREHOUSE = ROOT / "examples" / "mcp-warehouse" / "manifest.careful.json"
L100 = "[" + ",".join(str(i) for i in range(100)) + "]"


def warehouse() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(WAREHOUSE.read_text())
    return data


def refused_field(data: dict[str, Any]) -> tuple[str, float]:
    """The field refused, and the CPU seconds this thread spent refusing it: CPU, not wall time,
    so that a busy machine cannot fail it, and evaluating the predicate would take minutes."""
    started = time.thread_time()
    with pytest.raises(ManifestInvalid) as exc:
        compile_invariants(invariants_of(parse_manifest(data)))
    return str(exc.value.field), time.thread_time() - started


def with_predicate(expr: str) -> dict[str, Any]:
    data = warehouse()
    data["invariants"]["predicates"].append({"name": "attack", "expr": expr})
    return data


@pytest.mark.parametrize(
    "expr",
    [
        f"{L100}.all(a, {L100}.all(b, {L100}.all(c, {L100}.all(d, a+b+c+d >= 0))))",
        f"calls.all(c, {L100}.all(a, {L100}.exists(b, a * b == c.seq)))",
        f"{L100}.map(a, {L100}.map(b, {L100})).all(x, x.all(y, y.all(z, z >= 0)))",
        "claims.all(c, calls.all(a, calls.exists(b, string(a.reply) + string(b.reply) == "
        "string(c))))",
    ],
    ids=["nested literal all", "free at submission", "map then all", "string growth"],
)
def test_a_predicate_that_would_hold_a_worker_for_minutes_is_refused_at_submission(
    expr: str,
) -> None:
    data = with_predicate(expr)
    index = len(data["invariants"]["predicates"]) - 1
    field, took = refused_field(data)
    assert field == f"invariants.predicates.{index}.expr"
    assert took < 0.5


def test_a_flood_of_cheap_predicates_is_refused() -> None:
    data = warehouse()
    data["invariants"]["predicates"] = [{"name": f"p{i}", "expr": "true"} for i in range(40)]
    assert refused_field(data)[0] == "invariants.predicates"


def test_a_predicate_cheap_on_its_face_but_slow_on_a_huge_record_is_stopped_in_its_trial() -> None:
    data = with_predicate("after.records.rows.all(a, after.records.rows.exists(b, b >= a))")
    compiled = compile_invariants(invariants_of(parse_manifest(data)))
    evaluator = Evaluator(compiled, deadline_s=0.5, trial_deadline_s=5.0)
    try:
        evaluator.start()
        rows = list(range(4000))
        world = {"effects": [], "records": {"rows": rows}}
        activation = {
            "task": {"subject": "o-1"},
            "subject": "o-1",
            "expected": "complete",
            "before": world,
            "after": world,
            "new_effects": [],
            "calls": [],
            "claim": None,
            "claims": [],
            "fault": None,
        }
        out = evaluator.evaluate(activation)
    finally:
        evaluator.close()
    assert out.results["attack"] is False
    assert "deadline" in out.errors["attack"]
    assert out.results["wrong_subject"] is True  # evaluated after the attack was stopped


@pytest.mark.parametrize(
    ("where", "value", "field"),
    [
        (("target", "runner"), {"kind": "http", "url": "file:///etc/passwd"}, "target.runner.url"),
        (("target", "runner"), {"kind": "http", "url": "::::"}, "target.runner.url"),
        (("target", "runner"), {"kind": "python", "entrypoint": ":"}, "target.runner.entrypoint"),
        (
            ("target", "runner"),
            {"kind": "openai-agents", "entrypoint": "a:b:c"},
            "target.runner.entrypoint",
        ),
        (("target", "runner"), {"kind": "command", "command": [""]}, "target.runner.command"),
        (("tools", "servers"), {"shop": {"url": "http://"}}, "tools.servers.shop.url"),
    ],
)
def test_a_target_field_that_would_fail_in_a_worker_is_refused_naming_it(
    where: tuple[str, str], value: Any, field: str
) -> None:
    data = warehouse()
    section = copy.deepcopy(data[where[0]])
    if where[1] == "servers":
        section["servers"] = {**section["servers"], **value}
    else:
        section[where[1]] = value
    data[where[0]] = section
    assert refused_field(data)[0] == field


# --------------------------------------------------------------------- the submitter who retries


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with deployment(tmp_path_factory.mktemp("retries"), "retries", {}) as found:
        yield found


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_a_submitter_who_retries_until_an_attempt_looks_clean_is_never_allowed(
    service: Deployment,
) -> None:
    """The team's agent answers at its own URL: its broken build duplicates a refund, then the
    careful build answers every later attempt of the same manifest — a re-run, a re-run with
    another seed, new candidates of other versions. Each looks clean on its own evidence; the
    release stays blocked on the first attempt's, and the gate never answers `allow`."""
    system, port = f"retrier-{uuid.uuid4().hex[:6]}", free_port()
    tenant = "retrier"
    with service.submitter(tenant) as client:

        def submitted(version: str, seed: int) -> dict[str, Any]:
            body = {
                "system": system,
                "version": version,
                "source_revision": "abc",
                "manifest": manifest(port),
                "plan": {**PLAN, "seed": seed},
            }
            sent = client.post("/v1/candidates", json=body)
            assert sent.status_code == 202, sent.text
            return wait_decided(client, sent.json()["id"], timeout=300)

        def rerun(candidate_id: str, seed: int) -> dict[str, Any]:
            sent = client.post(
                f"/v1/candidates/{candidate_id}/rerun", json={"plan": {**PLAN, "seed": seed}}
            )
            assert sent.status_code == 202, sent.text
            return wait_decided(client, candidate_id, timeout=300)

        with agent_at(port, broken=True):
            first = submitted("1", 1)
        assert first["decision"] == "block", first
        with agent_at(port):
            tries = [
                rerun(first["id"], 1),
                rerun(first["id"], 2),
                submitted("2", 3),
                submitted("3", 4),
            ]
        for decided in tries:
            assert decided["decision"] == "block", decided
            codes = [r["code"] for r in decided["reasons"]]
            assert codes == ["release_blocked"], codes  # its own evidence clean, but blocked
            assert first["assay_id"] in decided["reasons"][0]["message"]
        gate = client.get(f"/v1/gate/{system}").json()
        assert gate["decision"] == "block", gate
