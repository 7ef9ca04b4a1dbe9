"""The dashboard's pages, rendered by the real app from rows the db layer wrote."""

from __future__ import annotations

import json
import re
import uuid

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlmodel import Session

from service.db import queries
from service.db import tenant as tenants
from service.db.apikey import ensure_tenant
from service.db.models import Event, System
from service.keys import KeyRing
from service.settings import Settings
from tests.web.conftest import EVIL, Fresh, Seeded, signed_in
from tests.web.seed import example, seed_candidate


@pytest.fixture(scope="module")
def unreviewed(web_settings: Settings, web_engine: sa.Engine) -> str:
    """A system of its own, like copperfin-returns but never reviewed: the review tests waive
    copperfin-returns' hold, and this module must not depend on running before them."""
    assert web_settings.keys_dir is not None
    signer = KeyRing(web_settings.keys_dir).load_or_create()
    with Session(web_engine, expire_on_commit=False) as session:
        for version, name in (("1.0.0", "baseline"), ("1.1.0", "typed")):
            seed_candidate(
                session, system="pages-returns", version=version, example_name=name, signer=signer
            )
        session.commit()
    return "pages-returns"


def test_systems_page_shows_each_systems_decision_with_its_reasons(
    web_client: TestClient, seeded: Seeded, unreviewed: str
) -> None:
    page = web_client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    row = re.search(
        rf'<tr class="row-(\w+)">\s*<td class="name"><a href="/systems/{unreviewed}"', page.text
    )
    assert row and row.group(1) == "hold"  # the typed candidate is the latest
    assert "break_trace_lineage" in page.text
    # The system whose first assay still runs: the gate holds it (pending), as the API says.
    running = re.search(
        r'<tr class="row-(\w+)">\s*<td class="name"><a href="/systems/still-running">.*?'
        r'<td class="gate">(.*?)</td>',
        page.text,
        re.S,
    )
    assert running and running.group(1) == "hold"
    assert "pill-hold" in running.group(2) and "assay running" in running.group(2)
    assert "pill-running" not in page.text


def test_html_in_system_names_versions_and_reasons_is_escaped(
    web_client: TestClient, seeded: Seeded
) -> None:
    for url in ("/", "/candidates", f"/candidates/{seeded.evil}", "/events"):
        page = web_client.get(url)
        assert page.status_code == 200, url
        assert EVIL not in page.text, url
        assert "&lt;script&gt;" in page.text, url


def test_every_page_forbids_inline_scripts_and_framing(web_client: TestClient) -> None:
    page = web_client.get("/")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    assert "<script>" not in page.text


def test_baseline_candidate_page_shows_block_its_reasons_and_the_evidence(
    web_client: TestClient, seeded: Seeded
) -> None:
    page = web_client.get(f"/candidates/{seeded.baseline}").text
    decision = page[page.index('id="decision"') :]
    assert "pill-block" in decision[:400]
    assert "unsafe_escape" in decision and "subject_swap: unsafe escape in 20 of 20" in decision
    assert page.count('class="sig"') == 18  # a signature per fault of the full catalogue
    assert 'class="envelope"' in page and 'class="coverage"' in page
    assert "Diagnosis of negative results" in page and "narrow authority" in page
    assert "Transfer" in page and "Counterfactual" in page
    assert "progress.js" not in page  # decided: no polling


def test_typed_candidate_counts_valid_counterfactuals(
    web_client: TestClient, seeded: Seeded
) -> None:
    page = web_client.get(f"/candidates/{seeded.typed}").text
    stat = re.search(r'<span class="n">(\d+)<small> / (\d+) / (\d+)</small>', page)
    assert stat is not None
    valid, invalid, _masked = (int(x) for x in stat.groups())
    assert valid > 0 and invalid == 0
    assert 'class="cf cf-valid"' in page


def test_each_fault_shows_its_floors_point_estimate_interval_and_what_was_compared(
    web_client: TestClient, seeded: Seeded
) -> None:
    page = web_client.get(f"/candidates/{seeded.typed}").text
    # Every fault's floors (the grid lists failing faults first, so the first may miss them).
    lists = [part.split("</ul>", 1)[0] for part in page.split('class="small floors"')[1:]]
    met = [f for f in lists if "useful service ≥ 80.0% (intervention): met — point estimate" in f]
    assert met, "no fault meets its useful-service floor"
    assert "95 % interval" in met[0] and "(baseline)" in met[0]


def test_a_running_candidate_polls_for_progress(web_client: TestClient, seeded: Seeded) -> None:
    page = web_client.get(f"/candidates/{seeded.running}").text
    assert '<script src="/static/progress.js" defer></script>' in page
    assert 'id="overall-progress"' in page and 'http-equiv="refresh"' in page
    assert 'id="decision"' not in page


def test_unknown_candidates_and_systems_are_404_pages(web_client: TestClient) -> None:
    for url in (
        "/candidates/not-a-uuid",
        f"/candidates/{'0' * 8}-0000-0000-0000-{'0' * 12}",
        "/systems/nope",
    ):
        page = web_client.get(url)
        assert page.status_code == 404 and "Not found" in page.text


def test_static_files_are_served_by_exact_name_only(web_client: TestClient) -> None:
    css = web_client.get("/static/dashboard.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert "@media print" in css.text
    again = web_client.get("/static/dashboard.css", headers={"If-None-Match": css.headers["etag"]})
    assert again.status_code == 304
    assert web_client.get("/static/..%2Froutes.py").status_code == 404
    assert web_client.get("/static/missing.js").status_code == 404


def test_systems_are_paginated_fifty_to_a_page(
    web_client: TestClient, web_engine: sa.Engine, seeded: Seeded
) -> None:
    with Session(web_engine) as session:
        tenant = ensure_tenant(session, "acme")
        session.add_all(System(name=f"zz-paged-{i:03d}", tenant_id=tenant.id) for i in range(55))
        session.commit()
    first = web_client.get("/").text
    assert first.count('<td class="name">') == 50 and 'rel="next"' in first
    second = web_client.get("/?page=2").text
    assert 'rel="prev"' in second and "zz-paged-054" in second
    filtered = web_client.get("/?q=zz-paged-01").text
    assert filtered.count('<td class="name">') == 10


def test_event_log_is_paginated_newest_first_and_filters_by_kind(
    web_client: TestClient, web_engine: sa.Engine, seeded: Seeded
) -> None:
    with Session(web_engine) as session:
        tenant = ensure_tenant(session, "acme").id
        session.add_all(
            Event(
                kind="audit",
                tenant_id=tenant,
                data={"action": "key.create", "target": f"key:{i}", "roles": ["admin"]},
            )
            for i in range(60)
        )
        session.commit()
    page = web_client.get("/events").text
    ids = [int(x) for x in re.findall(r'<td class="num muted">(\d+)</td>', page)]
    assert len(ids) == 50 and ids == sorted(ids, reverse=True)
    assert "key.create on key:59 by key" in page  # a sentence, not the raw JSON
    assert '{"action"' not in page and "&#34;action&#34;" not in page
    older = web_client.get(f"/events?before={ids[-1]}").text
    older_ids = [int(x) for x in re.findall(r'<td class="num muted">(\d+)</td>', older)]
    assert older_ids and max(older_ids) < ids[-1]
    decided = web_client.get("/events?kind=assay.decided").text
    kinds = set(re.findall(r'<span class="kind">([^<]+)</span>', decided))
    assert kinds == {"assay.decided"}


def test_an_assays_shard_events_are_folded_into_one_line_of_its_group(
    web_client: TestClient, web_engine: sa.Engine, fresh_typed: Fresh
) -> None:
    # Its own candidate: 74 events added to the session's seeded one would change what the event
    # pages of other tests show.
    candidate = fresh_typed.candidate
    with Session(web_engine) as session:
        row = queries.candidate(session, uuid.UUID(candidate))
        assert row is not None
        ids = {"candidate_id": row.candidate.id, "assay_id": row.assay.id}
        for shard in range(36):
            attempts = 2 if shard < 2 else 1  # two shards ran again after a lost worker
            for attempt in range(1, attempts + 1):
                session.add(
                    Event(
                        kind="shard.started",
                        shard_index=shard,
                        data={"attempt": attempt, "worker": f"w{shard % 2}"},
                        **ids,
                    )
                )
            session.add(Event(kind="shard.stored", shard_index=shard, data={"trials": 20}, **ids))
        session.commit()
    page = web_client.get(f"/events?candidate={candidate}").text
    kinds = re.findall(r'<span class="kind">([^<]+)</span>', page)
    assert "shard.started" not in kinds and "shard.stored" not in kinds
    assert kinds.count("shard.*") == 1
    assert "36 shards stored, 38 started (2 again after a lost worker) by 2 workers" in page
    assert 'class="group-head"' in page and f"{fresh_typed.system} 1.1.0" in page
    listed = web_client.get(f"/events?kind=shard.stored&candidate={candidate}").text
    assert re.findall(r'<span class="kind">([^<]+)</span>', listed).count("shard.stored") == 36
    assert "shard 35 stored: 20 trials" in listed


def test_submit_form_refuses_a_post_without_sign_in_or_without_its_token(
    web_client: TestClient,
) -> None:
    body = {"manifest": "{}", "source_revision": "abc"}
    fresh = TestClient(web_client.app)
    refused = fresh.post("/submit", data=body, follow_redirects=False)
    assert refused.status_code == 401
    assert web_client.post("/submit", data=body).status_code == 403
    form = web_client.get("/submit").text
    token = re.search(r'name="csrf" value="([^"]+)"', form)
    assert token is not None
    forged = web_client.post("/submit", data={**body, "csrf": token.group(1)[:-2] + "xx"})
    assert forged.status_code == 403


def test_submit_form_records_a_candidate_and_redirects_to_it(web_client: TestClient) -> None:
    web_client = signed_in(web_client, "sam", "/submit")
    form = web_client.get("/submit").text
    token = re.search(r'name="csrf" value="([^"]+)"', form)
    assert token is not None
    manifest = example("typed")
    manifest["system"] = "submitted-from-the-form"
    answer = web_client.post(
        "/submit",
        data={
            "manifest": json.dumps(manifest),
            "source_revision": "f00d",
            "trials": "10",
            "csrf": token.group(1),
        },
        follow_redirects=False,
    )
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"].startswith("/candidates/")
    page = web_client.get(answer.headers["location"]).text
    assert "submitted-from-the-form" in page and "f00d" in page


def test_submit_form_shows_what_is_wrong_with_a_manifest(web_client: TestClient) -> None:
    web_client = signed_in(web_client, "sam", "/submit")
    form = web_client.get("/submit").text
    token = re.search(r'name="csrf" value="([^"]+)"', form)
    assert token is not None
    answer = web_client.post(
        "/submit",
        data={
            "manifest": '{"model": 1, "surprise": true}',
            "source_revision": "x",
            "csrf": token.group(1),
        },
    )
    assert answer.status_code in (400, 422)
    assert 'role="alert"' in answer.text and "surprise" in answer.text


def test_a_control_character_in_a_page_query_or_path_is_a_422_page_naming_it(
    web_client: TestClient,
) -> None:
    for url, field in [
        ("/?q=%00", "q"),
        ("/events?kind=a%00", "kind"),
        ("/systems/a%00b", "name"),
        ("/candidates?cursor=%1b", "cursor"),
    ]:
        page = web_client.get(url)
        assert page.status_code == 422, url
        assert f"{field}: control character" in page.text, url
    # The browser is still signed in: the refusal did not touch its session.
    assert web_client.get("/").status_code == 200


def test_a_nul_in_a_manifest_submitted_from_the_form_is_refused_naming_its_path(
    web_client: TestClient,
) -> None:
    web_client = signed_in(web_client, "sam", "/submit")
    token = re.search(r'name="csrf" value="([^"]+)"', web_client.get("/submit").text)
    assert token is not None
    manifest = example("typed")
    manifest["system"] = "nul\u0000system"
    answer = web_client.post(
        "/submit",
        data={"manifest": json.dumps(manifest), "source_revision": "x", "csrf": token.group(1)},
    )
    assert answer.status_code in (400, 422)
    assert "system: control character U+0000" in answer.text


def test_systems_page_says_whether_the_tenant_may_run_code_and_how_an_operator_allows_it(
    anonymous_client: TestClient, web_engine: sa.Engine
) -> None:
    tenant = f"code-{uuid.uuid4().hex[:8]}"
    browser = signed_in(anonymous_client, "cody", "/", tenant=tenant)
    page = browser.get("/").text
    assert "Code: not allowed" in page
    assert f"assaygate tenants allow-code {tenant}" in page
    with Session(web_engine) as session:
        row = tenants.by_name(session, tenant)
        assert row is not None
        tenants.set_code_allowed(session, row, True)
        session.commit()
    page = browser.get("/").text
    assert "Code: allowed since" in page and f".tenant.{tenant}</code>" in page


def test_systems_page_shows_the_organisation_policy_each_scope_holds_the_tenant_to(
    anonymous_client: TestClient, web_engine: sa.Engine, web_settings: Settings
) -> None:
    from service.app import changes

    tenant = f"policy-{uuid.uuid4().hex[:8]}"
    browser = signed_in(anonymous_client, "polly", "/", tenant=tenant)
    page = browser.get("/").text
    assert "Organisation policy: none set" in page
    assert f"assaygate policy set {tenant} FILE" in page
    assert web_settings.keys_dir is not None
    signer = KeyRing(web_settings.keys_dir).load_or_create()
    with Session(web_engine) as session:
        for system, document in (
            (None, {"floors": {"recovered": 0.9}, "attribution": "required"}),
            ("refunds", {"rules": ["fixed"], "error": 0.01}),
        ):
            changes.set_policy(session, signer, changes.SetPolicy(tenant, system, document, "ops"))
    page = browser.get("/").text
    policy = page[page.index('class="sub org-policy"') :]
    policy = policy[: policy.index("</div>")]
    assert "<strong>tenant</strong> version 1" in policy
    assert "floors.recovered ≥ 0.9" in policy and "attribution: required" in policy
    assert "<strong>system refunds</strong> version 1" in policy
    assert "error ≤ 0.01" in policy and "rules: fixed" in policy
    assert "set by operator:ops" in policy


def test_a_sequential_candidate_page_shows_runs_and_cost_per_arm_and_why_each_fault_stopped(
    web_client: TestClient, web_engine: sa.Engine
) -> None:
    from service.core.faults.plan import parse_plan
    from service.core.shards.assay import run_assay
    from service.core.system.manifest import parse_manifest

    manifest = parse_manifest(example("baseline"))
    plan = parse_plan({"trials": 10, "seed": 7, "rule": "sequential", "modes": ["subject_swap"]})
    report = run_assay(manifest, plan, clock=iter(range(1000)).__next__).to_dict()
    with Session(web_engine, expire_on_commit=False) as session:
        recorded = seed_candidate(
            session, system="spend-returns", version="1.0.0", example_name="baseline", report=report
        )
        session.commit()
        candidate = recorded.candidate.id
    page = web_client.get(f"/candidates/{candidate}").text
    spend = page[page.index('id="spend"') :]
    assert "Runs and cost" in spend[:200] and "sequential plan" in spend[:200]
    assert "<td>intervention</td><td>1</td>" in spend
    # What the team pays apart from the gate's own naive agent (the reference target has none).
    team = report["spend"]["team"]["runs"]
    assert f'<tr id="spend-team"><td>your agent (what budgets count)</td><td>{team}</td>' in spend
    assert "<td>the gate&rsquo;s own naive agent</td><td>0</td>" in spend
    assert "stopped (violation)" in page


def test_a_reruns_floors_say_the_releases_record_they_were_read_on(
    web_client: TestClient, web_engine: sa.Engine
) -> None:
    from service.core.decision.floors import Record
    from service.core.faults.plan import parse_plan
    from service.core.shards.assay import run_assay
    from service.core.system.manifest import parse_manifest
    from tests.support.service import default_example

    document = default_example("typed")  # floors on the lower bound, as committed
    plan = parse_plan({"trials": 20, "seed": 7, "modes": ["subject_swap"]})
    fault = plan.faults()[0].id
    earlier = {fault: {("useful_service", "intervention"): Record(1, 6, 6)}}
    report = run_assay(parse_manifest(document), plan, earlier=earlier).to_dict()
    with Session(web_engine, expire_on_commit=False) as session:
        recorded = seed_candidate(
            session,
            system="rerun-returns",
            version="1.0.1",
            report=report,
            manifest_document=document,
        )
        session.commit()
        candidate = recorded.candidate.id
    page = web_client.get(f"/candidates/{candidate}").text
    assert (
        "useful service ≥ 80.0% (intervention): missed — point estimate 100.0%" in page
        and "read on the release's record of 2 attempts, 26 of 26 trials: the anytime-valid "
        "lower bound 79.7% is compared"
        in page
    )
