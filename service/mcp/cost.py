"""A static cost estimate of a CEL predicate, computed from its source before it is compiled.

The `cel` bindings expose no syntax tree and no cost limit, and they evaluate with the GIL held:
a predicate of four nested `.all()` over a 100-element list is 10^8 iterations, minutes of a
frozen process. So a predicate is parsed here (a small recursive-descent parser for CEL's
grammar) and priced the way Kubernetes prices its CEL rules (`k8s.io/apiserver/pkg/apis/cel`:
one unit per node, a comprehension costs its range's size times its body, sizes come from the
declared bounds of the data): a predicate whose worst case is over `PREDICATE_BUDGET` is refused
at submission, before anything compiles or evaluates it.

Sizes: a list or map literal is as long as written; `calls` holds at most `MAX_CALLS` (the proxy
refuses the calls of a trial beyond it), `new_effects` at most `MAX_NEW_EFFECTS` and `claims` at
most `MAX_CLAIMS` (checked when the activation is built); any other list, map or string read
from the world (`task`, `before`, `after`, a call's `arguments` or `reply`) counts as `DATA_SIZE`
long. Strings grow by `+`, lists by `+` and `map`. The world's own data is not bounded by the
gate, so the estimate is an estimate: evaluation also runs in a child process with a deadline
(`service/mcp/cel.py`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# 75-210 ns a unit with the `cel` bindings (measured: 20^4 iterations of a four-operation body,
# 1.96 M units, in 0.42 s; `unsafe_effect` over 128 calls, 674 k units, in 0.05 s): a predicate at
# the budget evaluates in well under half a second. Kubernetes allows 1 M units per expression
# at its ~100 ns a unit.
PREDICATE_BUDGET = 2_000_000
# All of one manifest's invariants together, built-ins included.
MANIFEST_BUDGET = 8_000_000
MAX_PREDICATES = 32
MAX_CALLS = 128
MAX_NEW_EFFECTS = 64
MAX_CLAIMS = 16
DATA_SIZE = 256

MAX_NESTING = 48
# Names that are not variables: literals and type names.
_CONSTANTS = frozenset(
    {"null", "true", "false", "int", "uint", "double", "bool", "string", "bytes", "list", "map"}
    | {"null_type", "type", "dyn", "timestamp", "duration"}
)

COMPREHENSIONS = frozenset({"all", "exists", "exists_one", "map", "filter"})
# Functions whose cost grows with the length of the string (or bytes) they read.
_STRING_FUNCTIONS = frozenset(
    {
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "lowerAscii",
        "upperAscii",
        "replace",
        "split",
        "join",
        "substring",
        "indexOf",
        "lastIndexOf",
        "trim",
        "charAt",
        "string",
        "bytes",
        "format",
    }
)


class CostError(ValueError):
    """The source does not parse here (the message says where) or is over a limit."""


@dataclass(frozen=True)
class Shape:
    """An upper bound on a value's size: list elements, map entries or string characters; and
    the bound of an element (None: any data from the world)."""

    n: int = 0
    elem: Shape | None = None

    def element(self) -> Shape:
        return self.elem if self.elem is not None else DATA


DATA = Shape(DATA_SIZE)
SCALAR = Shape(0)
VARIABLE_SHAPES: dict[str, Shape] = {
    "task": DATA,
    "subject": DATA,
    "expected": Shape(8),
    "before": DATA,
    "after": DATA,
    "new_effects": Shape(MAX_NEW_EFFECTS, DATA),
    "calls": Shape(MAX_CALLS, DATA),
    "claim": DATA,
    "claims": Shape(MAX_CLAIMS, DATA),
    "fault": Shape(128),
}

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+|//[^\n]*)
    |(?P<str>[rRbB]{0,2}(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"
        |'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
    |(?P<num>0[xX][0-9a-fA-F]+[uU]?|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[uU]?)
    |(?P<id>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<op>\|\||&&|==|!=|<=|>=|[-+*/%!<>?:.,()\[\]{}])
    """,
    re.VERBOSE | re.DOTALL,
)


def _tokens(source: str) -> list[tuple[str, str, int]]:
    out: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(source):
        m = _TOKEN.match(source, pos)
        if m is None:
            raise CostError(f"unexpected character at column {pos + 1}")
        kind = m.lastgroup or ""
        if kind != "ws":
            out.append((kind, m.group(), pos))
        pos = m.end()
    out.append(("end", "", len(source)))
    return out


@dataclass(frozen=True)
class _Priced:
    cost: int
    shape: Shape


def _str_cost(*shapes: Shape) -> int:
    return 1 + math.ceil(0.1 * sum(s.n for s in shapes))


def _shorter(a: _Priced, b: _Priced) -> Shape:
    return a.shape if a.shape.n <= b.shape.n else b.shape


class _Parser:
    """Recursive descent over CEL's grammar, pricing each node as it is reduced."""

    def __init__(self, source: str, variables: dict[str, Shape]) -> None:
        self.toks = _tokens(source)
        self.i = 0
        self.scopes: list[dict[str, Shape]] = [variables]
        self.depth = 0
        # Names read that are neither comprehension variables nor constants.
        self.free: set[str] = set()

    # -- tokens ---------------------------------------------------------------------------
    def peek(self, value: str) -> bool:
        kind, text, _ = self.toks[self.i]
        return text == value and kind in ("op", "id")

    def take(self, value: str) -> None:
        kind, text, pos = self.toks[self.i]
        if text != value or kind not in ("op", "id"):
            raise CostError(f"expected {value!r} at column {pos + 1}")
        self.i += 1

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise CostError(f"nested deeper than {MAX_NESTING} levels")

    # -- grammar --------------------------------------------------------------------------
    def expr(self) -> _Priced:
        self._enter()
        cond = self.or_()
        if self.peek("?"):
            self.take("?")
            a = self.or_()
            self.take(":")
            b = self.expr()
            cond = _Priced(
                cond.cost + max(a.cost, b.cost) + 1, Shape(max(a.shape.n, b.shape.n), a.shape.elem)
            )
        self.depth -= 1
        return cond

    def or_(self) -> _Priced:
        left = self.and_()
        while self.peek("||"):
            self.take("||")
            right = self.and_()
            left = _Priced(left.cost + right.cost + 1, SCALAR)
        return left

    def and_(self) -> _Priced:
        left = self.relation()
        while self.peek("&&"):
            self.take("&&")
            right = self.relation()
            left = _Priced(left.cost + right.cost + 1, SCALAR)
        return left

    def relation(self) -> _Priced:
        left = self.addition()
        while any(self.peek(op) for op in ("==", "!=", "<", "<=", ">", ">=", "in")):
            op = self.toks[self.i][1]
            self.i += 1
            right = self.addition()
            # `in` a list scans it; comparing strings, lists or maps reads the shorter side.
            step = 1 + right.shape.n if op == "in" else _str_cost(_shorter(left, right))
            left = _Priced(left.cost + right.cost + step, SCALAR)
        return left

    def addition(self) -> _Priced:
        left = self.multiplication()
        while self.peek("+") or self.peek("-"):
            plus = self.peek("+")
            self.i += 1
            right = self.multiplication()
            if plus:  # string and list concatenation grow; they copy both sides
                shape = Shape(left.shape.n + right.shape.n, left.shape.elem or right.shape.elem)
                left = _Priced(left.cost + right.cost + _str_cost(shape), shape)
            else:
                left = _Priced(left.cost + right.cost + 1, SCALAR)
        return left

    def multiplication(self) -> _Priced:
        left = self.unary()
        while self.peek("*") or self.peek("/") or self.peek("%"):
            self.i += 1
            right = self.unary()
            left = _Priced(left.cost + right.cost + 1, SCALAR)
        return left

    def unary(self) -> _Priced:
        ops = 0
        while self.peek("!") or self.peek("-"):
            self.i += 1
            ops += 1
        inner = self.member()
        return _Priced(inner.cost + ops, inner.shape)

    def member(self) -> _Priced:
        target = self.primary()
        while True:
            if self.peek("."):
                self.take(".")
                kind, name, pos = self.toks[self.i]
                if kind != "id":
                    raise CostError(f"expected a name at column {pos + 1}")
                self.i += 1
                if self.peek("("):
                    target = self.method(target, name)
                else:
                    target = _Priced(target.cost + 1, target.shape.element())
            elif self.peek("["):
                self.take("[")
                index = self.expr()
                self.take("]")
                target = _Priced(target.cost + index.cost + 1, target.shape.element())
            elif self.peek("{"):  # a message literal `a.b.C{f: v}`
                fields = self.inits("}", keyed=True)
                target = _Priced(target.cost + fields.cost, DATA)
            else:
                return target

    def method(self, target: _Priced, name: str) -> _Priced:
        if name in COMPREHENSIONS:
            return self.comprehension(target, name)
        args = self.args()
        cost = target.cost + sum(a.cost for a in args)
        shapes = [target.shape, *(a.shape for a in args)]
        if name == "size":
            return _Priced(cost + 1, SCALAR)
        if name == "split":
            return _Priced(cost + _str_cost(*shapes), Shape(target.shape.n, target.shape))
        if name == "join":
            chars = target.shape.n * max(target.shape.element().n, 1)
            return _Priced(cost + _str_cost(Shape(chars)), Shape(chars))
        if name == "matches":  # a regex walks the string for each part of the pattern
            pattern = args[0].shape.n if args else DATA_SIZE
            return _Priced(cost + _str_cost(Shape(target.shape.n * max(pattern, 1))), SCALAR)
        if name in ("replace", "format"):
            grown = Shape(sum(s.n for s in shapes) * max(args[-1].shape.n if args else 1, 1))
            return _Priced(cost + _str_cost(grown), grown)
        # Other functions (known or not) are charged for reading all of their operands.
        return _Priced(cost + _str_cost(*shapes), Shape(max(s.n for s in shapes)))

    def comprehension(self, target: _Priced, name: str) -> _Priced:
        self.take("(")
        names: list[str] = []
        # `all`, `exists` and `exists_one` may take two variables (`m.all(k, v, p)`); `map` may
        # take a filter before its transform (`l.map(x, p, t)`).
        two = name in ("all", "exists", "exists_one")
        while len(names) < (2 if two else 1):
            kind, text, pos = self.toks[self.i]
            if kind != "id" or self.toks[self.i + 1][1] != ",":
                if names:
                    break
                raise CostError(f"{name}() needs a variable name at column {pos + 1}")
            names.append(text)
            self.i += 2
        elem = target.shape.element()
        self.scopes.append({n: elem for n in names})
        bodies = [self.expr()]
        while self.peek(","):  # `map(x, filter, transform)`
            self.take(",")
            bodies.append(self.expr())
        self.scopes.pop()
        self.take(")")
        per_item = 1 + sum(b.cost for b in bodies)
        cost = target.cost + 1 + max(target.shape.n, 1) * per_item
        if name == "map":
            return _Priced(cost, Shape(target.shape.n, bodies[-1].shape))
        if name == "filter":
            return _Priced(cost, target.shape)
        return _Priced(cost, SCALAR)

    def args(self) -> list[_Priced]:
        self.take("(")
        out: list[_Priced] = []
        if not self.peek(")"):
            out.append(self.expr())
            while self.peek(","):
                self.take(",")
                out.append(self.expr())
        self.take(")")
        return out

    def inits(self, close: str, keyed: bool) -> _Priced:
        """The entries of a list (`keyed=False`) or a map or message literal, priced."""
        self.take("[" if close == "]" else "{")
        cost, count, n = 1, 0, 0
        elem: Shape | None = None
        while not self.peek(close):
            value = self.expr()
            if keyed:
                self.take(":")
                key, value = value, self.expr()
                cost += key.cost
            cost += value.cost
            count += 1
            n = max(n, value.shape.n)
            elem = elem or value.shape.elem
            if not self.peek(","):
                break
            self.take(",")
        self.take(close)
        return _Priced(cost + count, Shape(count, Shape(n, elem)))

    def primary(self) -> _Priced:
        kind, text, pos = self.toks[self.i]
        if kind == "str":
            self.i += 1
            body = text.lstrip("rRbB")
            quote = 3 if body[:3] in ("'''", '"""') else 1
            return _Priced(1, Shape(len(body) - 2 * quote))
        if kind == "num":
            self.i += 1
            return _Priced(1, SCALAR)
        if text == "(":
            self.take("(")
            inner = self.expr()
            self.take(")")
            return inner
        if text == "[":
            return self.inits("]", keyed=False)
        if text == "{":
            return self.inits("}", keyed=True)
        if text == ".":  # a leading dot: the root namespace
            self.take(".")
            kind, text, pos = self.toks[self.i]
        if kind == "id":
            self.i += 1
            if self.peek("("):
                if text == "has":
                    args = self.args()
                    return _Priced(1 + sum(a.cost for a in args), SCALAR)
                args = self.args()
                if not args:
                    return _Priced(1, SCALAR)
                first = _Priced(args[0].cost, args[0].shape)
                return self.method_of(first, text, args[1:])
            for scope in reversed(self.scopes):
                if text in scope:
                    return _Priced(1, scope[text])
            if text not in _CONSTANTS:
                self.free.add(text)
            return _Priced(1, DATA)
        raise CostError(f"unexpected {text!r} at column {pos + 1}" if text else "unexpected end")

    def method_of(self, first: _Priced, name: str, rest: list[_Priced]) -> _Priced:
        """A global call `f(a, b)` priced like the method `a.f(b)`."""
        cost = first.cost + sum(a.cost for a in rest)
        shapes = [first.shape, *(a.shape for a in rest)]
        if name == "size":
            return _Priced(cost + 1, SCALAR)
        return _Priced(cost + _str_cost(*shapes), Shape(max(s.n for s in shapes)))


@dataclass(frozen=True)
class CostEstimate:
    cost: int
    # The names the predicate reads from its activation (or that are undefined).
    names: frozenset[str]


def estimate(source: str, variables: dict[str, Shape] | None = None) -> CostEstimate:
    """The worst-case cost of evaluating `source` once; CostError when it does not parse here."""
    p = _Parser(source, VARIABLE_SHAPES if variables is None else variables)
    priced = p.expr()
    kind, text, pos = p.toks[p.i]
    if kind != "end":
        raise CostError(f"unexpected {text!r} at column {pos + 1}")
    return CostEstimate(priced.cost, frozenset(p.free))
