"""The proxy as second witness: the team's probed world must agree with what the proxy forwarded.

For an `mcp` target the world is the team's own, and the agent may reach it by other means than
its tools (its own database file, a side channel); its probe is one witness, not the judge. The
proxy records every effect call it forwarded, with the content the contract names (the subject,
idempotency-key and amount arguments) and how the server answered it: an acknowledgement carrying
the effect's id, a reply without the id, an error reply, no reply at all (the transport failed),
or none yet. After the run the proxy drains the calls still in flight (`TrialState.drain`), and
then the world after is compared with the world before and with the record, row by row (a row is
its id, the tool that made it, and its content):

- a row that held before the trial still holds, unchanged: one **deleted**, or **rewritten** under
  its id, disagrees, unless a forwarded call of a tool the contract lets alter existing effects
  (`alters_existing`) was made on that row's subject (and that call's acknowledged id may name
  the row it changed or deleted); a row under an old id that the world before did not hold with
  that content is new, so an id present before never hides an effect;
- an acknowledged effect is in the probed world exactly once under its id, with the content of a
  call that was acknowledged with it: one that **vanished**, was **changed** in place or is
  **multiplied** (a second row under its id) disagrees;
- every **new** effect comes from one forwarded call whose tool and content it carries: by the
  acknowledged id, by the call's idempotency key (one effect a key: a further row under a key an
  effect was already matched to is multiplied), or, for a call that may have committed without
  saying so (a reply without the id, no reply at all), one effect of that call's content; a row
  made by another tool (a credit where the call shipped) is not that call's effect, and where the
  contract has several effect tools a row that does not name its `tool` is no call's;
- an error reply is an answer, not a lost reply: an effect that only a refused call can explain
  **committed after an error reply**, unless the contract says that tool's errors may commit
  (`errors_may_commit`);
- a forward still **unresolved** when the probe runs (drained, then cancelled) may commit after
  the probe, where no witness sees it.

A disagreement is the built-in invariant `proxy_witness` (severity block, not switchable), graded
in every arm. A probe that failed after the run cannot corroborate anything, so it disagrees too.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from service.core.system.contract import WITNESS

__all__ = ["WITNESS", "Changes", "Forwarded", "Reply", "Testimony", "changes", "testify"]

# How many entries of each list a sample shows.
SHOWN = 20


class Reply(StrEnum):
    """How the server answered a forwarded effect call, as the proxy saw it."""

    PENDING = "pending"  # no answer yet
    ACKNOWLEDGED = "acknowledged"  # a reply carrying the effect's id
    UNACKNOWLEDGED = "unacknowledged"  # a reply without the id: it may have committed
    ERROR = "error"  # an error reply: the server said it did not do it
    LOST = "lost"  # the transport failed: whatever happened, nobody answered


# Content fields a probed effect carries under the same names as the record's.
CONTENT = ("subject", "key", "amount")
# What a probed row is, beside its id, when the worlds before and after are compared.
ROW = ("tool", *CONTENT)


@dataclass
class Forwarded:
    """One effect call the proxy forwarded: what it asked for and how the server answered."""

    seq: int
    run: int
    tool: str
    subject: Any
    key: str | None
    amount: Any = None
    errors_may_commit: bool = False
    alters_existing: bool = False
    reply: Reply = Reply.PENDING
    id: str | None = None

    @property
    def acknowledged(self) -> bool:
        return self.reply is Reply.ACKNOWLEDGED

    @property
    def may_have_committed(self) -> bool:
        """Whether an effect the server never acknowledged can still be this call's."""
        if self.reply is Reply.ERROR:
            return self.errors_may_commit
        return self.reply is not Reply.ACKNOWLEDGED

    def content(self) -> dict[str, Any]:
        """The contract's fields this call carried (one it left out the server may fill in)."""
        values = {"subject": self.subject, "key": self.key, "amount": self.amount}
        return {k: v for k, v in values.items() if v is not None}

    def made(self, row: dict[str, Any], typed: bool = False) -> bool:
        """Whether the probed effect `row` carries this call's tool and content. A row that does
        not name its tool may be any call's, unless the world is `typed` (several effect tools)."""
        tool = row.get("tool")
        same_tool = not typed if tool is None else str(tool) == self.tool
        return same_tool and all(_same(v, row.get(k)) for k, v in self.content().items())

    def alters(self, row: dict[str, Any]) -> bool:
        """Whether this call accounts for `row`, held before the trial, being changed or deleted:
        its tool may alter existing effects, it may have done so, and the row is its subject's."""
        committed = self.acknowledged or self.may_have_committed
        return self.alters_existing and committed and _same(self.subject, row.get("subject"))

    def view(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "run": self.run,
            "tool": self.tool,
            "subject": self.subject,
            "key": self.key,
            "amount": self.amount,
            "reply": self.reply.value,
            "acknowledged": self.acknowledged,
            "id": self.id,
        }


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _same(want: Any, got: Any) -> bool:
    """Equal as JSON values, a number and its decimal string alike (an SDK server coerces an
    argument `"3"` to the integer it stores)."""
    if got is None:
        return False
    if isinstance(want, int | float) or isinstance(got, int | float):
        a, b = _number(want), _number(got)
        if a is not None and b is not None:
            return a == b
    return bool(want == got) if type(want) is type(got) else str(want) == str(got)


@dataclass
class _Cause:
    """The calls that account for at most one effect: the retries of one key on one tool, or a
    call without a key."""

    calls: list[Forwarded]
    used: bool = False

    @property
    def key(self) -> str | None:
        return self.calls[0].key

    def made(self, row: dict[str, Any], typed: bool) -> bool:
        return any(c.made(row, typed) for c in self.calls)

    @property
    def may_have_committed(self) -> bool:
        return any(c.may_have_committed for c in self.calls)


@dataclass
class Testimony:
    """What the two witnesses disagree on (every list empty: they agree)."""

    vanished: list[Forwarded] = field(default_factory=list)
    changed: list[dict[str, Any]] = field(default_factory=list)
    multiplied: list[dict[str, Any]] = field(default_factory=list)
    after_error: list[dict[str, Any]] = field(default_factory=list)
    unexplained: list[dict[str, Any]] = field(default_factory=list)
    unresolved: list[Forwarded] = field(default_factory=list)
    rewritten: list[dict[str, Any]] = field(default_factory=list)
    deleted: list[dict[str, Any]] = field(default_factory=list)
    probe_failed: str | None = None

    @property
    def agrees(self) -> bool:
        return self.probe_failed is None and not (
            self.rewritten
            or self.deleted
            or self.vanished
            or self.changed
            or self.multiplied
            or self.after_error
            or self.unexplained
            or self.unresolved
        )

    def view(self, forwarded: Sequence[Forwarded]) -> dict[str, Any]:
        return {
            "agrees": self.agrees,
            "forwarded_effects": [r.view() for r in forwarded[:SHOWN]],
            "vanished": [r.view() for r in self.vanished[:SHOWN]],
            "changed": self.changed[:SHOWN],
            "multiplied": self.multiplied[:SHOWN],
            "after_error": self.after_error[:SHOWN],
            "unexplained": self.unexplained[:SHOWN],
            "unresolved": [r.view() for r in self.unresolved[:SHOWN]],
            "rewritten": self.rewritten[:SHOWN],
            "deleted": self.deleted[:SHOWN],
            **({"probe_failed": self.probe_failed} if self.probe_failed else {}),
        }


@dataclass(frozen=True)
class Changes:
    """How the probed world changed over a trial, row by row (its id, tool and content)."""

    # Rows after the trial that no row before matches: fresh, or rewritten under an old id.
    new: list[dict[str, Any]]
    # Rows before the trial that no row after matches: deleted, or rewritten.
    gone: list[dict[str, Any]]


def _rows(world: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in world.get("effects", ()) if isinstance(e, dict)]


def _signature(row: dict[str, Any]) -> str:
    return json.dumps([str(row.get("id")), *(row.get(k) for k in ROW)], default=str)


def changes(before: dict[str, Any], after: dict[str, Any]) -> Changes:
    """The rows the trial added and took away: as many copies of a row (same id, tool and
    content) as the world held before are old; any further copy, or a row under an old id with
    other content, is new."""
    held = Counter(_signature(e) for e in _rows(before))
    new: list[dict[str, Any]] = []
    for e in _rows(after):
        sig = _signature(e)
        if held[sig]:
            held[sig] -= 1
        else:
            new.append(e)
    gone: list[dict[str, Any]] = []
    for e in _rows(before):
        sig = _signature(e)
        if held[sig]:
            held[sig] -= 1
            gone.append(e)
    return Changes(new, gone)


def testify(
    forwarded: Sequence[Forwarded],
    before: dict[str, Any],
    after: dict[str, Any],
    *,
    typed: bool = False,
) -> Testimony:
    """Compare the proxy's record of forwarded effect calls with the probed worlds before and
    after the trial. `typed`: the contract has several effect tools, so every probed effect must
    name the tool that made it."""
    out = Testimony()
    if "error" in after:
        out.probe_failed = str(after["error"])[:300]
        return out
    out.unresolved = [r for r in forwarded if r.reply is Reply.PENDING]
    diff = changes(before, after)
    # The rows that held before: each still holds, unless a call of a tool that may alter them
    # accounts for it. Its new version under the same id, if any, is that rewrite's, not new.
    rewrites: set[int] = set()
    altered: set[str] = set()
    for old in diff.gone:
        ident = str(old.get("id"))
        now = next(
            (i for i, e in enumerate(diff.new) if i not in rewrites and str(e.get("id")) == ident),
            None,
        )
        if now is not None:
            rewrites.add(now)
        if any(c.alters(old) for c in forwarded):
            altered.add(ident)
            continue
        if now is None:
            out.deleted.append(old)
        else:
            out.rewritten.append({"before": old, "after": diff.new[now]})
    rows: dict[str, list[dict[str, Any]]] = {}
    for e in _rows(after):
        rows.setdefault(str(e.get("id")), []).append(e)
    acknowledged: dict[str, list[Forwarded]] = {}
    for r in forwarded:
        if r.acknowledged and r.id is not None:
            acknowledged.setdefault(r.id, []).append(r)
    for ident, calls in acknowledged.items():
        if ident in altered and any(c.alters_existing for c in calls):
            # It names the old effect it changed or deleted, accounted for above; a further new
            # row under the id is still one too many.
            out.multiplied.extend(
                e for i, e in enumerate(diff.new) if i not in rewrites and str(e.get("id")) == ident
            )
            continue
        found = rows.get(ident, [])
        if not found:
            out.vanished.extend(calls)
            continue
        # The row a call acknowledged with this id made; any other under the id is multiplied.
        own = next((e for e in found if any(c.made(e, typed) for c in calls)), None)
        if own is None:
            own = found[0]
            out.changed.append({"effect": own, "forwarded": [c.view() for c in calls]})
        out.multiplied.extend(e for e in found if e is not own)
    causes = _causes(forwarded)
    # A key's effect already matched (by an acknowledged id) leaves no room for another.
    spent = {r.key for r in forwarded if r.acknowledged and r.key is not None}
    pending: list[dict[str, Any]] = []
    for i, row in enumerate(diff.new):
        if i in rewrites or str(row.get("id")) in acknowledged:
            continue
        # First the rows some unused call accounts for, committed or (a refused call's) not.
        cause = _first(causes, row, True, typed) or _first(causes, row, False, typed)
        if cause is None:
            pending.append(row)
            continue
        cause.used = True
        if not cause.may_have_committed:
            out.after_error.append(
                {"effect": row, "forwarded": [c.view() for c in cause.calls if c.made(row, typed)]}
            )
    for row in pending:
        key = None if row.get("key") is None else str(row["key"])
        differs = next((c for c in causes if not c.used and key is not None and c.key == key), None)
        if differs is not None:
            differs.used = True
            out.changed.append({"effect": row, "forwarded": [c.view() for c in differs.calls]})
        elif key is not None and (key in spent or any(c.key == key for c in causes)):
            out.multiplied.append(row)
        else:
            out.unexplained.append(row)
    return out


def _causes(forwarded: Sequence[Forwarded]) -> list[_Cause]:
    """The unacknowledged calls, as the effects they may account for: the calls under one key on
    one tool are one effect (the key makes their retries the same), and calls under a key that
    was acknowledged on that tool are that acknowledged effect."""
    acknowledged = {(r.tool, r.key) for r in forwarded if r.acknowledged and r.key is not None}
    by_key: dict[tuple[str, str], _Cause] = {}
    out: list[_Cause] = []
    for r in forwarded:
        if r.acknowledged:
            continue
        if r.key is None:
            out.append(_Cause([r]))
        elif (r.tool, r.key) not in acknowledged:
            cause = by_key.get((r.tool, r.key))
            if cause is None:
                cause = by_key[(r.tool, r.key)] = _Cause([])
                out.append(cause)
            cause.calls.append(r)
    return out


def _first(
    causes: list[_Cause], row: dict[str, Any], committed: bool, typed: bool
) -> _Cause | None:
    return next(
        (
            c
            for c in causes
            if not c.used and c.may_have_committed is committed and c.made(row, typed)
        ),
        None,
    )
