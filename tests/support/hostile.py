"""What a hostile target may say, as hypothesis strategies: strings with half a UTF-16 surrogate
pair, NUL and other control characters, bidi overrides, huge astral text; numbers that are NaN,
infinite or far beyond 2^53; and JSON-like values nesting them, keys included."""

from __future__ import annotations

from hypothesis import strategies as st

TRICKS = ("\ud800", "\udfff", "\ud83d", "\ude00", "\x00", "\x1b[2J", "\u202e", "\ufeff", "\x85")

hostile_char = st.one_of(
    st.characters(),
    st.characters(categories=["Cs"]),  # lone surrogates: what "\ud800" on the wire becomes
    st.characters(categories=["Cc"]),
    st.characters(min_codepoint=0x10000),
)
hostile_text = st.one_of(
    st.text(hostile_char, max_size=40),
    st.lists(st.sampled_from(TRICKS), min_size=1, max_size=6).map("".join),
    st.text(
        st.characters(min_codepoint=0x1F600, max_codepoint=0x1F64F), min_size=300, max_size=600
    ),
)
hostile_number = st.one_of(
    st.floats(),  # NaN and both infinities among them
    st.integers(),
    st.sampled_from([2**53, -(2**53), 2**64, 10**400, float("nan"), float("inf")]),
)
hostile_value = st.recursive(
    st.one_of(st.none(), st.booleans(), hostile_number, hostile_text),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(hostile_text, inner, max_size=3)
    ),
    max_leaves=8,
)
