"""A reviewer opens a held candidate in the browser: the review box is the first thing under its
title, above the decision and the evidence; the failing faults lead the grid; the box's waiver
is the holds page's, and once it is signed the box is gone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.test_dashboard import PLAN, shot, sign_in
from tests.support.keys import Key
from tests.support.service import example

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.timeout(300)]


def top(page: Any, selector: str) -> float:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, selector
    return float(box["y"])


def test_a_held_candidates_page_shows_the_review_box_first_and_waives_from_it(
    page: Any, server_url: str, api: httpx.Client, artifacts: Path, browser_keys: dict[str, Key]
) -> None:
    manifest = example("typed")
    manifest["system"] = "copperfin-review-box"
    created = api.post(
        "/v1/candidates",
        json={"source_revision": "typed-0003", "manifest": manifest, "plan": PLAN},
    )
    assert created.status_code == 202, created.text
    candidate = created.json()["id"]
    url = f"/candidates/{candidate}"

    sign_in(page, server_url, browser_keys["rita"], url)
    page.wait_for_selector("#review-box", timeout=120_000)
    page.reload()  # the decided page, not the live one it was signed in on
    page.wait_for_selector("section.faults")
    # First under the title: the box, then the decision, then the evidence.
    assert top(page, "#review-box") < top(page, "#decision") < top(page, "section.faults")
    box = page.locator("#review-box")
    assert box.locator("form[action$='/waive'] input[name=expires_at]").count() == 1
    assert box.locator("form[action$='/reject']").count() == 1
    assert box.locator("#hold-link").get_attribute("href").startswith("/holds?status=open#hold-")
    tiles = page.locator("section.faults article.fault")
    assert "fault-allow" not in (tiles.first.get_attribute("class") or "")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.screenshot(
        path=str(artifacts / "12-held-candidate-review-box.png")
    )  # what a reviewer sees first
    shot(page, artifacts, "12-held-candidate-review-box-full")

    box.locator("form[action$='/waive'] input[name=reason]").fill("accepted for the pilot")
    box.locator("form[action$='/waive'] button").click()
    page.wait_for_url(f"{server_url}{url}/dossier")
    page.goto(f"{server_url}{url}")
    assert page.locator("#review-box").count() == 0
    assert "waived until" in page.locator("#decision").inner_text()
    shot(page, artifacts, "13-candidate-after-waiver-from-its-page")
