"""Every client a shared worker uses for a tenant's endpoint ends at its total deadline, however
the peer trickles: an http target's task, an mcp target's http runner, the opening of a session
to an MCP server over HTTP and the listing of its tools, a webhook attempt. A
peer answering one byte every half second is inside each client's per-read timeout, so without
the deadline every one of these calls would last the whole trickle (more than half a minute)."""

from __future__ import annotations

import http.client
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.app.webhooks import AttemptOutcome, Outgoing
from service.core.system.contract import Upstream
from service.core.system.manifest import contract_of, parse_manifest
from service.core.trial.harness import Runtime, run_trial
from service.mcp.engine import Loop
from service.mcp.hooks import Upstreams
from service.mcp.runners import HttpRunner
from service.net.deadline import Deadline, DeadlinePassed, exchange
from service.settings import Settings
from service.targets import HttpTarget
from tests.mcp.conftest import EXAMPLE
from tests.support.trickle import Trickle, TricklingListing
from tests.targets.conftest import example, plan
from worker.webhooks import post

DEADLINE_S = 1.5
# A loaded machine's thread may see the cut late; nothing like the trickle's half minute.
LATE_S = 1.5


@pytest.fixture
def trickle() -> Iterator[Trickle]:
    with Trickle(every_s=0.5) as served:
        yield served


def test_an_http_target_trickling_its_reply_is_a_timeout_at_the_calls_deadline(
    trickle: Trickle,
) -> None:
    manifest = example("typed", kind="http", url=trickle.url)
    p = plan(1, "timeout_after_commit")
    started = time.monotonic()
    with HttpTarget(trickle.url, timeout_s=DEADLINE_S) as target:
        error = run_trial(Runtime(manifest, p.resolve_catalogue(), target), p.faults()[0], 1, 2)
    took = time.monotonic() - started
    assert (error.target_error or "").startswith("TargetTimeout: the agent did not answer within")
    # One call, its retry-free timeout: the trial ends with the deadline, not the trickle.
    assert took <= DEADLINE_S + LATE_S, took


def test_an_http_runner_trickling_its_reply_is_a_timeout_at_the_runs_deadline(
    trickle: Trickle,
) -> None:
    runner = HttpRunner(trickle.url)
    started = time.monotonic()
    try:
        result = runner.run({"id": "t"}, "http://127.0.0.1:1/mcp", DEADLINE_S, threading.Event())
    finally:
        runner.close()
    assert result.timed_out and result.error is not None, result
    assert time.monotonic() - started <= DEADLINE_S + LATE_S


def test_an_https_runner_trickling_its_tls_handshake_is_a_timeout_at_the_runs_deadline() -> None:
    # A handshake trickled a byte every 0.5 s (69 of them) stays inside any per-read timeout:
    # the handshake is given what is left of the run as one timeout for all its reads.
    with Trickle(every_s=0.5, tls=True) as handshake:
        runner = HttpRunner(handshake.url)
        started = time.monotonic()
        try:
            result = runner.run(
                {"id": "t"}, "http://127.0.0.1:1/mcp", DEADLINE_S, threading.Event()
            )
        finally:
            runner.close()
        took = time.monotonic() - started
    assert handshake.connected.is_set()
    assert result.timed_out and result.error is not None, result
    assert took <= DEADLINE_S + LATE_S, took


def test_a_webhook_attempt_at_a_trickling_receiver_fails_at_its_deadline(
    trickle: Trickle, tmp_path: Path
) -> None:
    settings = Settings(data_dir=tmp_path, webhook_timeout_s=DEADLINE_S, egress_allow_loopback="1")
    body = json.dumps({"event": "decision", "links": {}})
    sent = Outgoing(uuid.uuid4(), 1, "decision", trickle.url, "json", "whsec_test", body)
    attempt = post(settings, sent)
    assert attempt.outcome is AttemptOutcome.FAILED and attempt.status_code is None
    assert attempt.error == f"no whole reply within {DEADLINE_S:g} s (the attempt's deadline)"
    assert attempt.duration_ms <= (DEADLINE_S + LATE_S) * 1000


def test_a_reply_cut_by_the_deadline_is_never_taken_for_a_whole_one(trickle: Trickle) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", trickle.port)
    try:
        with pytest.raises(DeadlinePassed), Deadline(DEADLINE_S) as deadline:
            exchange(conn, deadline, "POST", "/hook", b"{}", {})
    finally:
        conn.close()
    assert deadline.passed


def test_an_mcp_server_trickling_its_sessions_opening_is_cut_at_the_open_deadline(
    trickle: Trickle,
) -> None:
    manifest = parse_manifest(json.loads((EXAMPLE / "manifest.careful.json").read_text()))
    contract = contract_of(manifest)
    servers = {name: Upstream(url=trickle.url) for name in contract.servers}
    upstreams = Upstreams(
        contract.model_copy(update={"servers": servers}), open_timeout_s=DEADLINE_S
    )
    loop = Loop()
    started = time.monotonic()
    try:
        with pytest.raises(TimeoutError, match=f"opened no MCP session within {DEADLINE_S:g} s"):
            loop.run(upstreams.open(), 60)
    finally:
        loop.stop()
    assert time.monotonic() - started <= DEADLINE_S + LATE_S


def test_an_mcp_server_trickling_its_tool_listing_is_cut_at_the_listing_deadline() -> None:
    manifest = parse_manifest(json.loads((EXAMPLE / "manifest.careful.json").read_text()))
    contract = contract_of(manifest)
    loop = Loop()
    with TricklingListing(every_s=0.5) as server:
        servers = {name: Upstream(url=server.url) for name in contract.servers}
        upstreams = Upstreams(
            contract.model_copy(update={"servers": servers}), list_timeout_s=DEADLINE_S
        )
        try:
            loop.run(upstreams.open(), 60)  # the session opens as promptly as ever
            started = time.monotonic()
            cut = f"{server.url} listed no tools within {DEADLINE_S:g} s"
            with pytest.raises(DeadlinePassed, match=cut):
                loop.run(upstreams.tools(), 60)
            took = time.monotonic() - started
        finally:
            loop.run(upstreams.close(), 60)
            loop.stop()
    assert server.listing.is_set()  # the listing was answered, a byte at a time
    assert took <= DEADLINE_S + LATE_S, took
