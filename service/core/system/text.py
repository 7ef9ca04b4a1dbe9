"""What text Assaygate accepts: one rule for control characters, one pattern for system names.

Control characters. No input anywhere — path, query, header-free form field, JSON body (keys and
values, however deep), manifest — may carry NUL, another C0 control character other than TAB, LF
and CR, DEL, a C1 control character (U+0080–U+009F) or half of a UTF-16 surrogate pair. Names,
versions and revisions are one line: TAB, LF and CR are refused there too (`LINE_PATTERN`).
Free text (a manifest's prompt, a review's reason) may hold tabs and line breaks.

System names. `SYSTEM_NAME_PATTERN`: 1 to 100 ASCII letters, digits, `.`, `_` or `-`, starting
with a letter or a digit — so a name is one URL path segment as it is (never `/`, never `.` or
`..`, never blank) and reads the same in a shell, a URL and a log line.
"""

from __future__ import annotations

import re

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
