"""Blanking a tenant's secrets, and their common encodings, out of whatever leaves a worker.

Code that holds a secret can print it, return it as a claim, or send it as a tool argument; all
of it reaches stored shard results, reports, events and the signed dossier unless it is blanked
first. `Redactor(values)` knows each value as it is, reversed, URL-encoded (`quote` and
`quote_plus`, with `/` encoded or not, either case of hex), hex, base64 and base64url (at each
of the three alignments a value can take inside a longer encoded text, and wrapped into lines
of 16 characters or more, as MIME does at 76 columns and PEM at 64), and each line of a
multi-line value (a PEM key) on its own, plain and encoded. It cannot know a value encrypted,
split across fields or leaked through behaviour (timing, which tool is called), nor an encoding
cut short before its first line ends: docs/operations.md. So a message is blanked
where it is made, before it is cut to length, as well as when it is stored.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

MASK = "[redacted]"
#: Shorter pieces (a line of a PEM value, an encoding's fragment) would blank ordinary text.
MIN_NEEDLE = 6


def _aligned_base64(raw: bytes) -> set[str]:
    """The characters of `raw`'s base64 that depend on it alone, at each alignment: what any
    base64 text holding `raw` at any offset contains."""
    out: set[str] = set()
    for k in range(3):
        text = base64.b64encode(b"\0" * k + raw).decode().rstrip("=")
        first = -(-8 * k // 6)  # ceil: the first character of `raw`'s bits alone
        last = (8 * (k + len(raw)) - 6) // 6
        out.add(text[first : last + 1])
    out.add(base64.b64encode(raw).decode())  # padded, as most encoders write it
    return out


def _url_encoded(value: str) -> set[str]:
    """`quote` and `quote_plus` with `/` left as it is (`quote`'s default) and encoded, each
    with upper- and lower-case hex."""
    found = set()
    for safe in ("", "/"):
        for text in (quote(value, safe=safe), quote_plus(value, safe=safe)):
            found |= {text, re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), text)}
    return found


def encoded(value: str) -> tuple[set[str], set[str]]:
    """Every text that gives `value` away, by itself: the plain and URL-encoded forms, and the
    base64 forms (which an encoder may wrap into lines anywhere: MIME at 76 columns, PEM at 64)."""
    found = {value, value[::-1], *_url_encoded(value)}
    raw = value.encode()
    found |= {binascii.hexlify(raw).decode(), binascii.hexlify(raw).decode().upper()}
    wrappable: set[str] = set()
    for b64 in _aligned_base64(raw):
        wrappable |= {b64, b64.replace("+", "-").replace("/", "_")}
    lines = [ln.strip() for ln in value.splitlines() if ln.strip()]
    if len(lines) > 1:
        found.add("".join(lines))
        # Each line on its own, and encoded on its own: an encoding of the whole value cut short
        # (a message kept to its first characters) still holds its first line's.
        for line in lines:
            plain, wrapped = encoded(line)
            found |= plain
            wrappable |= wrapped
    return (
        {n for n in found if len(n) >= MIN_NEEDLE},
        {n for n in wrappable if len(n) >= MIN_NEEDLE},
    )


def needles(value: str) -> set[str]:
    """Every text that gives `value` away, by itself (each base64 form as one line)."""
    plain, wrapped = encoded(value)
    return plain | wrapped


#: A run of base64 (or base64url) lines, each but the last of at least `WRAP_MIN` characters:
#: where a wrapped encoding hides (MIME wraps at 76 columns, PEM at 64). Ordinary lines of text
#: rarely qualify, so they are not searched twice.
WRAP_MIN = 16
_BLOCK = re.compile(rf"(?:[A-Za-z0-9+/=_-]{{{WRAP_MIN},}}\r?\n)+[A-Za-z0-9+/=_-]+")
_BREAK = re.compile(r"\r?\n")


def _unwrapped(block: str, pattern: re.Pattern[str]) -> str:
    """`block` with each needle found across its line breaks blanked, breaks and all."""
    flat = _BREAK.sub("", block)
    found = [(m.start(), m.end()) for m in pattern.finditer(flat)]
    if not found:
        return block
    # Where each break falls in the flat text, and how much was removed up to it.
    at: list[int] = []
    removed: list[int] = []
    gone = 0
    for m in _BREAK.finditer(block):
        at.append(m.start() - gone)
        gone += m.end() - m.start()
        removed.append(gone)

    def place(flat_index: int) -> int:
        k = bisect.bisect_right(at, flat_index)
        return flat_index + (removed[k - 1] if k else 0)

    out: list[str] = []
    last = 0
    for start, end in found:
        out += [block[last : place(start)], MASK]
        last = place(end - 1) + 1
    out.append(block[last:])
    return "".join(out)


class Redactor:
    """Blanks the given secret values (and their encodings) from text and JSON-shaped values."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        plain: set[str] = set()
        wrappable: set[str] = set()
        for value in values:
            if value:
                found, wrapped = encoded(value)
                plain |= found
                wrappable |= wrapped
        # Longest first: a value's whole form goes before any line or fragment of it.
        ordered = sorted(plain | wrappable, key=lambda n: (-len(n), n))
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        # The base64 forms again, sought in runs of base64 lines once their breaks are gone.
        lines = sorted(wrappable, key=lambda n: (-len(n), n))
        self._lines = re.compile("|".join(map(re.escape, lines))) if lines else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, text: str) -> str:
        if self._pattern is None:
            return text
        text = self._pattern.sub(MASK, text)
        lines = self._lines
        if lines is None or "\n" not in text:
            return text
        # Only a text with a line break can hold a wrapped encoding: the rest never pays for it.
        return _BLOCK.sub(lambda m: _unwrapped(m.group(0), lines), text)

    def value(self, value: Any) -> Any:
        """`value` (dicts, lists, strings; keys too) with every secret blanked; a new object."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value
