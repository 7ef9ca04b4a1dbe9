"""The redactor: a secret, in each of its common encodings, is blanked wherever it appears."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.system.redaction import MASK, Redactor

SECRET = "sk-live-Zq9/+x&y=7 token"
PEM = (
    "-----BEGIN PRIVATE KEY-----\n"
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n"
    "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n"
    "-----END PRIVATE KEY-----\n"
)

ENCODINGS = {
    "plain": SECRET,
    "reversed": SECRET[::-1],
    "url-encoded": quote(SECRET, safe=""),
    "hex": binascii.hexlify(SECRET.encode()).decode(),
    "HEX": binascii.hexlify(SECRET.encode()).decode().upper(),
    "base64": base64.b64encode(SECRET.encode()).decode(),
    "base64url": base64.urlsafe_b64encode(SECRET.encode()).decode().rstrip("="),
}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_secret_is_blanked_in_each_encoding_inside_other_text(encoding: str) -> None:
    text = f"error: upstream said {ENCODINGS[encoding]}; retrying"
    out = Redactor([SECRET]).text(text)
    assert ENCODINGS[encoding] not in out and MASK in out, out
    assert out.startswith("error: upstream said ")


@pytest.mark.parametrize("prefix", ["", "a", "ab"])
def test_a_secret_base64_encoded_at_any_offset_of_a_longer_text_is_blanked(prefix: str) -> None:
    blob = base64.b64encode(f"{prefix}key={SECRET}&end".encode()).decode()
    out = Redactor([SECRET]).text(blob)
    assert MASK in out and len(out.replace(MASK, "")) < len(blob) - len(SECRET)


def test_every_line_of_a_multi_line_secret_is_blanked_on_its_own() -> None:
    redactor = Redactor([PEM])
    lines = PEM.splitlines()
    out = redactor.text(f"stderr tail: {lines[1]}")
    assert lines[1] not in out
    assert lines[2] not in redactor.text(lines[2] + " was the key")


def test_claims_tool_arguments_and_keys_are_blanked_in_a_json_shaped_value() -> None:
    value = {"claim": {"note": SECRET}, SECRET: [1, {"arguments": {"k": ENCODINGS["hex"]}}]}
    out = Redactor([SECRET]).value(value)
    assert SECRET not in str(out) and ENCODINGS["hex"] not in str(out)
    assert out["claim"] == {"note": MASK} and out[MASK][0] == 1


def test_without_secrets_nothing_changes_and_short_values_blank_no_ordinary_text() -> None:
    assert Redactor().value({"a": "b"}) == {"a": "b"} and not Redactor()
    assert Redactor(["abc"]).text("abcdef abc") == "abcdef abc"


@pytest.mark.parametrize("encode", [binascii.hexlify, base64.b64encode], ids=["hex", "base64"])
def test_an_encoding_of_a_multi_line_secret_cut_short_gives_away_none_of_its_first_line(
    encode: Callable[[bytes], bytes],
) -> None:
    """A report keeps a message's first characters: the whole value's encoding is cut, and what
    is left still holds the first line's encoding."""
    value = "sk-leak-7Hq2Zp9Xw4Lm\n" + PEM
    whole = encode(value.encode()).decode()
    first = encode(value.splitlines()[0].encode()).decode().rstrip("=")
    cut = f"TargetRaised: RuntimeError: {whole}"[:120]
    assert first in cut
    assert first not in Redactor([value]).text(cut)


# ------------------------------------------------- every form the docs name, for any secret


def wrap(text: str, width: int, newline: str = "\n") -> str:
    return newline.join(text[i : i + width] for i in range(0, len(text), width))


def lower_hex(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), text)


#: Each form docs/operations.md says is redacted, as a standard library encoder writes it.
FORMS: dict[str, Callable[[str], str]] = {
    "plain": lambda v: v,
    "reversed": lambda v: v[::-1],
    "quote, / kept": quote,
    "quote, / encoded": lambda v: quote(v, safe=""),
    "quote, lower-case hex": lambda v: lower_hex(quote(v)),
    "quote_plus": quote_plus,
    "quote_plus, / kept": lambda v: quote_plus(v, safe="/"),
    "hex": lambda v: binascii.hexlify(v.encode()).decode(),
    "HEX": lambda v: binascii.hexlify(v.encode()).decode().upper(),
    "base64": lambda v: base64.b64encode(v.encode()).decode(),
    "base64url": lambda v: base64.urlsafe_b64encode(v.encode()).decode().rstrip("="),
    "MIME base64 (76 columns)": lambda v: base64.encodebytes(v.encode()).decode(),
    "PEM base64 (64 columns, CRLF)": lambda v: wrap(
        base64.b64encode(v.encode()).decode(), 64, "\r\n"
    ),
}
#: Secrets of every kind of character a key holds, `/` among the likeliest.
secrets = st.text(
    st.one_of(
        st.sampled_from("/+=&%?#:@ -_.~"),
        st.characters(exclude_categories=("Cs",)),
    ),
    min_size=6,
    max_size=120,
)


@given(
    secret=secrets, form=st.sampled_from(sorted(FORMS)), before=st.sampled_from(["", "x ", "a\n"])
)
@settings(max_examples=400, deadline=None)
def test_every_form_the_docs_name_is_blanked_for_any_secret(
    secret: str, form: str, before: str
) -> None:
    leaked = FORMS[form](secret)
    out = Redactor([secret]).text(f"{before}upstream said {leaked}; retrying")
    assert leaked.strip() not in out and MASK in out


@given(
    secret=secrets,
    before=st.binary(max_size=8),
    after=st.binary(max_size=80),
    width=st.sampled_from([64, 76]),
)
@settings(max_examples=300, deadline=None)
def test_a_secret_inside_a_longer_wrapped_base64_text_is_blanked_at_any_offset_and_width(
    secret: str, before: bytes, after: bytes, width: int
) -> None:
    """What a program attaches or logs: a whole document in base64, wrapped as MIME or PEM
    wrap it, the secret somewhere inside: none of the characters that are the secret's alone
    survives, however the lines cut them."""
    raw = secret.encode()
    whole = base64.b64encode(before + raw + after).decode()
    first = -(-8 * len(before) // 6)
    last = (8 * (len(before) + len(raw)) - 6) // 6
    own = whole[first : last + 1]
    out = Redactor([secret]).text(f"attachment:\n{wrap(whole, width)}\n")
    assert own not in out.replace("\n", "") and MASK in out
