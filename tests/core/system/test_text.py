"""The one rule for control characters and the one pattern for system names; text from outside
made valid where it enters, fuzzed with what a hostile target may say."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings

from service.core.errors import EvidenceUnsealable
from service.core.signing.dossier import sealable
from service.core.system.text import (
    SystemNameInvalid,
    TextInvalid,
    as_text,
    as_texts,
    check_system_name,
    check_text,
    loads_text,
)
from tests.support.hostile import hostile_text, hostile_value


@pytest.mark.parametrize(
    "name", ["copperfin-returns", "a", "A.b_c-9", "9lives", "x" * 100, "v1.2.3"]
)
def test_a_system_name_of_letters_digits_dots_underscores_and_dashes_is_accepted(
    name: str,
) -> None:
    assert check_system_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", " ", "   ", "a/b", "/", ".", "..", ".x", "-x", "_x", "a b", "a\nb", "x\n", "ü", "x" * 101],
)
def test_a_system_name_with_a_slash_a_space_or_only_whitespace_is_refused(name: str) -> None:
    with pytest.raises(SystemNameInvalid) as err:
        check_system_name(name)
    assert err.value.field == "system"


def test_the_first_refused_character_is_named_by_its_path() -> None:
    with pytest.raises(TextInvalid) as err:
        check_text({"plan": {"modes": ["ok", "b\x00d"]}}, "")
    assert err.value.field == "plan.modes.1"
    assert "U+0000" in err.value.message
    with pytest.raises(TextInvalid) as err:
        check_text({"bad\x07key": 1}, "body")
    assert err.value.field == "body.bad\x07key"


def test_free_text_keeps_tabs_and_line_breaks_but_a_line_does_not() -> None:
    check_text({"reason": "one\n\ttwo\r\n"}, "")
    with pytest.raises(TextInvalid):
        check_text("one\ntwo", "version", line=True)


@pytest.mark.parametrize("char", ["\x00", "\x08", "\x0b", "\x1f", "\x7f", "\x80", "\x9f", "\ud800"])
def test_nul_other_controls_and_half_surrogates_are_refused_everywhere(char: str) -> None:
    with pytest.raises(TextInvalid):
        check_text(f"a{char}b", "x")
    with pytest.raises(TextInvalid):
        check_text(f"a{char}b", "x", line=True)


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings(key)
            yield from strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings(item)


def test_half_a_surrogate_pair_and_nul_become_the_replacement_character() -> None:
    assert as_text("claim \ud800 \x00!") == "claim \ufffd \ufffd!"
    # Two halves that make a pair are one character, as the sender meant.
    assert as_text("\ud83d\ude00") == "\U0001f600"
    assert loads_text(b'{"reason": "\\ud800\\u0000"}') == {"reason": "\ufffd\ufffd"}


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_a_number_json_does_not_have_is_malformed_input(token: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        loads_text(f'{{"cost": {token}}}')


@settings(max_examples=150, deadline=None)
@given(hostile_value)
def test_whatever_a_target_says_is_utf_8_without_nul_once_it_enters(value: Any) -> None:
    cleaned = as_texts(value)
    for text in strings(cleaned):
        text.encode("utf-8")
        assert "\x00" not in text
    # Text that was valid already is left as it is, and so is every number.
    if all(as_text(text) == text for text in strings(value)):
        assert repr(cleaned) == repr(value)


@settings(max_examples=100, deadline=None)
@given(hostile_text)
def test_a_string_sent_as_json_escapes_arrives_as_the_same_text_made_valid(text: str) -> None:
    wire = json.dumps({"claim": {"reason": text}})  # ASCII escapes, as an agent may send them
    assert loads_text(wire.encode()) == {"claim": {"reason": as_text(text)}}


@settings(max_examples=120, deadline=None)
@given(hostile_value)
def test_a_result_either_has_canonical_bytes_or_is_refused_as_unsealable(value: Any) -> None:
    payload = {"samples": [as_texts(value)]}
    try:
        canonical = sealable(payload, "the result")
    except EvidenceUnsealable as refused:
        assert str(refused).startswith("the result: no RFC 8785 form:")
        numbers = [n for n in _numbers(value) if not _i_json(n)]
        assert numbers, (refused, value)
        return
    # The same value back, numbers read as JSON reads them (RFC 8785 writes 1e+16 as digits).
    assert _floats(json.loads(canonical)) == _floats(payload)


def _floats(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dict):
        return {key: _floats(item) for key, item in value.items()}
    return [_floats(item) for item in value]


def _numbers(value: Any) -> Iterator[int | float]:
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _numbers(item)


def _i_json(number: int | float) -> bool:
    """A number RFC 8785 (I-JSON) canonicalises: finite, and an integer within 2^53."""
    if isinstance(number, float):
        return math.isfinite(number)
    return abs(number) < 2**53
