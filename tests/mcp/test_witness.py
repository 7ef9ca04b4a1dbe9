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
) -> Forwarded:
    return Forwarded(
        seq=seq,
        run=1,
        tool=tool,
        subject=subject,
        key=key,
        amount=amount,
        errors_may_commit=errors_may_commit,
        reply=reply,
        id=ident,
    )


def row(
    ident: str, *, key: str | None = "A-1", subject: Any = SUBJECT, amount: Any = 3
) -> dict[str, Any]:
    return {"id": ident, "key": key, "subject": subject, "amount": amount}


def judged(
    forwarded: list[Forwarded],
    new: list[dict[str, Any]],
    old: list[dict[str, Any]] | None = None,
) -> witness.Testimony:
    """The testimony on a world that held `old` before the trial and holds `old + new` after."""
    return witness.testify(forwarded, {"effects": [*(old or []), *new]}, new)


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
    t = witness.testify([call(Reply.ACKNOWLEDGED, "S-0")], {"effects": [row("S-0", amount=9)]}, [])
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
    t = witness.testify([], {"effects": [], "error": "probe exploded"}, [])
    assert not t.agrees and t.probe_failed == "probe exploded"


def test_the_view_names_every_disagreement() -> None:
    forwarded = [call(Reply.ACKNOWLEDGED, "S-1"), call(Reply.PENDING, key="A-2", seq=1)]
    view = judged(forwarded, [row("S-1", amount=4)]).view(forwarded)
    assert view["agrees"] is False
    assert set(view) >= {
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
