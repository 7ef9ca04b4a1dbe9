"""The one rule for control characters and the one pattern for system names."""

from __future__ import annotations

import pytest

from service.core.system.text import SystemNameInvalid, TextInvalid, check_system_name, check_text


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
