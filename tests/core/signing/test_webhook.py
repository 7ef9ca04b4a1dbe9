"""Webhook signatures as a receiver checks them, and the retry schedule."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from service.core.signing.webhook import (
    WebhookSignatureInvalid,
    backoff,
    header,
    new_secret,
    verify,
)

BODY = b'{"event":"hold.opened"}'


def test_the_signature_is_hmac_sha256_over_the_timestamp_a_dot_and_the_body() -> None:
    secret = new_secret()
    value = header(secret, BODY, 1_700_000_000)
    expected = hmac.new(secret.encode(), b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert value == f"t=1700000000,v1={expected}"
    assert verify(secret, BODY, value, now=1_700_000_100) == 1_700_000_000


def test_another_secret_a_changed_body_or_a_moved_timestamp_fails() -> None:
    secret = new_secret()
    value = header(secret, BODY, 1_700_000_000)
    for bad_secret, body, sent in (
        (new_secret(), BODY, value),
        (secret, BODY + b" ", value),
        (secret, BODY, value.replace("t=1700000000", "t=1700000001")),
        (secret, BODY, "v1=" + value.split("v1=")[1]),
        (secret, BODY, "t=1700000000"),
    ):
        with pytest.raises(WebhookSignatureInvalid):
            verify(bad_secret, body, sent, now=1_700_000_000)


def test_a_replay_outside_the_tolerance_fails_and_any_of_several_v1_entries_passes() -> None:
    secret = new_secret()
    value = header(secret, BODY, 1_700_000_000)
    with pytest.raises(WebhookSignatureInvalid, match="300 s"):
        verify(secret, BODY, value, now=1_700_000_301)
    rotating = f"{value},v1={'0' * 64}"
    assert verify(secret, BODY, rotating, now=1_700_000_000) == 1_700_000_000


def test_back_off_doubles_from_the_base_up_to_the_cap() -> None:
    assert [backoff(n, 30, 3600) for n in range(1, 10)] == [
        30,
        60,
        120,
        240,
        480,
        960,
        1920,
        3600,
        3600,
    ]
