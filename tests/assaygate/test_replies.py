"""A python target's tool replies read like dicts and lists for every documented key, and refuse a
key the reply never has instead of answering None (issue 47: `.get("policy", {})` made a policy
check a no-op). The refusal fails the task even when the target catches it."""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path

import pytest

from assaygate.replies import SHAPES, shaped
from assaygate.target import ReplyMisread
from service.targets import load_target
from tests.targets.conftest import assay, example, plan

POLICY = {"version": 5, "refunds_allowed": True}
ENTRY = {"id": "L-3", "subject": "s", "tenant": "t", "amount": 1, "action_id": "a"}
ENTRY |= {"trace_id": None, "at": 7}


def test_every_documented_key_reads_as_from_a_dict_even_where_a_reply_lacks_it() -> None:
    policy = shaped("policy_read", dict(POLICY), [])
    assert policy == POLICY and policy["refunds_allowed"] is True
    assert policy.get("version") == 5 and "version" in policy
    partial = shaped("refund", {"status": "ok"}, [])  # partial_success_response
    assert partial.get("ledger_ref") is None and "ledger_ref" not in partial
    with pytest.raises(KeyError):
        partial["ledger_ref"]
    drifted = shaped("crm_read", {"id": "o", "schema": 2}, [])
    assert drifted.get("schema") == 2 and drifted.get("unit", "pence") == "pence"


def test_the_http_wrapper_read_from_a_python_reply_is_refused_naming_what_the_method_returns() -> (
    None
):
    mistakes: list[str] = []
    policy = shaped("policy_read", dict(POLICY), mistakes)
    for read in (lambda: policy.get("policy", {}), lambda: policy["policy"]):
        with pytest.raises(ReplyMisread, match=r"returns the policy, \{version") as refused:
            read()
        assert "'policy' is the key that wraps it in the HTTP reply of /v1/policy/read" in str(
            refused.value
        )
    with pytest.raises(ReplyMisread):
        "policy" in policy  # noqa: B015 (the test is that it raises)
    assert len(mistakes) == 3, "each misread is kept for the task's verdict"


def test_a_list_reply_refuses_its_wrapper_and_its_items_refuse_unknown_keys() -> None:
    entries = shaped("lookup", [dict(ENTRY)], [])
    assert entries[0]["id"] == "L-3" and entries[-1:] == [ENTRY] and len(entries) == 1
    with pytest.raises(ReplyMisread, match="lookup\\(\\) returns the ledger's entries, a list"):
        entries["entries"]
    with pytest.raises(ReplyMisread):
        entries.get("entries", [])  # type: ignore[attr-defined]
    with pytest.raises(ReplyMisread, match="no 'ledger_ref'"):
        entries[0].get("ledger_ref")  # an entry's ledger reference is its `id`


def test_a_reply_is_still_a_plain_value_to_serialise_copy_and_store() -> None:
    policy = shaped("policy_read", dict(POLICY), [])
    entries = shaped("lookup", [dict(ENTRY)], [])
    assert json.loads(json.dumps({"p": policy, "e": entries})) == {"p": POLICY, "e": [ENTRY]}
    assert copy.deepcopy(policy) == POLICY and dict(policy) == POLICY
    assert pickle.loads(pickle.dumps(entries)) == [ENTRY]
    assert set(SHAPES) == {
        "crm_read",
        "orders_read",
        "policy_read",
        "capability_check",
        "propose",
        "refund",
        "lookup",
        "evidence_read",
    }


SWALLOWS = """
from assaygate.target import Task, Tools


def run(task: Task, tools: Tools) -> None:
    try:
        allowed = tools.policy_read()["policy"]["refunds_allowed"]
    except Exception:
        allowed = True  # a target that swallows its own bug
    if allowed:
        tools.respond("denied", task.action_id, None)
"""


def test_a_target_that_catches_its_misread_still_fails_its_task_naming_the_misread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "swallows.py").write_text(SWALLOWS)
    monkeypatch.syspath_prepend(str(tmp_path))
    manifest = example("typed", kind="python", entrypoint="swallows:run")
    target = load_target(manifest)
    try:
        report = assay(manifest, plan(2, "stale_policy"), target)
    finally:
        target.close()  # type: ignore[union-attr]
    errors = report["target_errors"]
    assert errors["total"] >= 2, "every trial's run is a target error"
    (cause,) = errors["causes"]["TargetRaised"]
    assert cause.startswith("TargetRaised: ReplyMisread: policy_read() returns the policy")
