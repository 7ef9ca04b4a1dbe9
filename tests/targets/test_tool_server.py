"""The sandbox tool server's `/v1/batch`: several calls of one trial in one round trip, run as if
sent one by one, stopping at the first that fails; a malformed batch runs nothing."""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from typing import Any

from service.core.shards.assay import replay_trial
from service.core.trial.sandbox import Task, Tools
from service.targets.tool_server import Session, ToolServer
from tests.targets.conftest import example, plan

Probe = Callable[[Callable[[dict[str, Any]], tuple[int, Any]], Session, Tools], None]


def in_a_trial(probe: Probe) -> None:
    """Run `probe` inside a real trial, with a `post(body)` that sends a batch for it."""

    def target(task: Task, tools: Tools) -> None:
        with ToolServer() as server:
            session = server.open(task, tools)
            host, port = server.base_url.removeprefix("http://").split(":")
            conn = http.client.HTTPConnection(host, int(port), timeout=5)

            def post(body: dict[str, Any]) -> tuple[int, Any]:
                headers = {"Authorization": f"Bearer {session.token}"}
                conn.request("POST", "/v1/batch", json.dumps(body), headers)
                resp = conn.getresponse()
                return resp.status, json.loads(resp.read())

            try:
                probe(post, session, tools)
            finally:
                conn.close()
                server.release(session)

    replay_trial(example("typed"), plan(1, "subject_swap"), 0, target)


def record(kind: str) -> dict[str, Any]:
    body = {"kind": kind, "action_id": "a-1", "trace_id": None, "ledger_ref": None}
    return {"path": "/v1/evidence/record", "body": body}


def kinds(tools: Tools) -> list[str]:
    return [r["kind"] for r in tools.evidence_read("a-1")]


def test_a_batch_runs_its_calls_in_order_and_answers_each() -> None:
    def probe(post: Any, session: Session, tools: Tools) -> None:
        order = session.task.order_id
        status, reply = post(
            {
                "calls": [
                    record("decision"),
                    {"path": "/v1/checkpoints/save", "body": {"run_id": "r", "stage": "s"}},
                    {"path": "/v1/orders/read", "body": {"order_id": order}},
                ]
            }
        )
        assert status == 200
        assert [r["status"] for r in reply["results"]] == [200, 200, 200]
        assert reply["results"][2]["body"]["order"]["id"] == order
        assert kinds(tools) == ["decision"]
        assert tools.checkpoint_load("r") == {"stage": "s"}
        assert session.calls == 3 and session.fault is None

    in_a_trial(probe)


def test_a_batch_stops_at_the_first_call_that_fails_and_runs_nothing_after_it() -> None:
    def probe(post: Any, session: Session, tools: Tools) -> None:
        refund_without_key = {
            "path": "/v1/payments/refunds",
            "body": {"subject": "s", "tenant": "t", "amount": 1, "grant_id": "g"},
        }
        status, reply = post({"calls": [record("decision"), refund_without_key, record("effect")]})
        assert status == 200
        assert [r["status"] for r in reply["results"]] == [200, 400]
        assert kinds(tools) == ["decision"]
        assert session.fault is not None and "idempotency-key" in session.fault

    in_a_trial(probe)


def test_a_malformed_batch_runs_none_of_its_calls_and_is_a_protocol_violation() -> None:
    def probe(post: Any, session: Session, tools: Tools) -> None:
        nested = {"path": "/v1/batch", "body": {"calls": [record("effect")]}}
        status, reply = post({"calls": [record("decision"), nested]})
        assert status == 400
        assert "calls[1].path" in reply["detail"]
        assert kinds(tools) == []
        assert session.calls == 0 and session.fault is not None

    in_a_trial(probe)
