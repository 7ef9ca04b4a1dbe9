"""A tenant's named secrets (model keys for its agents): their rules and their encryption.

Stored as `version | nonce | ciphertext`: AES-256-GCM under the operator's secrets key, a random
96-bit nonce per write, and associated data that binds the ciphertext to its tenant and name, so a
row copied to another tenant or renamed does not decrypt. Version 1 is the only key version; the
byte leaves room for rotation (a new key with the next version, decrypting old rows with the old
one), which is not built yet.

A value never appears in a repr, a log line, an error or an answer: it travels as `SecretValue`
(its repr hides it) until the sandboxed code's environment is built (`HiddenEnv`).
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterable, Mapping

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from service.core.errors import SecretInvalid, SecretUnreadable

#: A secret's (and a declared variable's) name: an environment variable's usual spelling.
NAME_PATTERN = "^[A-Z][A-Z0-9_]{0,63}$"
NAME_RULE = (
    "a name is 1 to 64 upper-case letters, digits or '_', starting with an upper-case letter"
)
MAX_VALUE_BYTES = 16 * 1024
KEY_BYTES = 32
NONCE_BYTES = 12
VERSION = 1
_NAME = re.compile(NAME_PATTERN)
_CONTEXT = b"assaygate tenant secret\x00"


def check_name(name: str, field: str = "name") -> str:
    """`name` if it is a valid secret name, else SecretInvalid naming `field`."""
    if not _NAME.fullmatch(name):
        raise SecretInvalid(NAME_RULE, field=field)
    return name


class SecretValue:
    """A secret's value: shown by nothing but `reveal()`."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "SecretValue(<hidden>)"

    __str__ = __repr__

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("a secret value is not pickled")


def check_value(value: str, field: str = "value") -> SecretValue:
    """A non-empty string of at most MAX_VALUE_BYTES (UTF-8) without NUL; errors never quote it."""
    if not value:
        raise SecretInvalid("a secret value must not be empty", field=field)
    if "\x00" in value:
        raise SecretInvalid("a secret value must not contain NUL", field=field)
    try:
        size = len(value.encode())
    except UnicodeEncodeError:
        raise SecretInvalid("a secret value must be text (UTF-8)", field=field) from None
    if size > MAX_VALUE_BYTES:
        raise SecretInvalid(f"a secret value is at most {MAX_VALUE_BYTES} bytes", field=field)
    return SecretValue(value)


class HiddenEnv(dict[str, str]):
    """Variables for a tenant's code, secrets among them: a dict whose repr names the variables
    and hides every value (a `Confinement` holding it prints no secret)."""

    def __repr__(self) -> str:
        return "HiddenEnv({" + ", ".join(f"{k!r}: <hidden>" for k in sorted(self)) + "})"

    __str__ = __repr__


def code_env(declared: Mapping[str, str], secrets: Mapping[str, str]) -> HiddenEnv:
    """What a tenant's code sees: the manifest's declared `target.env`, then its secrets."""
    return HiddenEnv({**declared, **secrets})


class SecretsKey:
    """The operator's AES-256-GCM key for tenants' secrets (version `VERSION`)."""

    __slots__ = ("_aead",)

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"a secrets key is {KEY_BYTES} bytes")
        self._aead = AESGCM(key)

    def __repr__(self) -> str:
        return "SecretsKey(<hidden>)"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("a secrets key is not pickled")

    def encrypt(self, tenant_id: uuid.UUID, name: str, value: SecretValue) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead.encrypt(
            nonce, value.reveal().encode(), _associated(VERSION, tenant_id, name)
        )
        return bytes([VERSION]) + nonce + sealed

    def decrypt(self, tenant_id: uuid.UUID, name: str, stored: bytes) -> SecretValue:
        unreadable = SecretUnreadable(
            f"the stored secret {name} does not decrypt for this tenant under this key; "
            f"a tenant admin stores it again with PUT /v1/secrets/{name}",
            field=name,
        )
        if len(stored) < 1 + NONCE_BYTES + 16 or stored[0] != VERSION:
            raise unreadable
        nonce, sealed = stored[1 : 1 + NONCE_BYTES], stored[1 + NONCE_BYTES :]
        try:
            plain = self._aead.decrypt(nonce, sealed, _associated(stored[0], tenant_id, name))
        except InvalidTag:
            raise unreadable from None
        return SecretValue(plain.decode())


def _associated(version: int, tenant_id: uuid.UUID, name: str) -> bytes:
    """Binds a ciphertext to its key version, tenant and name."""
    return _CONTEXT + bytes([version]) + tenant_id.bytes + name.encode()


def unique_names(names: Iterable[str]) -> list[str]:
    """The names in order, each once."""
    return list(dict.fromkeys(names))
