"""`submit --wait` polls the candidate less often the longer its assay runs: the first pause is
the interval, each later one a quarter longer, never longer than the ceiling (a candidate's read
costs the API a dozen milliseconds of CPU, and a CI job may wait for minutes)."""

from __future__ import annotations

import itertools
import time
from typing import Any

import httpx
import pytest

from service.cli import ci


def served(statuses: list[str]) -> tuple[httpx.Client, list[str]]:
    """A client whose candidate reads answer `statuses` in turn (the last one repeated)."""
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        status = statuses[min(len(asked), len(statuses)) - 1]
        return httpx.Response(200, json={"id": "c1", "assay_id": "a1", "status": status})

    return httpx.Client(base_url="http://gate", transport=httpx.MockTransport(answer)), asked


def pauses_until_done(
    monkeypatch: pytest.MonkeyPatch, polls: int, **pace: float
) -> tuple[list[float], dict[str, Any]]:
    slept: list[float] = []
    monkeypatch.setattr(ci.time, "sleep", slept.append)
    client, asked = served(["running"] * (polls - 1) + ["done"])
    with client:
        found = ci.wait_for_decision(client, "c1", time.monotonic() + 60, **pace)
    assert asked == ["/v1/candidates/c1"] * polls
    return slept, found


def test_the_pauses_grow_by_a_quarter_from_the_interval_up_to_the_ceiling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept, found = pauses_until_done(monkeypatch, 20)
    assert found["status"] == "done"
    assert len(slept) == 19
    assert slept[0] == pytest.approx(0.2)
    assert slept[1] == pytest.approx(0.25)
    assert all(b >= a for a, b in itertools.pairwise(slept))
    assert max(slept) == pytest.approx(1.0)
    assert slept[-1] == pytest.approx(1.0)


def test_an_interval_above_the_ceiling_stays_the_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    slept, _ = pauses_until_done(monkeypatch, 5, interval=2.0, ceiling=1.0)
    assert slept == [2.0] * 4


def test_a_decided_candidate_is_returned_without_a_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    slept, found = pauses_until_done(monkeypatch, 1)
    assert slept == [] and found["status"] == "done"
