"""A reviewer's morning in the browser: submit the baseline and the typed examples, watch the
assays finish, read why the baseline is blocked, and look at the evidence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.keys import Key
from tests.support.service import example, wait_decided

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.timeout(300)]

PLAN = {"trials": 40, "seed": 188}


def shot(page: Any, artifacts: Path, name: str) -> None:
    page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)


def sign_in(page: Any, base: str, key: Key, next_url: str) -> None:
    # Every page but the sign-in page sends an anonymous browser here and back again.
    page.goto(f"{base}{next_url}")
    if not page.url.startswith(f"{base}/signin"):
        page.goto(f"{base}/signin?next={next_url}")
    page.fill("#credential", key.secret)
    page.click("form.submit button[type=submit]")
    page.wait_for_url(f"{base}{next_url}")


def submit_in_the_browser(page: Any, base: str, name: str, system: str, key: Key) -> None:
    sign_in(page, base, key, "/submit")
    manifest = example(name)
    manifest["system"] = system
    page.goto(f"{base}/submit")
    page.fill("#manifest", json.dumps(manifest, indent=2))
    page.fill("input[name=source_revision]", f"{name}-0001")
    page.fill("input[name=trials]", str(PLAN["trials"]))
    page.fill("input[name=seed]", str(PLAN["seed"]))
    page.click("form.submit button[type=submit]")
    page.wait_for_url(f"{base}/candidates/*")


def test_baseline_submitted_in_the_browser_is_blocked_with_its_reasons(
    page: Any, server_url: str, artifacts: Path, browser_keys: dict[str, Key]
) -> None:
    page.goto(server_url + "/")
    assert page.url == f"{server_url}/signin?next=/"
    assert page.title() == "Sign in · Assaygate"
    shot(page, artifacts, "00-signin")
    sign_in(page, server_url, browser_keys["sam"], "/")
    assert page.title() == "Systems · Assaygate"
    shot(page, artifacts, "01-systems-before")

    submit_in_the_browser(page, server_url, "baseline", "copperfin-browser", browser_keys["sam"])
    # The page polls the assay while it runs and reloads itself once it is decided. The workers may
    # finish 40 trials before the page first renders, so the first view is either the running
    # assay's progress (never a finished one) or already the decision — and never both.
    progress, decided = page.locator("#progress"), page.locator("#decision")
    assert progress.count() + decided.count() == 1
    if progress.count():
        assert progress.get_attribute("data-status") in ("queued", "running")
    shot(page, artifacts, "02-candidate-progress")
    page.wait_for_selector("#decision", timeout=120_000)
    decision = page.locator("#decision")
    assert decision.locator(".pill-block").count() == 1
    text = decision.inner_text()
    assert "unsafe escape" in text and "subject_swap" in text
    assert page.locator("svg.sig").count() == 18
    assert page.locator("svg.envelope").count() == 1
    assert page.locator("table.coverage").count() == 1
    assert page.locator("#diagnosis").is_visible()
    shot(page, artifacts, "03-candidate-baseline-block")


def test_typed_candidate_submitted_by_ci_shows_progress_then_its_evidence(
    page: Any, server_url: str, api: httpx.Client, artifacts: Path, browser_keys: dict[str, Key]
) -> None:
    # The page polls the API as the signed-in key.
    sign_in(page, server_url, browser_keys["rita"], "/")
    manifest = example("typed")
    manifest["system"] = "copperfin-typed-browser"
    created = api.post(
        "/v1/candidates",
        json={"source_revision": "typed-0001", "manifest": manifest, "plan": PLAN},
    )
    assert created.status_code == 202, created.text
    candidate = created.json()["id"]
    page.goto(f"{server_url}/candidates/{candidate}")
    page.wait_for_selector("#decision", timeout=120_000)
    # docs/evidence.md: `typed` is `hold` (lineage breaks are held; evidence_repair is undeclared).
    assert page.locator("#decision .pill-hold").count() == 1
    assert page.locator("#decision .pill-allow, #decision .pill-block").count() == 0
    assert page.locator(".cf-valid").count() > 0
    assert page.locator("svg.sig").count() == 18
    shot(page, artifacts, "04-candidate-typed")

    page.goto(server_url + "/")
    row = page.locator("tr", has=page.locator("a", has_text="copperfin-typed-browser"))
    assert row.locator(".pill").inner_text().lower() == "hold"
    shot(page, artifacts, "05-systems-after")

    page.goto(server_url + "/events")
    kinds = page.locator("span.kind").all_inner_texts()
    assert "credential.minted" in kinds and "assay.decided" in kinds
    shot(page, artifacts, "06-events")

    page.goto(f"{server_url}/systems/copperfin-typed-browser")
    assert page.locator("table.candidates tbody tr").count() == 1
    shot(page, artifacts, "07-system")


def test_html_in_a_version_is_shown_as_text(
    page: Any, server_url: str, api: httpx.Client, browser_keys: dict[str, Key]
) -> None:
    # System names are letters, digits, '.', '_' and '-' only; versions are free text.
    manifest = example("typed")
    manifest["system"] = "copperfin-html-browser"
    manifest["version"] = '<img src=x onerror="document.title=1">'
    created = api.post(
        "/v1/candidates",
        json={"source_revision": "<b>bold</b>", "manifest": manifest, "plan": {"trials": 1}},
    )
    assert created.status_code == 202, created.text
    sign_in(page, server_url, browser_keys["sam"], "/candidates")
    assert page.get_by_text('<img src=x onerror="document.title=1">').count() >= 1
    assert page.title() == "Candidates · Assaygate"
    assert page.locator("main img").count() == 0


def test_reviewer_signs_in_sees_the_dossier_verified_and_waives_a_hold(
    page: Any, server_url: str, api: httpx.Client, artifacts: Path, browser_keys: dict[str, Key]
) -> None:
    rita = browser_keys["rita"]
    manifest = example("typed")
    manifest["system"] = "copperfin-review-browser"
    created = api.post(
        "/v1/candidates",
        json={"source_revision": "typed-0002", "manifest": manifest, "plan": PLAN},
    )
    assert created.status_code == 202, created.text
    candidate = created.json()["id"]

    sign_in(page, server_url, rita, "/holds")
    # People, not key ids: the header names who signed in, the candidate who submitted it.
    assert page.locator(".identity").inner_text() == "Rita Levi"

    page.goto(f"{server_url}/candidates/{candidate}")
    page.wait_for_selector("#decision", timeout=120_000)
    assert "by ci-bot" in page.locator("main").inner_text()
    page.click("#dossier-link")
    assert page.locator(".verify.ok").count() == 1
    shot(page, artifacts, "08-dossier-verified")

    page.goto(f"{server_url}/holds")
    hold = page.locator("article.hold", has=page.locator(f'a[href="/candidates/{candidate}"]'))
    assert "submitted by ci-bot" in hold.inner_text()
    shot(page, artifacts, "09-holds")
    hold.locator("form[action$='/waive'] input[name=reason]").fill("lineage repair lands in 1.3")
    hold.locator("form[action$='/waive'] button").click()
    page.wait_for_url(f"{server_url}/candidates/{candidate}/dossier")
    assert page.locator("li.version").count() == 2
    assert page.locator(".verify.ok").count() == 2
    assert "waived by Rita Levi" in page.locator("#v2").inner_text()
    assert str(rita.id) not in page.locator("main").inner_text()
    shot(page, artifacts, "10-dossier-after-waiver")

    # Every page now says what the gate says: allow, resting on the waiver.
    gate = api.get("/v1/gate/copperfin-review-browser").json()
    assert (gate["decision"], gate["basis"]) == ("allow", "waived")
    pages = pages_of(page, server_url, "copperfin-review-browser", candidate, "1.5.0")
    assert pages == dict.fromkeys(pages, "allow"), pages
    page.goto(f"{server_url}/candidates/{candidate}")
    assert "waived until" in page.locator("#decision").inner_text()
    assert page.locator("#assay-decision .pill-hold").count() == 1  # the assay's own answer
    shot(page, artifacts, "11-candidate-waived")


def test_another_tenant_sees_none_of_it(
    page: Any, server_url: str, api: httpx.Client, artifacts: Path, browser_keys: dict[str, Key]
) -> None:
    manifest = example("typed")
    manifest["system"] = "copperfin-tenant-browser"
    created = api.post(
        "/v1/candidates", json={"source_revision": "t-0001", "manifest": manifest, "plan": PLAN}
    )
    assert created.status_code == 202, created.text
    candidate = created.json()["id"]
    sign_in(page, server_url, browser_keys["gina"], "/")
    assert page.get_by_text("copperfin-tenant-browser").count() == 0
    shot(page, artifacts, "12-systems-other-tenant")
    for url in (f"/candidates/{candidate}", f"/candidates/{candidate}/dossier"):
        answer = page.goto(server_url + url)
        assert answer is not None and answer.status == 404
    page.goto(server_url + "/holds")
    assert page.locator(f'a[href="/candidates/{candidate}"]').count() == 0


def gate_word(page: Any, row: Any) -> str:
    """The word of the gate pill in a row (or the page's decision card)."""
    pill = row.locator(".pill").first
    return str(pill.inner_text()).strip().lower()


def pages_of(page: Any, base: str, system: str, candidate: str, version: str) -> dict[str, str]:
    """What each page shows as the gate of `system` (its newest candidate) and of `candidate`."""
    shown: dict[str, str] = {}
    page.goto(f"{base}/candidates/{candidate}")
    shown["candidate header"] = gate_word(page, page.locator("h1"))
    shown["candidate decision"] = page.locator("#decision").get_attribute("data-gate")
    page.goto(f"{base}/")
    row = page.locator("table.systems tr", has=page.locator(f'a[href="/systems/{system}"]'))
    shown["systems"] = gate_word(page, row.locator("td.gate"))
    page.goto(f"{base}/systems/{system}")
    row = page.locator(
        "table.candidates tr", has=page.locator(f'a[href="/candidates/{candidate}"]')
    )
    shown["system"] = gate_word(page, row.locator("td.gate"))
    page.goto(f"{base}/candidates")
    row = page.locator(
        "table.candidates tr", has=page.locator(f'a[href="/candidates/{candidate}"]')
    )
    shown["candidates"] = gate_word(page, row.locator("td.gate"))
    return shown


def test_after_a_config_change_every_page_shows_the_reopened_gate(
    page: Any, server_url: str, api: httpx.Client, artifacts: Path, browser_keys: dict[str, Key]
) -> None:
    system = "copperfin-reopen-browser"
    manifest = example("typed-repair")
    manifest["system"] = system
    first = api.post(
        "/v1/candidates",
        json={"version": "2.0.0", "source_revision": "r-0001", "manifest": manifest, "plan": PLAN},
    )
    assert first.status_code == 202, first.text
    live = wait_decided(api, first.json()["id"])
    assert live["gate"]["decision"] == "allow"
    reported = api.post(
        f"/v1/systems/{system}/config-changes",
        json={"component": "retry", "sha256": "5e" * 32, "note": "ops raised max_attempts"},
    )
    assert reported.status_code == 201, reported.text
    # A new candidate with the old retry config: its assay allows, the gate stays reopened.
    second = api.post(
        "/v1/candidates",
        json={"version": "2.0.1", "source_revision": "r-0002", "manifest": manifest, "plan": PLAN},
    )
    assert second.status_code == 202, second.text
    candidate = second.json()["id"]
    assert wait_decided(api, candidate)["decision"] == "allow"
    gate = api.get(f"/v1/gate/{system}").json()
    assert (gate["version"], gate["decision"]) == ("2.0.1", "reopened")

    sign_in(page, server_url, browser_keys["rita"], "/")
    pages = pages_of(page, server_url, system, candidate, "2.0.1")
    assert pages == dict.fromkeys(pages, "reopened"), pages
    page.goto(f"{server_url}/candidates/{candidate}")
    decision = page.locator("#decision").inner_text()
    assert "production retry changed" in decision and "config_changed" in decision
    assert page.locator("#assay-decision .pill-allow").count() == 1
    shot(page, artifacts, "13-candidate-reopened")
    page.goto(f"{server_url}/")
    shot(page, artifacts, "14-systems-reopened")
    page.goto(f"{server_url}/systems/{system}")
    # The candidate assayed before the change is reopened too, in its own new dossier version.
    older = page.locator("table.candidates tr", has=page.get_by_text("2.0.0", exact=True))
    assert gate_word(page, older.locator("td.gate")) == "reopened"
    shot(page, artifacts, "15-system-reopened")
    page.goto(f"{server_url}/candidates")
    shot(page, artifacts, "16-candidates-reopened")


LAYOUT_CHECK = """
() => {
  const problems = [];
  const classes = (e) => typeof e.className === 'string' && e.className.trim()
    ? '.' + e.className.trim().split(/\\s+/).join('.') : '';
  const name = (e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + classes(e);
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth) {
    problems.push(`the page scrolls sideways: ${root.scrollWidth} > ${root.clientWidth}`);
  }
  const boxes = [...document.querySelectorAll('main .card, main .stat, main > table.grid')];
  for (const box of boxes) {
    const r = box.getBoundingClientRect();
    for (const inner of box.querySelectorAll('*')) {
      const c = inner.getBoundingClientRect();
      if (c.width === 0 || getComputedStyle(inner).position === 'absolute') continue;
      if (c.right > r.right + 1 || c.left < r.left - 1) {
        const span = (x) => `${Math.round(x.left)}-${Math.round(x.right)}`;
        problems.push(`${name(inner)} sticks out of ${name(box)} (${span(c)} in ${span(r)})`);
        break;
      }
    }
  }
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i], b = boxes[j];
      if (a.contains(b) || b.contains(a)) continue;
      const p = a.getBoundingClientRect(), q = b.getBoundingClientRect();
      const across = Math.min(p.right, q.right) - Math.max(p.left, q.left);
      const gap = Math.max(p.top, q.top) - Math.min(p.bottom, q.bottom);
      if (across > 0 && gap < 4) {
        problems.push(`${name(a)} and ${name(b)} overlap or touch (gap ${Math.round(gap)}px)`);
      }
    }
  }
  return problems;
}
"""

ENVELOPE_CHECK = """
() => {
  const svg = document.querySelector('svg.envelope');
  const texts = [...svg.querySelectorAll('text')]
    .map(t => [t.textContent, t.getBoundingClientRect()]);
  const marks = [...svg.querySelectorAll('.pt')].map(m => ['mark', m.getBoundingClientRect()]);
  const hit = (p, q) => Math.min(p.right, q.right) > Math.max(p.left, q.left) &&
    Math.min(p.bottom, q.bottom) > Math.max(p.top, q.top);
  const problems = [];
  texts.forEach(([a, p], i) => {
    texts.slice(i + 1).forEach(([b, q]) => { if (hit(p, q)) problems.push(`${a} / ${b}`); });
    marks.forEach(([b, q]) => { if (hit(p, q)) problems.push(`${a} / a fault mark`); });
  });
  return problems;
}
"""


def test_no_page_overflows_or_overlaps_at_the_tested_width(
    page: Any, server_url: str, api: httpx.Client, artifacts: Path, browser_keys: dict[str, Key]
) -> None:
    manifest = example("baseline")
    manifest["system"] = "copperfin-layout-browser"
    created = api.post(
        "/v1/candidates", json={"source_revision": "l-0001", "manifest": manifest, "plan": PLAN}
    )
    assert created.status_code == 202, created.text
    candidate = created.json()["id"]
    wait_decided(api, candidate)
    page.goto(f"{server_url}/signin")
    assert page.evaluate(LAYOUT_CHECK) == []
    sign_in(page, server_url, browser_keys["rita"], "/")
    for name, url in (
        ("20-layout-systems", "/"),
        ("21-layout-candidates", "/candidates"),
        ("22-layout-system", "/systems/copperfin-layout-browser"),
        ("23-layout-candidate", f"/candidates/{candidate}"),
        ("24-layout-dossier", f"/candidates/{candidate}/dossier"),
        ("25-layout-holds", "/holds"),
        ("26-layout-events", "/events"),
        ("27-layout-submit", "/submit"),
        ("28-layout-not-found", "/candidates/00000000-0000-0000-0000-000000000000"),
    ):
        page.goto(server_url + url)
        shot(page, artifacts, name)
        assert page.evaluate(LAYOUT_CHECK) == [], url
    # A reviewer-only key is shown no Submit form; the blocked candidate's hold reads BLOCK.
    page.goto(f"{server_url}/submit")
    assert page.locator("form.submit").count() == 0
    page.goto(f"{server_url}/holds")
    hold = page.locator("article.hold", has=page.locator(f'a[href="/candidates/{candidate}"]'))
    assert hold.locator(".gate-word .pill-block").count() == 1
    assert hold.locator("li.sev-block").first.is_visible()
    assert hold.locator("li").first.get_attribute("class") == "sev-block"
    page.goto(f"{server_url}/candidates/{candidate}")
    assert page.evaluate(ENVELOPE_CHECK) == []
    page.locator("section.card:has(svg.envelope)").screenshot(
        path=str(artifacts / "29-envelope-chart.png")
    )
    # The admin's people and keys: names, never a part of a secret.
    sign_in(page, server_url, browser_keys["ada"], "/keys")
    shot(page, artifacts, "30-layout-keys")
    assert page.evaluate(LAYOUT_CHECK) == []
    text = page.locator("main").inner_text()
    assert "Rita Levi" in text and "Ada Lovelace" in text
    assert not any(k.secret[:7] in text for k in browser_keys.values())
