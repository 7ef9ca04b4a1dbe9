"""The proxy's witness, rule by rule: every acknowledged or forwarded effect matches exactly one
probed effect and its content (subject, key, amount); an error reply is an answer; a forward still
in flight at the probe disagrees."""

from __future__ import annotations

from typing import Any

from service.mcp import witness
from service.mcp.witness import Forwarded, Reply

SUBJECT = "O-1"


def call(
    reply: Reply,
    ident: str | None = None,
    *,
    key: str | None = "A-1",
    subject: Any = SUBJECT,
    amount: Any = 3,
    tool: str = "ship_order",
    seq: int = 0,
    errors_may_commit: bool = False,
    alters_existing: bool = False,
) -> Forwarded:
    return Forwarded(
        seq=seq,
        run=1,
        tool=tool,
        subject=subject,
        key=key,
        amount=amount,
        errors_may_commit=errors_may_commit,
        alters_existing=alters_existing,
        reply=reply,
        id=ident,
    )


def row(
    ident: str,
    *,
    key: str | None = "A-1",
    subject: Any = SUBJECT,
    amount: Any = 3,
    tool: str | None = None,
) -> dict[str, Any]:
    out = {"id": ident, "key": key, "subject": subject, "amount": amount}
    return out if tool is None else {**out, "tool": tool}


def judged(
    forwarded: list[Forwarded],
    new: list[dict[str, Any]],
    old: list[dict[str, Any]] | None = None,
) -> witness.Testimony:
    """The testimony on a world that held `old` before the trial and holds `old + new` after."""
    before = {"effects": list(old or [])}
    return witness.testify(forwarded, before, {"effects": [*(old or []), *new]})


def test_an_acknowledged_effect_found_once_with_its_content_agrees() -> None:
    t = judged([call(Reply.ACKNOWLEDGED, "S-1")], [row("S-1")])
    assert t.agrees
    assert t.view([])["agrees"] is True


def test_an_acknowledged_effect_that_vanished_disagrees() -> None:
    t = judged([call(Reply.ACKNOWLEDGED, "S-1")], [])
    assert not t.agrees
    assert [r.id for r in t.vanished] == ["S-1"]


def test_an_acknowledged_effect_rewritten_in_place_disagrees() -> None:
    t = judged([call(Reply.ACKNOWLEDGED, "S-1")], [row("S-1", amount=30)])
    assert not t.agrees
    assert t.changed[0]["effect"]["amount"] == 30
    assert t.changed[0]["forwarded"][0]["amount"] == 3


def test_an_acknowledged_effect_moved_to_another_subject_disagrees() -> None:
    t = judged([call(Reply.ACKNOWLEDGED, "S-1")], [row("S-1", subject="O-2")])
    assert not t.agrees and t.changed


def test_an_acknowledged_effect_whose_key_was_rewritten_disagrees() -> None:
    t = judged([call(Reply.ACKNOWLEDGED, "S-1")], [row("S-1", key="A-other")])
    assert not t.agrees and t.changed


def test_an_effect_held_before_the_trial_and_rewritten_after_its_acknowledgement_disagrees() -> (
    None
):
    # The server answered an idempotent replay of an old effect: that old row is what it vouched
    # for, and it must still carry the call's content.
    old = [row("S-0")]
    after = {"effects": [row("S-0", amount=9)]}
    t = witness.testify([call(Reply.ACKNOWLEDGED, "S-0")], {"effects": old}, after)
    assert judged([call(Reply.ACKNOWLEDGED, "S-0")], [], old).agrees
    assert t.changed and not t.agrees


def test_a_number_and_its_decimal_string_are_the_same_content() -> None:
    # An SDK server coerces the argument "3" to the integer it stores.
    t = judged([call(Reply.ACKNOWLEDGED, "S-1", amount="3")], [row("S-1", amount=3)])
    assert t.agrees
    assert not judged([call(Reply.ACKNOWLEDGED, "S-1")], [row("S-1", amount="3.5")]).agrees


def test_content_the_call_did_not_carry_is_not_compared() -> None:
    t = judged([call(Reply.ACKNOWLEDGED, "S-1", key=None, amount=None)], [row("S-1", amount=99)])
    assert t.agrees


def test_content_the_probe_leaves_out_disagrees() -> None:
    # The contract names the amount argument: a probe that shows no amount corroborates none.
    t = judged([call(Reply.ACKNOWLEDGED, "S-1")], [row("S-1", amount=None)])
    assert not t.agrees and t.changed


def test_a_second_row_under_an_acknowledged_id_disagrees() -> None:
    t = judged([call(Reply.ACKNOWLEDGED, "S-1")], [row("S-1"), row("S-1")])
    assert not t.agrees
    assert len(t.multiplied) == 1


def test_an_extra_row_under_an_acknowledged_key_disagrees() -> None:
    t = judged([call(Reply.ACKNOWLEDGED, "S-1")], [row("S-1"), row("S-2")])
    assert not t.agrees
    assert [r["id"] for r in t.multiplied] == ["S-2"]
    assert not t.unexplained


def test_retries_under_one_key_acknowledged_once_are_one_effect() -> None:
    calls = [call(Reply.LOST, seq=0), call(Reply.ERROR, seq=1), call(Reply.ACKNOWLEDGED, "S-1")]
    assert judged(calls, [row("S-1")]).agrees


def test_retries_under_one_key_acknowledged_with_the_same_id_are_one_effect() -> None:
    calls = [call(Reply.ACKNOWLEDGED, "S-1", seq=0), call(Reply.ACKNOWLEDGED, "S-1", seq=1)]
    assert judged(calls, [row("S-1")]).agrees
    assert not judged(calls, [row("S-1"), row("S-1")]).agrees


def test_a_call_whose_reply_was_lost_explains_one_effect_of_its_content() -> None:
    assert judged([call(Reply.LOST)], [row("S-1")]).agrees
    assert judged([call(Reply.LOST, key=None)], [row("S-1", key="server-made")]).agrees


def test_a_call_whose_reply_was_lost_does_not_explain_two_effects() -> None:
    t = judged([call(Reply.LOST)], [row("S-1"), row("S-2")])
    assert not t.agrees and [r["id"] for r in t.multiplied] == ["S-2"]
    keyless = judged([call(Reply.LOST, key=None)], [row("S-1"), row("S-2")])
    assert not keyless.agrees and [r["id"] for r in keyless.unexplained] == ["S-2"]


def test_a_call_whose_reply_was_lost_does_not_explain_an_effect_of_other_content() -> None:
    t = judged([call(Reply.LOST)], [row("S-1", amount=300)])
    assert not t.agrees and t.changed
    keyless = judged([call(Reply.LOST, key=None)], [row("S-1", subject="O-2", key=None)])
    assert not keyless.agrees and keyless.unexplained


def test_a_reply_without_the_effect_id_may_account_for_one_effect() -> None:
    assert judged([call(Reply.UNACKNOWLEDGED)], [row("S-1")]).agrees


def test_an_effect_committed_after_an_error_reply_disagrees() -> None:
    t = judged([call(Reply.ERROR)], [row("S-1")])
    assert not t.agrees
    assert t.after_error[0]["effect"]["id"] == "S-1"
    assert t.after_error[0]["forwarded"][0]["reply"] == "error"
    keyless = judged([call(Reply.ERROR, key=None)], [row("S-1")])
    assert not keyless.agrees and keyless.after_error


def test_an_error_reply_with_an_id_is_still_a_refusal() -> None:
    t = judged([call(Reply.ERROR, "S-1")], [row("S-1")])
    assert not t.agrees and t.after_error


def test_an_error_reply_of_a_tool_whose_errors_may_commit_explains_one_effect() -> None:
    assert judged([call(Reply.ERROR, errors_may_commit=True)], [row("S-1")]).agrees
    t = judged([call(Reply.ERROR, errors_may_commit=True)], [row("S-1"), row("S-2")])
    assert not t.agrees and t.multiplied


def test_an_error_reply_with_nothing_committed_agrees() -> None:
    assert judged([call(Reply.ERROR)], []).agrees


def test_a_forward_unresolved_at_the_probe_disagrees() -> None:
    t = judged([call(Reply.PENDING)], [])
    assert not t.agrees
    assert [r.reply for r in t.unresolved] == [Reply.PENDING]
    # Its effect, if it already landed, is not also counted as unexplained.
    committed = judged([call(Reply.PENDING)], [row("S-1")])
    assert committed.unresolved and not committed.unexplained


def test_an_effect_no_forwarded_call_made_disagrees() -> None:
    t = judged([], [row("S-forged")])
    assert not t.agrees and [r["id"] for r in t.unexplained] == ["S-forged"]


def test_one_key_on_two_tools_explains_one_effect_each() -> None:
    calls = [call(Reply.LOST, tool="ship_order"), call(Reply.LOST, tool="issue_credit", seq=1)]
    assert judged(calls, [row("S-1"), row("C-1")]).agrees
    assert not judged(calls, [row("S-1"), row("C-1"), row("X-1")]).agrees


def test_a_probe_that_failed_corroborates_nothing() -> None:
    t = witness.testify([], {"effects": []}, {"effects": [], "error": "probe exploded"})
    assert not t.agrees and t.probe_failed == "probe exploded"


def test_the_view_names_every_disagreement() -> None:
    forwarded = [call(Reply.ACKNOWLEDGED, "S-1"), call(Reply.PENDING, key="A-2", seq=1)]
    view = judged(forwarded, [row("S-1", amount=4)]).view(forwarded)
    assert view["agrees"] is False
    assert set(view) >= {
        "rewritten",
        "deleted",
        "forwarded_effects",
        "vanished",
        "changed",
        "multiplied",
        "after_error",
        "unexplained",
        "unresolved",
    }
    assert view["forwarded_effects"][0] == {
        "seq": 0,
        "run": 1,
        "tool": "ship_order",
        "subject": SUBJECT,
        "key": "A-1",
        "amount": 3,
        "reply": "acknowledged",
        "acknowledged": True,
        "id": "S-1",
    }
    assert view["changed"] and view["unresolved"][0]["key"] == "A-2"


# The world before the trial: an earlier shipment and an earlier credit, on other orders.
HISTORY = [
    row("S-0", key="K-0", subject="O-2", amount=1, tool="ship_order"),
    row("C-0", key="K-9", subject="O-3", amount=7, tool="issue_credit"),
]


def shipped(*extra: dict[str, Any], old: list[dict[str, Any]] | None = None) -> witness.Testimony:
    """The testimony on a trial that shipped S-1 (acknowledged) in a world with a history, and
    whose world after also holds `extra` and, instead of the history, `old` when given."""
    after = {"effects": [*(HISTORY if old is None else old), row("S-1", tool="ship_order"), *extra]}
    return witness.testify([call(Reply.ACKNOWLEDGED, "S-1")], {"effects": HISTORY}, after)


def test_rows_that_held_before_the_trial_and_still_hold_agree() -> None:
    assert shipped().agrees


def test_a_row_that_held_before_the_trial_and_was_deleted_disagrees() -> None:
    t = shipped(old=HISTORY[1:])
    assert not t.agrees
    assert t.deleted == [HISTORY[0]] and not t.rewritten


def test_a_row_that_held_before_the_trial_and_was_rewritten_disagrees() -> None:
    inflated = {**HISTORY[1], "amount": 70}
    t = shipped(old=[HISTORY[0], inflated])
    assert not t.agrees
    assert t.rewritten == [{"before": HISTORY[1], "after": inflated}]
    # Its new version is that rewrite, not also an effect no call made.
    assert not (t.deleted or t.unexplained or t.changed or t.multiplied)


def test_a_row_moved_to_the_task_under_an_old_id_is_a_new_effect() -> None:
    moved = {**HISTORY[0], "subject": SUBJECT, "amount": 3}
    assert [e["id"] for e in witness.changes({"effects": HISTORY}, {"effects": [moved]}).new] == [
        "S-0"
    ]
    assert shipped(old=[moved, HISTORY[1]]).rewritten


def test_an_id_held_before_the_trial_hides_no_new_effect() -> None:
    # A second shipment on the task's order, under the id of an earlier credit: every row that
    # held before still holds, and the new one is no forwarded call's.
    shadow = row("C-0", key="A-1-again", tool="ship_order")
    assert witness.changes({"effects": HISTORY}, {"effects": [*HISTORY, shadow]}).new == [shadow]
    t = shipped(shadow)
    assert not t.agrees
    assert t.unexplained == [shadow] and not (t.deleted or t.rewritten)


def test_a_further_copy_of_a_row_that_held_before_the_trial_is_new() -> None:
    copy = dict(HISTORY[0])
    assert witness.changes({"effects": HISTORY}, {"effects": [*HISTORY, copy]}).new == [copy]
    assert not shipped(copy).agrees


def test_a_tool_that_alters_existing_effects_accounts_for_its_subjects_rows() -> None:
    # A cancel acknowledged with the id of the shipment it cancelled (deleted, or zeroed).
    cancel = call(Reply.ACKNOWLEDGED, "S-0", subject="O-2", tool="cancel", alters_existing=True)
    before = {"effects": HISTORY}
    deleted = {"effects": HISTORY[1:]}
    rewritten = {"effects": [{**HISTORY[0], "amount": 0}, HISTORY[1]]}
    assert witness.testify([cancel], before, deleted).agrees
    assert witness.testify([cancel], before, rewritten).agrees
    # The id it acknowledged hides no further row.
    again = row("S-0", subject="O-2", tool="ship_order")
    extra = {"effects": [{**HISTORY[0], "amount": 0}, HISTORY[1], again]}
    assert witness.testify([cancel], before, extra).multiplied == [again]
    # Only its own subject's: the credit on O-3 is not the cancel's to delete.
    assert witness.testify([cancel], before, {"effects": HISTORY[:1]}).deleted == [HISTORY[1]]
    # A tool the contract does not let alter existing effects accounts for none.
    plain = call(Reply.ACKNOWLEDGED, "S-0", subject="O-2", tool="cancel")
    t = witness.testify([plain], before, deleted)
    assert t.deleted == [HISTORY[0]] and [r.id for r in t.vanished] == ["S-0"]


def test_a_refused_call_alters_nothing_unless_its_errors_may_commit() -> None:
    refused = call(Reply.ERROR, subject="O-2", tool="cancel", alters_existing=True)
    before, deleted = {"effects": HISTORY}, {"effects": HISTORY[1:]}
    assert witness.testify([refused], before, deleted).deleted == [HISTORY[0]]
    committed = call(
        Reply.ERROR, subject="O-2", tool="cancel", alters_existing=True, errors_may_commit=True
    )
    assert witness.testify([committed], before, deleted).agrees


def test_a_row_another_tool_made_is_not_the_forwarded_calls_effect() -> None:
    # A credit under the shipment's id, with the shipment's content: the call shipped.
    t = judged([call(Reply.ACKNOWLEDGED, "S-1")], [row("S-1", tool="issue_credit")])
    assert not t.agrees
    assert t.changed[0]["effect"]["tool"] == "issue_credit"
    assert t.changed[0]["forwarded"][0]["tool"] == "ship_order"
    lost = judged([call(Reply.LOST)], [row("S-1", tool="issue_credit")])
    assert not lost.agrees and lost.changed
    assert judged([call(Reply.LOST)], [row("S-1", tool="ship_order")]).agrees


def test_the_row_an_acknowledged_call_made_is_found_among_others_under_its_id() -> None:
    credit, shipment = row("S-1", tool="issue_credit"), row("S-1", tool="ship_order")
    t = judged([call(Reply.ACKNOWLEDGED, "S-1")], [credit, shipment])
    assert t.multiplied == [credit] and not t.changed


def test_a_row_that_does_not_name_its_tool_is_no_calls_where_there_are_several_tools() -> None:
    forwarded, after = [call(Reply.ACKNOWLEDGED, "S-1")], {"effects": [row("S-1")]}
    assert witness.testify(forwarded, {"effects": []}, after).agrees
    t = witness.testify(forwarded, {"effects": []}, after, typed=True)
    assert not t.agrees and t.changed
    named = {"effects": [row("S-1", tool="ship_order")]}
    assert witness.testify(forwarded, {"effects": []}, named, typed=True).agrees
