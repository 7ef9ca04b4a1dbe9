"""Scoped, expiring injector identities.

The service mints one credential per assay, signed with its Ed25519 key: tenant, candidate, assay,
audience, the fault modes it may inject, the synthetic subject namespace it may touch, a cap on
effects, and a validity window. It travels with each task; the private key never does. A worker
verifies it before each shard; the injector re-checks its window and scope before each injection.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from service.core.errors import CredentialInvalid
from service.core.faults.catalogue import FaultSpec
from service.core.signing.dossier import PublicKey, Signer, pae
from service.core.system.manifest import canonical

CREDENTIAL_TYPE = "application/vnd.assaygate.injector-credential+json"
AUDIENCE = "assaygate-worker"


@dataclass(frozen=True)
class InjectorScope:
    tenant: str
    candidate: str
    assay: str
    modes: tuple[str, ...]
    namespace: str
    max_effects: int
    not_before: float
    expires: float
    audience: str = AUDIENCE
    keyid: str = ""

    def claims(self) -> dict[str, object]:
        d = asdict(self)
        d["modes"] = list(self.modes)
        return d


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def mint(scope: InjectorScope, signer: Signer) -> str:
    claims = {**scope.claims(), "keyid": signer.keyid}
    payload = canonical(claims)
    sig = signer.sign(pae(CREDENTIAL_TYPE, payload))
    return f"{_b64(payload)}.{_b64(sig)}"


def verify_credential(
    token: str, keys: Mapping[str, PublicKey], *, assay: str, now: float, audience: str = AUDIENCE
) -> InjectorScope:
    """The credential's scope, or CredentialInvalid naming the first check that failed."""
    try:
        payload_b64, sig_b64 = token.split(".")
        payload, sig = _unb64(payload_b64), _unb64(sig_b64)
        claims = json.loads(payload)
        scope = InjectorScope(
            tenant=str(claims["tenant"]),
            candidate=str(claims["candidate"]),
            assay=str(claims["assay"]),
            modes=tuple(str(m) for m in claims["modes"]),
            namespace=str(claims["namespace"]),
            max_effects=int(claims["max_effects"]),
            not_before=float(claims["not_before"]),
            expires=float(claims["expires"]),
            audience=str(claims["audience"]),
            keyid=str(claims["keyid"]),
        )
    except (ValueError, KeyError, TypeError, binascii.Error, json.JSONDecodeError):
        raise CredentialInvalid("malformed credential", field="credential") from None
    key = keys.get(scope.keyid)
    if key is None:
        raise CredentialInvalid(
            f"signed by unknown key {scope.keyid[:16]}", field="credential.signature"
        )
    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(key.public)).verify(
            sig, pae(CREDENTIAL_TYPE, payload)
        )
    except (InvalidSignature, ValueError):
        raise CredentialInvalid(
            "signature does not match (forged or tampered)", field="credential.signature"
        ) from None
    if scope.audience != audience:
        raise CredentialInvalid(
            f"audience is {scope.audience!r}, not {audience!r}", field="credential.audience"
        )
    if scope.assay != assay:
        raise CredentialInvalid(
            f"issued for assay {scope.assay}, not {assay}", field="credential.assay"
        )
    check_window(scope, now)
    return scope


def check_window(scope: InjectorScope, now: float) -> None:
    if now < scope.not_before:
        raise CredentialInvalid("not yet valid", field="credential.not_before")
    if now >= scope.expires:
        raise CredentialInvalid("expired", field="credential.expires")


def injection_guard(
    scope: InjectorScope, clock: Callable[[], float]
) -> Callable[[FaultSpec], str | None]:
    """Checked before every injection: the window has not closed and the mode is in scope."""
    modes = frozenset(scope.modes)

    def guard(spec: FaultSpec) -> str | None:
        try:
            check_window(scope, clock())
        except CredentialInvalid as exc:
            return f"injector credential {exc.message}"
        if spec.id not in modes and spec.mode not in modes:
            return f"fault {spec.id} is outside the injector credential's modes"
        return None

    return guard
