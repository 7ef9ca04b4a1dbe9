"""What text Assaygate accepts: one rule for control characters, one pattern for system names.

Control characters. No input anywhere — path, query, header-free form field, JSON body (keys and
values, however deep), manifest — may carry NUL, another C0 control character other than TAB, LF
and CR, DEL, a C1 control character (U+0080–U+009F) or half of a UTF-16 surrogate pair. Names,
versions and revisions are one line: TAB, LF and CR are refused there too (`LINE_PATTERN`).
Free text (a manifest's prompt, a review's reason) may hold tabs and line breaks.

System names. `SYSTEM_NAME_PATTERN`: 1 to 100 ASCII letters, digits, `.`, `_` or `-`, starting
with a letter or a digit — so a name is one URL path segment as it is (never `/`, never `.` or
`..`, never blank) and reads the same in a shell, a URL and a log line.

Text from outside. What a target, runner, hook, server or tool says (claims, reasons, tool
replies, reports, error texts) is not refused but made text where it enters (`as_text`,
`as_texts`, `loads_text`): half a UTF-16 surrogate pair becomes U+FFFD, a pair that arrived as
two halves is joined, NUL becomes U+FFFD. Such text is then valid UTF-8 that PostgreSQL stores
and RFC 8785 canonicalises, so one string can never make a dossier unsealable.
"""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn

from service.core.errors import AssaygateError
from service.core.system.secret import NAME_PATTERN as SECRET_NAME_PATTERN
from service.core.system.secret import NAME_RULE as SECRET_NAME_RULE

#: The characters no input may contain (see the module docstring).
CONTROL_CLASS = "\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f"
#: One line of printable text with at least one character that is not a space.
LINE_PATTERN = "^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\s\\x00-\\x1f\\x7f-\\x9f][^\\x00-\\x1f\\x7f-\\x9f]*$"
#: Free text: anything but the refused control characters.
TEXT_PATTERN = f"^[^{CONTROL_CLASS}]*$"
SYSTEM_NAME_MAX = 100
SYSTEM_NAME_PATTERN = f"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{SYSTEM_NAME_MAX - 1}}}$"
SYSTEM_NAME_RULE = (
    f"a system name is 1 to {SYSTEM_NAME_MAX} letters, digits, '.', '_' or '-', "
    "starting with a letter or a digit"
)
LINE_RULE = "one line of printable text, not blank"
TEXT_RULE = "control characters other than tab and line breaks are not allowed"
#: What each published pattern means, for error messages that name the rule, not the regex.
PATTERN_RULES: dict[str, str] = {
    LINE_PATTERN: LINE_RULE,
    TEXT_PATTERN: TEXT_RULE,
    SYSTEM_NAME_PATTERN: SYSTEM_NAME_RULE,
    SECRET_NAME_PATTERN: SECRET_NAME_RULE,
}

_REFUSED = re.compile(f"[{CONTROL_CLASS}\\ud800-\\udfff]")
_REFUSED_IN_A_LINE = re.compile(f"[\\t\\n\\r{CONTROL_CLASS}\\ud800-\\udfff]")
_SYSTEM_NAME = re.compile(SYSTEM_NAME_PATTERN)


class TextInvalid(AssaygateError):
    """Input that carries a refused control character (or half a surrogate pair)."""

    code = "control_character"


class SystemNameInvalid(AssaygateError):
    code = "system_name_invalid"


def _describe(char: str) -> str:
    if 0xD800 <= ord(char) <= 0xDFFF:
        return f"half a surrogate pair (U+{ord(char):04X}) is not text"
    return f"control character U+{ord(char):04X} is not allowed"


def _join(field: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{field}.{key}" if field else str(key)
    return f"{field}.{key}" if field else key


def check_text(value: object, field: str, *, line: bool = False) -> None:
    """Raise TextInvalid naming the first string in `value` (a JSON-like value: strings, lists,
    dicts, scalars) that holds a refused character; `line=True` refuses TAB, LF and CR too.
    Dict keys are checked as well as values. Walked without recursion."""
    refused = _REFUSED_IN_A_LINE if line else _REFUSED
    stack: list[tuple[object, str]] = [(value, field)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str):
            found = refused.search(node)
            if found is not None:
                raise TextInvalid(_describe(found.group()), field=where or None)
        elif isinstance(node, dict):
            for key, item in node.items():
                name = _join(where, str(key))
                if isinstance(key, str):
                    found = refused.search(key)
                    if found is not None:
                        raise TextInvalid(f"a key: {_describe(found.group())}", field=name)
                stack.append((item, name))
        elif isinstance(node, list | tuple):
            stack.extend((item, _join(where, i)) for i, item in enumerate(node))


def check_system_name(name: str, field: str = "system") -> str:
    """`name` if it is a valid system name, else SystemNameInvalid naming `field`."""
    if not _SYSTEM_NAME.fullmatch(name):
        raise SystemNameInvalid(SYSTEM_NAME_RULE, field=field)
    return name


_UNTEXT = re.compile("[\\x00\\ud800-\\udfff]")
#: What a lone surrogate or a NUL becomes: the Unicode replacement character.
REPLACEMENT = "\ufffd"


def as_text(value: str) -> str:
    """`value` as valid UTF-8 text: a lone surrogate and NUL become U+FFFD (see the module)."""
    if _UNTEXT.search(value) is None:
        return value
    joined = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return joined.replace("\x00", REPLACEMENT)


def as_texts(value: Any) -> Any:
    """A JSON-like value (dicts, lists, tuples, strings, scalars) with every string, keys as
    well as values, made text by `as_text`; tuples come back as lists. Walked without
    recursion, so no depth a parser accepted makes it fail."""
    root: list[Any] = [value]
    stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]
    while stack:
        parent, key, node = stack.pop()
        if isinstance(node, str):
            parent[key] = as_text(node)
        elif isinstance(node, dict):
            copy: dict[Any, Any] = {}
            parent[key] = copy
            for name, item in node.items():
                name = as_text(name) if isinstance(name, str) else name
                copy[name] = None
                stack.append((copy, name, item))
        elif isinstance(node, list | tuple):
            items = list(node)
            parent[key] = items
            stack.extend((items, i, item) for i, item in enumerate(node))
        else:
            parent[key] = node
    return root[0]


def _no_constant(name: str) -> NoReturn:
    raise json.JSONDecodeError(f"{name} is not a JSON number", name, 0)


def loads_text(raw: str | bytes | bytearray) -> Any:
    """Parse JSON from outside: its strings made text (`as_texts`); `NaN` and `Infinity`, which
    JSON does not have, refused as a JSONDecodeError like any other malformed input."""
    return as_texts(json.loads(raw, parse_constant=_no_constant))
