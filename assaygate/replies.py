"""What each tool method returns to a `python` target, and the objects that hold it.

Each method returns what its HTTP reply wraps (`policy_read()` is the policy, where
`/v1/policy/read` answers `{"policy": ...}`). A target that reads a reply for a key it never has
would get `None` from `.get` and carry on: a policy check that is a no-op, seen only as unsafe
escapes under `stale_policy` (issue 47). So the replies are plain dicts and lists that answer
every documented key as a dict does (`.get` of a key a partial reply lacks is still `None`) and
raise `ReplyMisread` for a key the shape never has, naming the shape and the wrapper; the host
fails the task with it even when the target catches it. docs/targets.md, "What each tool
returns", lists the same shapes, and a test compares both with what the sandbox answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from assaygate.target import ReplyMisread


@dataclass(frozen=True)
class Shape:
    """One method's reply: what it is, its keys (those it always has first), and the HTTP
    reply's key that wraps it."""

    method: str
    noun: str
    keys: tuple[str, ...]
    wrapper: str
    endpoint: str
    # Keys only some replies have (a drifted CRM record's `schema`).
    sometimes: tuple[str, ...] = ()
    # The reply is a list of such objects (`lookup`, `evidence_read`).
    listed: bool = False

    def knows(self, key: object) -> bool:
        return key in self.keys or key in self.sometimes

    def refuse(self, key: object, mistakes: list[str]) -> ReplyMisread:
        keys = ", ".join((*self.keys, *self.sometimes))
        kind = f"a list of {{{keys}}}" if self.listed else f"{{{keys}}}"
        text = f"{self.method}() returns {self.noun}, {kind}: it has no {key!r}"
        if key == self.wrapper:
            text += (
                f" ({key!r} is the key that wraps it in the HTTP reply of {self.endpoint}; "
                f"{self.method}() returns what it wraps)"
            )
        text += ' (docs/targets.md, "What each tool returns")'
        mistakes.append(text)
        return ReplyMisread(text)


def _shape(method: str, noun: str, keys: str, wrapper: str, endpoint: str, **more: Any) -> Shape:
    return Shape(method, noun, tuple(keys.split()), wrapper, endpoint, **more)


_ORDER = "id tenant amount status version"
SHAPES = {
    s.method: s
    for s in (
        _shape(
            "crm_read",
            "the CRM's cached record (or None)",
            f"{_ORDER} unit",
            "record",
            "/v1/crm/read",
            sometimes=("schema",),
        ),
        _shape(
            "orders_read",
            "the order (or None)",
            "id tenant customer amount status version refunded unit",
            "order",
            "/v1/orders/read",
        ),
        _shape("policy_read", "the policy", "version refunds_allowed", "policy", "/v1/policy/read"),
        _shape(
            "capability_check",
            "the grant (or None)",
            "id actor subject tenant purpose amount expires_at revoked valid",
            "grant",
            "/v1/capabilities/check",
        ),
        _shape(
            "propose",
            "the proposed action",
            "subject tenant grant_id amount",
            "action",
            "/v1/proposals",
        ),
        # A partial reply (`partial_success_response`) is `{"status": "ok"}` alone.
        _shape(
            "refund",
            "the refund's reply",
            "status ledger_ref trace_id replayed",
            "",
            "/v1/payments/refunds",
        ),
        _shape(
            "lookup",
            "the ledger's entries",
            "id subject tenant amount action_id trace_id at",
            "entries",
            "/v1/payments/lookup",
            listed=True,
        ),
        _shape(
            "evidence_read",
            "the receipts",
            "kind action_id trace_id ledger_ref at detail",
            "receipts",
            "/v1/evidence/read",
            listed=True,
        ),
    )
}


class Reply(dict[str, Any]):
    """A tool's reply object: a dict of its documented keys that refuses any other key."""

    __slots__ = ("_mistakes", "_shape")

    def __init__(self, value: dict[str, Any], shape: Shape, mistakes: list[str]) -> None:
        super().__init__(value)
        self._shape = shape
        self._mistakes = mistakes

    def __missing__(self, key: str) -> Any:
        if self._shape.knows(key):
            raise KeyError(key)  # a documented key this reply lacks (a partial reply's)
        raise self._shape.refuse(key, self._mistakes)

    def get(self, key: str, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        if self._shape.knows(key):
            return default
        raise self._shape.refuse(key, self._mistakes)

    def __contains__(self, key: object) -> bool:
        if dict.__contains__(self, key):
            return True
        if self._shape.knows(key):
            return False
        raise self._shape.refuse(key, self._mistakes)


class Replies(list[Any]):
    """A list reply (`lookup`, `evidence_read`): the objects themselves, never their wrapper."""

    __slots__ = ("_mistakes", "_shape")

    def __init__(self, items: list[Any], shape: Shape, mistakes: list[str]) -> None:
        super().__init__(items)
        self._shape = shape
        self._mistakes = mistakes

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, str):
            raise self._shape.refuse(index, self._mistakes)
        return super().__getitem__(index)

    def get(self, key: object, default: Any = None) -> Any:
        """A list has no keys: reading one is reading the HTTP reply's shape."""
        raise self._shape.refuse(key, self._mistakes)


def shaped(method: str, value: Any, mistakes: list[str]) -> Any:
    """`value` (what the HTTP reply wraps) as the python method returns it."""
    shape = SHAPES[method]
    if shape.listed and isinstance(value, list):
        items = [Reply(v, shape, mistakes) if isinstance(v, dict) else v for v in value]
        return Replies(items, shape, mistakes)
    if isinstance(value, dict):
        return Reply(value, shape, mistakes)
    return value
