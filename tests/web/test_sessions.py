"""Dashboard sessions live on the server: signing out or revoking the key ends them at once, a
saved cookie is worth nothing afterwards, and the secret that signs cookies is the API's own file,
never in the signing-keys folder that workers mount. Attacks, with the real app and database."""

from __future__ import annotations

import re
import stat
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from service.asgi import create_app
from service.db.apikey import revoke
from service.db.models import ApiKey, BrowserSession
from service.http.browser import COOKIE, WebSession, encode_session
from service.settings import LEGACY_SESSION_SECRET, Settings
from tests.web.conftest import key_for, signed_in


def csrf(client: TestClient, url: str = "/") -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', client.get(url).text)
    assert found is not None
    return found.group(1)


def with_cookie(client: TestClient, cookie: str) -> TestClient:
    """Another browser that replays a saved session cookie."""
    thief = TestClient(client.app)
    thief.cookies.set(COOKIE, cookie)
    return thief


def is_signed_in(browser: TestClient) -> bool:
    page = browser.get("/", follow_redirects=False)
    return page.status_code == 200 and "Sign out" in page.text


def test_a_cookie_saved_before_sign_out_no_longer_opens_pages_or_api_reads(
    anonymous_client: TestClient,
) -> None:
    browser = signed_in(anonymous_client, "sol", "/")
    saved = browser.cookies[COOKIE]
    assert with_cookie(browser, saved).get("/v1/candidates").status_code == 200
    out = browser.post("/signout", data={"csrf": csrf(browser)}, follow_redirects=False)
    assert out.status_code == 303

    replayed = with_cookie(browser, saved)
    page = replayed.get("/holds", follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"].startswith("/signin")
    assert replayed.get("/v1/candidates").status_code == 401
    posted = replayed.post("/submit", data={"manifest": "{}", "source_revision": "x"})
    assert posted.status_code in (401, 403)


def test_revoking_a_key_ends_every_session_signed_in_with_it(
    anonymous_client: TestClient, web_engine: sa.Engine
) -> None:
    laptop = signed_in(anonymous_client, "ria", "/")
    phone = signed_in(anonymous_client, "ria", "/")
    assert is_signed_in(laptop) and is_signed_in(phone)
    key_id = key_for(anonymous_client, "ria").id
    with Session(web_engine) as session:
        key = session.get(ApiKey, key_id)
        assert key is not None
        revoke(session, key)
        session.commit()
        rows = session.exec(select(BrowserSession).where(BrowserSession.key_id == key_id)).all()
    assert len(rows) == 2 and all(r.ended_at is not None for r in rows)
    assert not is_signed_in(laptop) and not is_signed_in(phone)


def test_a_session_expires_on_the_server_whatever_the_cookie_says(
    anonymous_client: TestClient, web_engine: sa.Engine
) -> None:
    browser = signed_in(anonymous_client, "eve", "/")
    key_id = key_for(anonymous_client, "eve").id
    with Session(web_engine) as session:
        session.execute(
            sa.update(BrowserSession)
            .where(BrowserSession.key_id == key_id)  # type: ignore[arg-type]
            .values(expires_at=sa.func.current_timestamp())
        )
        session.commit()
    time.sleep(1.1)
    assert not is_signed_in(browser)


def test_a_cookie_forged_with_the_real_secret_but_no_session_on_the_server_is_anonymous(
    anonymous_client: TestClient,
) -> None:
    """Even whoever holds the cookie secret cannot make a session: none exists for its id."""
    secret: bytes = anonymous_client.app.state.web_secret  # type: ignore[attr-defined]
    forged = encode_session(
        secret, WebSession(sid="made-up-session-id", identity=None, expires=int(time.time()) + 60)
    )
    assert not is_signed_in(with_cookie(anonymous_client, forged))


def test_the_header_names_the_person_signed_in_not_the_key(anonymous_client: TestClient) -> None:
    browser = signed_in(anonymous_client, "Rita Levi", "/")
    page = browser.get("/").text
    shown = re.search(r'<span class="identity"[^>]*>([^<]*)</span>', page)
    assert shown is not None and shown.group(1) == "Rita Levi"
    assert str(key_for(anonymous_client, "Rita Levi").id) not in page


# --------------------------------------------------------------------------------- the secret


def test_the_session_secret_is_the_apis_own_file_outside_the_signing_keys_folder(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'db.sqlite3'}")
    assert settings.keys_dir is not None and settings.session_secret_file is not None
    # What an older version left where workers can read it.
    settings.keys_dir.mkdir(parents=True)
    legacy = settings.keys_dir / LEGACY_SESSION_SECRET
    legacy.write_text("00" * 32)
    with TestClient(create_app(settings)):
        pass
    secret = settings.session_secret_file
    assert secret.exists() and not secret.is_relative_to(settings.keys_dir)
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert not legacy.exists()
    assert not any(p.name.endswith(".secret") for p in settings.keys_dir.iterdir())


def test_a_session_secret_inside_the_signing_keys_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must not be inside"):
        Settings(
            data_dir=tmp_path,
            keys_dir=tmp_path / "keys",
            session_secret_file=tmp_path / "keys" / "sub" / "session.secret",
        )
