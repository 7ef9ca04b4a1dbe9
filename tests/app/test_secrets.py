"""A tenant's secrets as the use cases keep them: encrypted at rest, bound to their tenant and
name, audited by name, and handed to the tenant's code only by `secrets_for`."""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

import pytest
from pydantic import ValidationError
from sqlmodel import Session, select

from service.app import keys, secrets
from service.app.errors import FieldInvalid, NotFound, SecretMissing
from service.core.errors import SecretInvalid, SecretUnreadable
from service.core.system.secret import SecretsKey, SecretValue, code_env
from service.db import apikey
from service.db.models import Event, KeyRole, TenantSecret
from service.keys import SecretsKeyMissing, load_secrets_key
from service.settings import Settings

VALUE = "sk-live-0123456789abcdef-do-not-leak"


@pytest.fixture
def key() -> SecretsKey:
    return SecretsKey(os.urandom(32))


def admin_of(session: Session, tenant: str) -> apikey.Principal:
    minted = keys.mint_as_operator(session, keys.OperatorMint(tenant, [KeyRole.ADMIN], "ada"))
    principal = apikey.authenticate(session, minted.secret)
    assert principal is not None
    return principal


def row(session: Session, tenant_id: uuid.UUID, name: str) -> TenantSecret:
    found = session.get(TenantSecret, (tenant_id, name))
    assert found is not None
    return found


def test_a_stored_secret_comes_back_for_its_tenants_code_and_only_by_name(
    session: Session, key: SecretsKey
) -> None:
    admin = admin_of(session, "sec-a")
    secrets.put(session, admin, key, "OPENAI_API_KEY", VALUE)
    secrets.put(session, admin, key, "OTHER", "x")
    got = secrets.secrets_for(session, admin.tenant_id, ["OPENAI_API_KEY"], key)
    assert got == {"OPENAI_API_KEY": VALUE}
    assert VALUE not in repr(got) and VALUE not in str(got)
    assert [s.name for s in secrets.of_tenant(session, admin)] == ["OPENAI_API_KEY", "OTHER"]


def test_putting_a_secret_again_replaces_its_value_and_moves_its_updated_at(
    session: Session, key: SecretsKey
) -> None:
    admin = admin_of(session, "sec-b")
    first = secrets.put(session, admin, key, "MODEL_KEY", "one")
    second = secrets.put(session, admin, key, "MODEL_KEY", "two")
    assert second.updated_at >= first.updated_at
    assert secrets.secrets_for(session, admin.tenant_id, ["MODEL_KEY"], key) == {"MODEL_KEY": "two"}


def test_the_raw_ciphertext_column_does_not_contain_the_value(
    session: Session, key: SecretsKey
) -> None:
    admin = admin_of(session, "sec-c")
    secrets.put(session, admin, key, "OPENAI_API_KEY", VALUE)
    stored = row(session, admin.tenant_id, "OPENAI_API_KEY").ciphertext
    assert VALUE.encode() not in stored and b"do-not-leak" not in stored
    assert stored[0] == 1  # the key version


def test_a_row_copied_to_another_tenant_does_not_decrypt_there(
    session: Session, key: SecretsKey
) -> None:
    owner = admin_of(session, "sec-d")
    thief = admin_of(session, "sec-e")
    secrets.put(session, owner, key, "OPENAI_API_KEY", VALUE)
    stolen = row(session, owner.tenant_id, "OPENAI_API_KEY").ciphertext
    session.add(TenantSecret(tenant_id=thief.tenant_id, name="OPENAI_API_KEY", ciphertext=stolen))
    session.commit()
    with pytest.raises(SecretUnreadable) as refused:
        secrets.secrets_for(session, thief.tenant_id, ["OPENAI_API_KEY"], key)
    assert VALUE not in str(refused.value)


def test_a_row_renamed_does_not_decrypt_under_its_new_name(
    session: Session, key: SecretsKey
) -> None:
    admin = admin_of(session, "sec-f")
    secrets.put(session, admin, key, "OPENAI_API_KEY", VALUE)
    stored = row(session, admin.tenant_id, "OPENAI_API_KEY").ciphertext
    session.add(TenantSecret(tenant_id=admin.tenant_id, name="ANTHROPIC_KEY", ciphertext=stored))
    session.commit()
    with pytest.raises(SecretUnreadable):
        secrets.secrets_for(session, admin.tenant_id, ["ANTHROPIC_KEY"], key)


def test_a_secret_does_not_decrypt_under_another_operator_key(
    session: Session, key: SecretsKey
) -> None:
    admin = admin_of(session, "sec-g")
    secrets.put(session, admin, key, "OPENAI_API_KEY", VALUE)
    with pytest.raises(SecretUnreadable):
        secrets.secrets_for(
            session, admin.tenant_id, ["OPENAI_API_KEY"], SecretsKey(os.urandom(32))
        )


def test_the_audit_event_of_a_write_names_the_secret_and_never_holds_its_value(
    session: Session, key: SecretsKey
) -> None:
    admin = admin_of(session, "sec-h")
    secrets.put(session, admin, key, "OPENAI_API_KEY", VALUE)
    secrets.delete(session, admin, "OPENAI_API_KEY")
    events = session.exec(
        select(Event).where(Event.tenant_id == admin.tenant_id, Event.kind == "audit")
    ).all()
    actions = [(e.data["action"], e.data["target"]) for e in events]
    assert ("secret.put", "secret:OPENAI_API_KEY") in actions
    assert ("secret.delete", "secret:OPENAI_API_KEY") in actions
    assert all(VALUE not in repr(e.data) for e in events)


def test_the_worker_is_told_which_secret_is_missing(session: Session, key: SecretsKey) -> None:
    admin = admin_of(session, "sec-i")
    secrets.put(session, admin, key, "PRESENT", "v")
    with pytest.raises(SecretMissing) as missing:
        secrets.secrets_for(session, admin.tenant_id, ["PRESENT", "ABSENT"], key)
    assert missing.value.field == "ABSENT" and "ABSENT" in missing.value.message


def test_another_tenant_cannot_read_or_use_a_tenants_secret(
    session: Session, key: SecretsKey
) -> None:
    owner = admin_of(session, "sec-j")
    other = admin_of(session, "sec-k")
    secrets.put(session, owner, key, "OPENAI_API_KEY", VALUE)
    assert secrets.of_tenant(session, other) == []
    with pytest.raises(SecretMissing):
        secrets.secrets_for(session, other.tenant_id, ["OPENAI_API_KEY"], key)
    with pytest.raises(FieldInvalid) as refused:
        secrets.check_named(session, other.tenant_id, ["OPENAI_API_KEY"], "manifest.target.secrets")
    assert refused.value.field == "manifest.target.secrets.0"
    with pytest.raises(NotFound):
        secrets.delete(session, other, "OPENAI_API_KEY")


@pytest.mark.parametrize(
    ("name", "value", "field"),
    [
        ("lower", "v", "name"),
        ("9LEADING_DIGIT", "v", "name"),
        ("A" * 65, "v", "name"),
        ("EMPTY", "", "value"),
        ("NUL", "a\x00" + VALUE, "value"),
        ("HUGE", VALUE + "é" * 8192, "value"),
    ],
)
def test_a_bad_name_or_value_is_refused_naming_the_field_and_never_quoting_the_value(
    session: Session, key: SecretsKey, name: str, value: str, field: str
) -> None:
    admin = admin_of(session, "sec-l")
    with pytest.raises(SecretInvalid) as refused:
        secrets.put(session, admin, key, name, value)
    assert refused.value.field == field
    assert VALUE not in str(refused.value)
    assert secrets.of_tenant(session, admin) == []


def test_the_code_environment_hides_every_value_in_its_repr() -> None:
    env = code_env({"MODE": "fast"}, {"OPENAI_API_KEY": VALUE})
    assert env == {"MODE": "fast", "OPENAI_API_KEY": VALUE}
    assert VALUE not in repr(env) and "OPENAI_API_KEY" in repr(env)


def test_the_operator_key_file_is_created_0600_once_and_a_worker_never_creates_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "secrets.key"
    with pytest.raises(SecretsKeyMissing):
        load_secrets_key(path)
    assert not path.exists()
    first = load_secrets_key(path, create=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = load_secrets_key(path)
    tenant = uuid.uuid4()
    sealed = first.encrypt(tenant, "K", SecretValue("v"))
    assert again.decrypt(tenant, "K", sealed).reveal() == "v"
    assert repr(first) == "SecretsKey(<hidden>)"
    assert repr(SecretValue(VALUE)) == "SecretValue(<hidden>)"


@pytest.mark.parametrize("inside", ["keys", "injector-public"])
def test_a_secrets_key_file_inside_a_folder_every_worker_mounts_is_refused(
    tmp_path: Path, inside: str
) -> None:
    with pytest.raises(ValidationError, match="ASSAYGATE_SECRETS_KEY_FILE"):
        Settings(data_dir=tmp_path, secrets_key_file=tmp_path / inside / "secrets.key")
    assert Settings(data_dir=tmp_path).secrets_key_file == tmp_path.absolute() / "secrets.key"
