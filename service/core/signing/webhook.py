"""Webhook signatures, as Stripe signs its events: `Assaygate-Signature: t=<unix seconds>,v1=<hex>`
where v1 is HMAC-SHA256 under the webhook's secret over `<t>.<body>`, the exact bytes sent. The
timestamp inside the signed bytes lets a receiver refuse a replayed delivery (`tolerance_s`);
several `v1=` entries may appear (a secret being rotated), any one of them verifying is enough.

Also the retry schedule (`backoff`): pure, so the worker and the reconciler agree on it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

SIGNATURE_HEADER = "Assaygate-Signature"
DELIVERY_HEADER = "Assaygate-Delivery"
EVENT_HEADER = "Assaygate-Event"
SECRET_PREFIX = "whsec_"


class WebhookSignatureInvalid(Exception):
    """A signature header that is malformed, stale, or made with another secret."""


def new_secret() -> str:
    """A fresh signing secret (shown once, when the webhook is created)."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def signature(secret: str, body: bytes, timestamp: int) -> str:
    """The hex HMAC-SHA256 of `<timestamp>.<body>` under `secret`."""
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def header(secret: str, body: bytes, timestamp: int) -> str:
    """The `Assaygate-Signature` value for `body` sent at `timestamp`."""
    return f"t={timestamp},v1={signature(secret, body, timestamp)}"


def verify(secret: str, body: bytes, value: str, now: int, tolerance_s: int = 300) -> int:
    """Check a received `Assaygate-Signature` against the raw body; the signed timestamp, or
    `WebhookSignatureInvalid`. What a receiver runs (docs/operations.md, "Webhooks")."""
    timestamp: int | None = None
    candidates: list[str] = []
    for part in value.split(","):
        key, _, item = part.strip().partition("=")
        if key == "t" and item.isdigit():
            timestamp = int(item)
        elif key == "v1" and item:
            candidates.append(item)
    if timestamp is None or not candidates:
        raise WebhookSignatureInvalid("the header carries no t= or no v1=")
    if abs(now - timestamp) > tolerance_s:
        raise WebhookSignatureInvalid(f"the timestamp is more than {tolerance_s} s away")
    expected = signature(secret, body, timestamp)
    if not any(hmac.compare_digest(expected, c) for c in candidates):
        raise WebhookSignatureInvalid("no v1 signature matches the body")
    return timestamp


def backoff(attempts: int, base_s: float, cap_s: float) -> float:
    """Seconds to wait after the `attempts`-th failed attempt: base, 2×base, 4×base… up to cap."""
    return float(min(cap_s, base_s * 2 ** max(0, attempts - 1)))
