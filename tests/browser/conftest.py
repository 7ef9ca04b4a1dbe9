"""Debian's Chromium, headless, driven by Playwright against the real service: PostgreSQL,
Redis, two Celery worker processes and the API (with the dashboard) on a real port.

The browser is never downloaded (`playwright install` is not used): `make test` installs
Debian's `chromium` package, and these tests skip, saying why, only when it is not there — and
never under CI, where a missing browser fails the run (tests/support/chromium.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.asgi import create_app
from service.db import migrate
from service.db.models import KeyRole
from service.db.session import make_engine
from service.settings import Settings
from tests.support.chromium import CHROMIUM, require_chromium
from tests.support.keys import Key, make_key
from tests.support.service import (
    ROOT,
    ApiServer,
    WorkerProcess,
    flush_redis_prefix,
    postgres_database,
    session_settings,
)

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = ROOT / "test-artifacts"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: drives Debian's Chromium through Playwright")


# One browser a file: Playwright's sync API keeps its event loop marked running on this thread
# for as long as it is open, and every `asyncio.run` in a later file on the same test process
# would fail ("cannot be called from a running event loop"); closing it with the file clears it.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_chromium(CHROMIUM)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    try:
        yield opened
    finally:
        context.close()


@pytest.fixture(scope="package")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="package")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    with postgres_database("browser") as url:
        settings = session_settings(
            url, tmp_path_factory.mktemp("browser"), "browser", trials_per_shard=40
        )
        migrate.upgrade(settings)
        yield settings
        flush_redis_prefix(settings)


@pytest.fixture(scope="package")
def server_url(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log_dir = tmp_path_factory.mktemp("browser-workers")
    workers = [WorkerProcess(settings, f"browser-{n}", log_dir) for n in (1, 2)]
    try:
        for worker in workers:
            worker.wait_ready()
        with ApiServer(create_app(settings)) as server:
            yield server.url
    finally:
        for worker in workers:
            worker.stop()


@pytest.fixture(scope="package")
def browser_keys(settings: Settings) -> Iterator[dict[str, Key]]:
    """ci-bot submits through the API, sam in the browser, rita reviews; gina is another
    tenant's."""
    engine = make_engine(settings)
    try:
        yield {
            "ci-bot": make_key(engine, "acme", [KeyRole.SUBMITTER], "ci-bot"),
            "sam": make_key(engine, "acme", [KeyRole.SUBMITTER], "sam"),
            "rita": make_key(engine, "acme", [KeyRole.REVIEWER], "rita", person="Rita Levi"),
            # Another team's reviewer: sees none of acme's systems.
            "gina": make_key(engine, "globex", [KeyRole.REVIEWER], "gina"),
            # acme's admin: the people and keys page.
            "ada": make_key(engine, "acme", [KeyRole.ADMIN], "ada", person="Ada Lovelace"),
        }
    finally:
        engine.dispose()


@pytest.fixture
def api(server_url: str, browser_keys: dict[str, Key]) -> Iterator[httpx.Client]:
    headers = browser_keys["ci-bot"].headers
    with httpx.Client(base_url=server_url, timeout=30.0, headers=headers) as client:
        yield client
