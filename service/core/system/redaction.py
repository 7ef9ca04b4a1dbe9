"""Blanking a tenant's secrets, and their common encodings, out of whatever leaves a worker.

Code that holds a secret can print it, return it as a claim, or send it as a tool argument; all
of it reaches stored shard results, reports, events and the signed dossier unless it is blanked
first. `Redactor(values)` knows each value as it is, reversed, URL-encoded, hex, base64 and
base64url (at each of the three alignments a value can take inside a longer encoded text), and
each line of a multi-line value (a PEM key) on its own, plain and encoded. It cannot know a value
encrypted, split across fields or leaked through behaviour (timing, which tool is called), nor
an encoding cut short before its first line ends: docs/operations.md. So a message is blanked
where it is made, before it is cut to length, as well as when it is stored.
"""

from __future__ import annotations

import base64
import binascii
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


def needles(value: str) -> set[str]:
    """Every text that gives `value` away, by itself."""
    found = {value, value[::-1], quote(value, safe=""), quote_plus(value)}
    found.add(re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), quote(value, safe="")))
    raw = value.encode()
    found |= {binascii.hexlify(raw).decode(), binascii.hexlify(raw).decode().upper()}
    for b64 in _aligned_base64(raw):
        found |= {b64, b64.replace("+", "-").replace("/", "_")}
    lines = [ln.strip() for ln in value.splitlines() if ln.strip()]
    if len(lines) > 1:
        found.add("".join(lines))
        # Each line on its own, and encoded on its own: an encoding of the whole value cut short
        # (a message kept to its first characters) still holds its first line's.
        for line in lines:
            found |= needles(line)
    return {n for n in found if len(n) >= MIN_NEEDLE}


class Redactor:
    """Blanks the given secret values (and their encodings) from text and JSON-shaped values."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        every: set[str] = set()
        for value in values:
            if value:
                every |= needles(value)
        # Longest first: a value's whole form goes before any line or fragment of it.
        ordered = sorted(every, key=lambda n: (-len(n), n))
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(MASK, text)

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
