"""In the browser, the candidate page's "What ships" fits the tested width and marks the
endpoint whose reported build is not the declared one so that it is seen, not only listed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from service.core.system.artifact import Assurance
from service.db.session import make_engine
from service.settings import Settings
from tests.browser.test_dashboard import LAYOUT_CHECK, shot, sign_in
from tests.support.keys import Key
from tests.web.test_shipping import CODE_HEX, IMAGE, seeded_candidate

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.timeout(300)]


def test_what_ships_fits_the_page_and_a_mismatched_build_stands_out(
    page: Any,
    settings: Settings,
    server_url: str,
    artifacts: Path,
    browser_keys: dict[str, Key],
) -> None:
    engine = make_engine(settings)
    try:
        candidate = seeded_candidate(engine, decided=True, assurance=Assurance.EXECUTED)
    finally:
        engine.dispose()
    sign_in(page, server_url, browser_keys["rita"], f"/candidates/{candidate}")
    ships = page.locator("#ships")
    ships.screenshot(path=str(artifacts / "40-what-ships.png"))
    shot(page, artifacts, "41-candidate-with-what-ships")
    assert page.evaluate(LAYOUT_CHECK) == []
    text = ships.inner_text()
    assert f"sha256:{CODE_HEX}" in text and "executed" in text and IMAGE in text
    wrong = ships.locator('tr.build-mismatch[data-endpoint="tools.servers.shop"]')
    right = ships.locator('tr.build-ok[data-endpoint="target"]')
    assert wrong.locator(".mismatch").is_visible()
    background = "(e) => getComputedStyle(e.querySelector('td')).backgroundColor"
    assert wrong.evaluate(background) != right.evaluate(background)
