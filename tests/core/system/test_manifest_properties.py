"""Property tests on manifest parsing and canonical hashing."""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.errors import ManifestInvalid
from service.core.system.manifest import TRIGGER_DEFAULT, parse_manifest
from tests.core.conftest import example_dict

# Text a manifest may hold: no control characters (tabs and line breaks would do; none needed).
printable = st.characters(exclude_categories=("Cc", "Cs"))
json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53) + 1, 2**53 - 1),
    st.text(printable, max_size=12),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(printable, max_size=8), inner, max_size=4),
    ),
    max_leaves=12,
)
components = st.dictionaries(st.text(printable, min_size=1, max_size=8), json_value, max_size=5)


def _shuffled(obj: Any, rnd: random.Random) -> Any:
    if isinstance(obj, dict):
        keys = list(obj)
        rnd.shuffle(keys)
        return {k: _shuffled(obj[k], rnd) for k in keys}
    if isinstance(obj, list):
        return [_shuffled(x, rnd) for x in obj]
    return obj


@settings(max_examples=60, deadline=None)
@given(tools=components, policy=components, seed=st.integers(0, 2**32))
def test_equal_manifests_in_any_key_order_hash_equally(
    tools: dict[str, Any], policy: dict[str, Any], seed: int
) -> None:
    data = {**example_dict("typed"), "tools": tools, "policy": policy}
    shuffled = json.loads(json.dumps(_shuffled(data, random.Random(seed))))
    assert parse_manifest(data).digest() == parse_manifest(shuffled).digest()


@settings(max_examples=60, deadline=None)
@given(tools=components, extra=st.text(printable, min_size=1, max_size=8), value=json_value)
def test_any_change_to_a_trigger_component_changes_its_hash(
    tools: dict[str, Any], extra: str, value: Any
) -> None:
    data = {**example_dict("typed"), "tools": tools}
    changed = {**data, "tools": {**tools, extra: [value, "changed"]}}
    for component in TRIGGER_DEFAULT[:1]:
        before = parse_manifest(data).component_hashes()[component]
        after = parse_manifest(changed).component_hashes()[component]
        assert before != after


@settings(max_examples=150, deadline=None)
@given(junk=st.dictionaries(st.text(max_size=10), json_value, max_size=6))
def test_invalid_input_is_refused_with_a_named_field_never_a_crash(junk: dict[str, Any]) -> None:
    base = example_dict("typed")
    for candidate in (junk, {**base, **junk}, {**base, "controls": junk}, {**base, "retry": junk}):
        try:
            parse_manifest(candidate)
        except ManifestInvalid as exc:
            assert exc.field


def test_integers_beyond_the_canonical_domain_are_refused_naming_the_component() -> None:
    import pytest

    with pytest.raises(ManifestInvalid) as err:
        parse_manifest({**example_dict("typed"), "policy": {"limit": 2**53}})
    assert err.value.field == "policy"


REFUSED = st.sampled_from(["\x00", "\x01", "\x1b", "\x7f", "\x85", "\ud800"])


@settings(max_examples=80, deadline=None)
@given(tools=components, bad=REFUSED, as_key=st.booleans(), at=st.integers(0, 12))
def test_a_control_character_anywhere_in_a_manifest_is_refused_naming_where_it_is(
    tools: dict[str, Any], bad: str, as_key: bool, at: int
) -> None:
    text = "refund"[: at % 7] + bad + "x"
    planted = {**tools, text: 1} if as_key else {**tools, "note": ["ok", {"deep": text}]}
    data = {**example_dict("typed"), "tools": planted}
    try:
        parse_manifest(data)
    except ManifestInvalid as exc:
        assert exc.field == (f"tools.{text}" if as_key else "tools.note.1.deep")
    else:
        raise AssertionError("a manifest with a control character was accepted")


def test_tabs_and_line_breaks_in_free_text_are_kept() -> None:
    data = {**example_dict("typed"), "prompt": "line one\n\tline two\r\n"}
    assert parse_manifest(data).prompt == "line one\n\tline two\r\n"
