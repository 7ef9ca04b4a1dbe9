"""The sandbox lock is per tenant and per world: unrelated worlds whose admin servers share a
name no longer serialise each other; trials on one world do, and a waiter past its bound fails
naming the assay that holds the world."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.core.faults.contract_catalogue import catalogue_for
from service.core.system.contract import Contract
from service.core.system.manifest import contract_of, parse_manifest
from service.mcp.engine import McpEngine
from service.mcp.lock import SandboxBusy, sandbox_lock, world_key
from tests.mcp.conftest import Sandbox, free_port

pytestmark = pytest.mark.timeout(300)


def contract(admin_url: str) -> Contract:
    """The warehouse manifest whose server named `admin` lives at `admin_url`."""
    sandbox = Sandbox(Path("unused.db"), free_port(), 1)
    data = sandbox.manifest("careful")
    data["tools"]["servers"]["admin"] = {"url": admin_url}
    return contract_of(parse_manifest(data))


def test_worlds_whose_admin_servers_share_a_name_have_different_keys() -> None:
    a = world_key(contract("http://10.0.0.1:9001/mcp"), "tenant-a")
    b = world_key(contract("http://10.0.0.2:9001/mcp"), "tenant-b")
    c = world_key(contract("http://10.0.0.1:9001/mcp"), "tenant-b")
    assert len({a, b, c}) == 3
    assert a == world_key(contract("http://10.0.0.1:9001/mcp"), "tenant-a")


def test_two_different_worlds_are_held_at_once() -> None:
    a = world_key(contract("http://10.0.0.1:9001/mcp"), "tenant-a")
    b = world_key(contract("http://10.0.0.2:9001/mcp"), "tenant-b")
    with sandbox_lock(a, "assay-a", 5.0), sandbox_lock(b, "assay-b", 0.5):
        pass


def test_two_trials_on_one_world_serialise_and_the_waiter_names_the_holder() -> None:
    key = world_key(contract(f"http://10.0.0.3:{free_port()}/mcp"), "tenant-a")
    held = threading.Event()
    release = threading.Event()

    def first() -> None:
        with sandbox_lock(key, "assay-first", 5.0):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=first)
    thread.start()
    held.wait(10)
    notes: list[str] = []
    threading.Timer(0.5, release.set).start()
    started = time.monotonic()
    with sandbox_lock(key, "assay-second", 10.0, notes.append):
        waited = time.monotonic() - started
    thread.join(10)
    assert waited >= 0.4
    assert notes == [f"waiting for sandbox {key}, held by assay assay-first"]


def test_a_waiter_past_its_bound_fails_naming_the_holder() -> None:
    key = world_key(contract(f"http://10.0.0.4:{free_port()}/mcp"), "tenant-a")
    with (
        sandbox_lock(key, "assay-holding", 5.0),
        pytest.raises(SandboxBusy, match="held by assay assay-holding"),
        sandbox_lock(key, "assay-waiting", 0.3),
    ):
        pass


@pytest.fixture
def engine(sandbox: Sandbox) -> Iterator[McpEngine]:
    manifest = parse_manifest(sandbox.manifest("careful"))
    engine = McpEngine(manifest, catalogue_for(manifest), tenant="tenant-a")
    try:
        yield engine
    finally:
        engine.close()


def test_an_engine_whose_world_is_busy_past_its_bound_records_a_sandbox_busy_target_error(
    engine: McpEngine,
) -> None:
    engine.lock_wait_s = 0.3
    notes: list[str] = []
    engine.on_wait = notes.append
    with sandbox_lock(engine.world, "assay-other", 5.0):
        busy = engine.run_trial(None, 1, 1, frozenset(), False)
    assert busy.outcome.verdict == "hold"
    assert "sandbox busy" in str(busy.target_error)
    assert "assay-other" in str(busy.target_error)
    assert notes and "held by assay assay-other" in notes[0]
    free = engine.run_trial(None, 2, 2, frozenset(), False)
    assert free.outcome.verdict == "release", free.target_error


def test_an_engine_of_another_tenant_runs_while_this_tenants_world_is_held(
    engine: McpEngine, sandbox: Sandbox
) -> None:
    manifest = parse_manifest(sandbox.manifest("careful"))
    other = McpEngine(manifest, catalogue_for(manifest), tenant="tenant-b")
    try:
        other.lock_wait_s = 0.3
        with sandbox_lock(engine.world, "assay-of-tenant-a", 5.0):
            rec = other.run_trial(None, 3, 3, frozenset(), False)
        assert rec.outcome.verdict == "release", rec.target_error
    finally:
        other.close()
