"""A framework host's MCP sessions share one TLS context: the SDKs' default client made its own
for every run, loading the CA bundle each time (a tenth of a LangGraph agent's assay CPU), while
the client keeps the SDK default's timeouts and the environment's trust store."""

from __future__ import annotations

import asyncio
import ssl

import httpcore2
import httpx2
import pytest

from assaygate import frameworks


def count_contexts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the TLS contexts loaded with the trust store (what costs), not the clients made."""
    made = [0]
    real = httpcore2.default_ssl_context

    def counted(**kwargs: bool) -> ssl.SSLContext:
        made[0] += 1
        return real(**kwargs)

    monkeypatch.setattr(httpcore2, "default_ssl_context", counted)
    return made


async def open_and_close(client: httpx2.AsyncClient) -> httpx2.Timeout:
    async with client:
        return client.timeout


def test_runs_of_a_host_make_one_tls_context_between_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frameworks, "_TLS", [])
    made = count_contexts(monkeypatch)
    for _ in range(5):
        asyncio.run(open_and_close(frameworks.http_client()))
    assert made[0] == 1


def test_a_default_client_per_run_would_make_one_each(monkeypatch: pytest.MonkeyPatch) -> None:
    # What the counter sees when nothing shares a context: the first test's count is not vacuous.
    made = count_contexts(monkeypatch)
    for _ in range(3):
        asyncio.run(open_and_close(httpx2.AsyncClient()))
    assert made[0] == 3


def test_the_client_keeps_the_sdk_defaults_and_what_the_sdk_passes() -> None:
    default = asyncio.run(open_and_close(frameworks.http_client()))
    assert (default.connect, default.read) == (30.0, 300.0)
    given = httpx2.Timeout(5.0, read=7.0)
    client = frameworks.http_client(headers={"x-run": "1"}, timeout=given)
    assert client.headers["x-run"] == "1"
    assert asyncio.run(open_and_close(client)) == given
