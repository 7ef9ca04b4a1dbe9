"""Sign-in, tenants and roles on the dashboard, driven from its own route list: every page
redirects an anonymous browser to the sign-in page, shows a signed-in key only its tenant's
resources (another tenant's answer 404, as the API's do), and every form post is allowed exactly
to the roles of the API route it stands for."""

from __future__ import annotations

import json
import re
import uuid
from urllib.parse import parse_qs, quote, unquote, urlsplit

import pytest
import sqlalchemy as sa
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.testclient import TestClient
from sqlmodel import Session, col, select
from starlette.routing import Route

from service.db.apikey import revoke
from service.db.models import ApiKey, Dossier, Hold, KeyRole
from service.http.access import PUBLIC, ROUTE_ROLES
from service.http.limits import MemoryCounter, SubmissionLimit
from service.settings import Settings
from service.web import routes as web_routes
from service.web.access import PAGE_ROLES, PUBLIC_PAGES, PageRoute, safe_next
from tests.web.conftest import EVIL, OTHER_SYSTEM, Seeded, key_for, signed_in
from tests.web.seed import example

# FastAPI's own documentation routes: neither the API's nor the dashboard's.
DOCS = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}

DASHBOARD_GETS = sorted(
    (method, str(route.path))
    for route in iter_route_contexts(web_routes.router.routes)
    for method in route.methods or ()
    if method == "GET"
)
PROTECTED_GETS = [r for r in DASHBOARD_GETS if r not in PUBLIC_PAGES]
PROTECTED_POSTS = sorted(r for r in PAGE_ROLES if r[0] == "POST")


def params(seeded: Seeded, *, mine: bool) -> dict[str, str]:
    """Path parameters naming the signed-in tenant's resource (`mine`) or another tenant's. (The
    evil system's name holds a "/", which no path segment matches: its candidate stands in.)"""
    return {
        "name": quote("copperfin-returns" if mine else OTHER_SYSTEM, safe=""),
        "candidate_id": seeded.evil if mine else seeded.other,
    }


def csrf_of(client: TestClient, url: str = "/submit") -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', client.get(url).text)
    assert found is not None
    return found.group(1)


def other_hold(engine: sa.Engine, seeded: Seeded) -> uuid.UUID:
    with Session(engine) as session:
        hold = session.exec(
            select(Hold).where(Hold.candidate_id == uuid.UUID(seeded.other))
        ).first()
        assert hold is not None
        return hold.id


# ------------------------------------------------------------------------------- the table

ADMIN_PAGES = {("GET", "/keys"), ("GET", "/webhooks")}


def test_every_dashboard_route_is_a_page_route_in_the_table(anonymous_client: TestClient) -> None:
    api = set(ROUTE_ROLES) | PUBLIC
    found: set[tuple[str, str]] = set()
    for context in iter_route_contexts(anonymous_client.app.routes):  # type: ignore[attr-defined]
        route = context.original_route
        if isinstance(route, APIRoute):
            for method in context.methods or ():
                if (method, context.path) in api:
                    continue
                assert isinstance(route, PageRoute), context.path
                found.add((method, str(context.path)))
        else:
            assert isinstance(route, Route) and context.path in DOCS, route
    assert found == set(PAGE_ROLES) | PUBLIC_PAGES
    assert not set(PAGE_ROLES) & PUBLIC_PAGES
    assert {r for r in DASHBOARD_GETS} <= found
    # Every read is open to every role, as on the API — but the people and keys page and the
    # webhooks page, the admin's as `GET /v1/api-keys` and `GET /v1/webhooks` are; every write
    # names the API's roles.
    assert all(PAGE_ROLES[r] == frozenset(KeyRole) for r in PROTECTED_GETS if r not in ADMIN_PAGES)
    assert all(PAGE_ROLES[r] == frozenset({KeyRole.ADMIN}) for r in ADMIN_PAGES)


# ------------------------------------------------------------------------------ every page


@pytest.mark.parametrize("route", PROTECTED_GETS, ids=" ".join)
def test_each_page_sends_an_anonymous_browser_to_sign_in(
    route: tuple[str, str], anonymous_client: TestClient, seeded: Seeded
) -> None:
    url = route[1].format(**params(seeded, mine=True))
    answer = TestClient(anonymous_client.app).get(url, follow_redirects=False)
    assert answer.status_code == 303, answer.text
    location = answer.headers["location"]
    assert location.startswith("/signin?next=")
    assert parse_qs(urlsplit(location).query)["next"] == [unquote(url)]
    assert EVIL not in answer.text and seeded.evil not in answer.text


@pytest.mark.parametrize("route", PROTECTED_GETS, ids=" ".join)
def test_each_page_shows_the_tenants_own_resources_escaped_and_no_one_elses(
    route: tuple[str, str], web_client: TestClient, seeded: Seeded
) -> None:
    path = route[1]
    if route in ADMIN_PAGES:
        web_client = signed_in(web_client, "ada", "/", roles=(KeyRole.ADMIN,))
    mine = web_client.get(path.format(**params(seeded, mine=True)))
    assert mine.status_code == 200, mine.text
    assert EVIL not in mine.text
    assert OTHER_SYSTEM not in mine.text and seeded.other not in mine.text
    if "{" in path:
        theirs = web_client.get(path.format(**params(seeded, mine=False)))
        assert theirs.status_code == 404, theirs.text
        assert "Not found" in theirs.text
        assert OTHER_SYSTEM not in theirs.text or path == "/systems/{name}"


def test_the_other_tenant_sees_its_own_resources_and_not_these(
    anonymous_client: TestClient, seeded: Seeded
) -> None:
    globex = signed_in(anonymous_client, "gus", "/", tenant="globex")
    systems = globex.get("/").text
    assert OTHER_SYSTEM in systems and "copperfin-returns" not in systems
    assert globex.get(f"/candidates/{seeded.other}").status_code == 200
    assert globex.get(f"/candidates/{seeded.other}/dossier").status_code == 200
    assert seeded.other in globex.get("/holds").text
    for mine in (seeded.baseline, seeded.typed, seeded.running):
        assert globex.get(f"/candidates/{mine}").status_code == 404
        assert globex.get(f"/candidates/{mine}/dossier").status_code == 404
    assert globex.get("/systems/copperfin-returns").status_code == 404
    assert seeded.baseline not in globex.get("/candidates").text


def test_the_event_log_holds_only_the_tenants_events(
    web_client: TestClient, seeded: Seeded
) -> None:
    theirs = web_client.get(f"/events?candidate={seeded.other}").text
    assert "No events." in theirs and f'href="/candidates/{seeded.other}"' not in theirs
    mine = web_client.get(f"/events?candidate={seeded.baseline}").text
    assert "candidate.submitted" in mine and "dossier.issued" in mine


def test_dossier_envelopes_download_with_the_session_for_the_tenant_only(
    web_client: TestClient, web_engine: sa.Engine, seeded: Seeded
) -> None:
    page = web_client.get(f"/candidates/{seeded.baseline}/dossier").text
    link = re.search(r'href="(/v1/dossiers/[^"]+/envelope)"', page)
    assert link is not None
    assert web_client.get(link.group(1)).json()["payloadType"]
    with Session(web_engine) as session:
        other = session.exec(
            select(Dossier.id).where(col(Dossier.candidate_id) == uuid.UUID(seeded.other))
        ).first()
    assert other is not None
    assert web_client.get(f"/v1/dossiers/{other}/envelope").status_code == 404
    assert TestClient(web_client.app).get(link.group(1)).status_code == 401


# ------------------------------------------------------------------------------ sign-in


@pytest.mark.parametrize(
    ("asked", "sent"),
    [
        ("/holds?status=waived", "/holds?status=waived"),
        ("/candidates/x", "/candidates/x"),
        ("//evil.example/x", "/"),
        ("/\\evil.example", "/"),
        ("https://evil.example/", "/"),
        ("javascript:alert(1)", "/"),
        ("/\tx", "/"),
        ("", "/"),
    ],
)
def test_sign_in_redirects_only_to_paths_on_this_site(
    asked: str, sent: str, anonymous_client: TestClient
) -> None:
    assert safe_next(asked) == sent
    browser = TestClient(anonymous_client.app)
    form = browser.get("/signin", params={"next": asked})
    if "\t" in asked:  # a control character in a query is refused before the page runs
        assert form.status_code == 422
        form = browser.get("/signin")
    token = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert token is not None
    answer = browser.post(
        "/signin",
        data={
            "credential": key_for(anonymous_client, "rita").secret,
            "csrf": token.group(1),
            "next": asked,
        },
        follow_redirects=False,
    )
    assert answer.status_code == 303 and answer.headers["location"] == sent


def test_signing_in_returns_to_the_page_asked_for(
    anonymous_client: TestClient, seeded: Seeded
) -> None:
    browser = TestClient(anonymous_client.app)
    asked = f"/candidates/{seeded.typed}"
    sent = browser.get(asked, follow_redirects=False).headers["location"]
    form = browser.get(sent).text
    assert f'name="next" value="{asked}"' in form
    token = re.search(r'name="csrf" value="([^"]+)"', form)
    assert token is not None
    answer = browser.post(
        "/signin",
        data={
            "credential": key_for(anonymous_client, "rita").secret,
            "csrf": token.group(1),
            "next": asked,
        },
    )
    assert answer.status_code == 200 and str(answer.url).endswith(asked)


def test_a_revoked_key_is_signed_out_at_once(
    anonymous_client: TestClient, web_engine: sa.Engine
) -> None:
    browser = signed_in(anonymous_client, "rex", "/")
    assert browser.get("/", follow_redirects=False).status_code == 200
    token = csrf_of(browser)
    with Session(web_engine) as session:
        key = session.get(ApiKey, key_for(anonymous_client, "rex").id)
        assert key is not None
        revoke(session, key)
        session.commit()
    again = browser.get("/", follow_redirects=False)
    assert again.status_code == 303 and again.headers["location"].startswith("/signin")
    posted = browser.post("/submit", data={"manifest": "{}", "source_revision": "x", "csrf": token})
    assert posted.status_code == 401


# -------------------------------------------------------------------------------- roles

POST_PARAMS = {
    "hold_id": str(uuid.UUID(int=4)),
    "candidate_id": str(uuid.UUID(int=1)),
}
POST_BODIES = {
    ("POST", "/submit"): {"manifest": '{"model": 1}', "source_revision": "x"},
    ("POST", "/holds/{hold_id}/waive"): {"reason": "r", "expires_at": "2999-01-01T00:00"},
    ("POST", "/holds/{hold_id}/reject"): {"reason": "r"},
}


@pytest.mark.parametrize("route", PROTECTED_POSTS, ids=" ".join)
def test_each_role_may_post_exactly_where_the_api_allows_it(
    route: tuple[str, str], anonymous_client: TestClient
) -> None:
    path = route[1]
    url = path.format(**POST_PARAMS)
    body = POST_BODIES.get(route, {})
    nobody = TestClient(anonymous_client.app)
    token = csrf_of(nobody, "/signin")
    assert nobody.post(url, data={**body, "csrf": token}).status_code == 401
    api_route = {
        "/submit": ("POST", "/v1/candidates"),
        "/holds/{hold_id}/waive": ("POST", "/v1/holds/{hold_id}/waive"),
        "/holds/{hold_id}/reject": ("POST", "/v1/holds/{hold_id}/reject"),
        "/candidates/{candidate_id}/rerun": ("POST", "/v1/candidates/{candidate_id}/rerun"),
    }[path]
    assert PAGE_ROLES[route] == ROUTE_ROLES[api_route]
    for role in KeyRole:
        browser = signed_in(
            anonymous_client, f"only-{role.value}", "/", tenant="roles", roles=(role,)
        )
        answer = browser.post(url, data={**body, "csrf": csrf_of(browser)})
        if role in PAGE_ROLES[route]:
            # Past the role check: the unknown hold or candidate, or the bad manifest, answers.
            assert answer.status_code in (400, 404, 422), (role, answer.text)
        else:
            assert answer.status_code == 403, (role, answer.text)
            assert "may not do this" in answer.text


def test_review_forms_show_only_to_reviewers_and_the_submit_form_says_who_may(
    anonymous_client: TestClient, web_client: TestClient
) -> None:
    submitter = signed_in(anonymous_client, "only-sub", "/", roles=(KeyRole.SUBMITTER,))
    holds = submitter.get("/holds").text
    assert 'id="hold-' in holds and "/waive" not in holds and "/reject" not in holds
    assert "has no submitter role" not in submitter.get("/submit").text
    reviewer = signed_in(anonymous_client, "only-rev", "/", roles=(KeyRole.REVIEWER,))
    assert "/reject" in reviewer.get("/holds").text
    assert "has no submitter role" in reviewer.get("/submit").text


def test_another_tenants_hold_and_candidate_cannot_be_reviewed_or_rerun(
    web_client: TestClient, web_engine: sa.Engine, seeded: Seeded
) -> None:
    hold = other_hold(web_engine, seeded)
    token = csrf_of(web_client)
    for action in ("waive", "reject"):
        answer = web_client.post(
            f"/holds/{hold}/{action}",
            data={"reason": "not mine", "expires_at": "2999-01-01T00:00", "csrf": token},
        )
        assert answer.status_code == 404, answer.text
    rerun = web_client.post(f"/candidates/{seeded.other}/rerun", data={"csrf": token})
    assert rerun.status_code == 404
    with Session(web_engine) as session:
        still = session.get(Hold, hold)
        assert still is not None and still.status == "open"


# -------------------------------------------------------------------------------- limits


def test_dashboard_submissions_count_against_the_keys_limit_with_the_api(
    anonymous_client: TestClient, web_settings: Settings
) -> None:
    state = anonymous_client.app.state  # type: ignore[attr-defined]
    limit = SubmissionLimit(web_settings, counter=MemoryCounter())
    limit.per_minute = 2
    kept, state.submission_limit = state.submission_limit, limit
    try:
        _submit_until_limited(anonymous_client)
    finally:
        state.submission_limit = kept


def _submit_until_limited(anonymous_client: TestClient) -> None:
    browser = signed_in(anonymous_client, "lim", "/submit", roles=(KeyRole.SUBMITTER,))
    manifest = example("typed")
    manifest["system"] = "limited-from-the-form"
    body = {"source_revision": "l1", "manifest": manifest, "plan": {"trials": 1}}
    key = key_for(anonymous_client, "lim", roles=(KeyRole.SUBMITTER,))
    by_api = browser.post("/v1/candidates", json=body, headers=key.headers)
    assert by_api.status_code == 202, by_api.text
    form = {
        "manifest": json.dumps(manifest),
        "source_revision": "l2",
        "trials": "1",
        "csrf": csrf_of(browser),
    }
    first = browser.post("/submit", data=form, follow_redirects=False)
    assert first.status_code == 303, first.text
    second = browser.post("/submit", data=form, follow_redirects=False)
    assert second.status_code == 429, second.text
    assert int(second.headers["retry-after"]) >= 1
    assert "submissions this minute" in second.text
