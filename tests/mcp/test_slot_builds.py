"""Slots are one build: a world whose copies name themselves by number (`warehouse-shop-0`, `-1`,
...) is one build at any concurrency, while copies that report different versions still hold
(`build_mismatch`)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from service.cli import main
from service.core.system.endpoint import slot_build
from service.core.system.manifest import build_endpoints, parse_manifest
from tests.mcp.conftest import EXAMPLE, free_port, wait_port

pytestmark = pytest.mark.timeout(600)
SLOTS = 8
FAULT = "ship_order_timeout_after_commit"


@contextmanager
def world(db: Path, *extra: str) -> Iterator[dict[str, Any]]:
    """The warehouse servers with `SLOTS` copies, each naming itself by its number; the careful
    agent's manifest for them, declaring no build (as a new user's does)."""
    shop, admin = free_port(), free_port()
    argv = [sys.executable, str(EXAMPLE / "servers.py"), "http", "--db", str(db)]
    argv += ["--shop-port", str(shop), "--admin-port", str(admin), "--slots", str(SLOTS)]
    proc = subprocess.Popen(
        [*argv, "--slot-names", *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_port(shop)
        wait_port(admin)
        data: dict[str, Any] = json.loads((EXAMPLE / "manifest.slots.json").read_text())
        data["tools"]["slots"] = SLOTS
        command = [sys.executable, str(EXAMPLE / "agents.py"), "careful", "--lines"]
        data["target"]["runner"]["command"] = command
        data["tools"]["servers"] = {
            "shop": {"url": f"http://127.0.0.1:{shop}/s/{{slot}}/mcp"},
            "admin": {"url": f"http://127.0.0.1:{admin}/s/{{slot}}/mcp"},
        }
        yield data
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def named(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with world(tmp_path_factory.mktemp("named") / "world.db") as data:
        yield data


def assay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict[str, Any], concurrency: int
) -> dict[str, Any]:
    # The fixed plan runs a fault's trials side by side: a trial a slot, so every copy answers.
    path = tmp_path / f"manifest-{concurrency}.json"
    path.write_text(json.dumps(data))
    args = ["assay", str(path), "--trials", str(max(2, concurrency)), "--json", "--seed", "5"]
    main([*args, "--rule", "fixed", "--concurrency", str(concurrency), "--mode", FAULT])
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


@pytest.mark.parametrize("concurrency", [1, 4, 8])
def test_copies_that_name_themselves_by_number_are_one_build_at_1_4_and_8_slots(
    named: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str], concurrency: int
) -> None:
    report = assay(tmp_path, capsys, named, concurrency)
    assert report["decision"] == "allow", report["reasons"]
    for server in ("shop", "admin"):
        entry = report["builds"][f"tools.servers.{server}"]
        # Every copy's `warehouse-shop-<i>@1.0.0` is the one build, whichever copies answered.
        [reported] = entry["reported"]
        assert reported["build"] == f"warehouse-{server}-{{slot}}@1.0.0"
        assert entry["assurance"] == "reported"


def test_copies_that_report_another_version_still_hold_as_different_builds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every copy answers at 8 slots; the last reports 1.0.1.
    with world(tmp_path / "world.db", "--version-at", f"{SLOTS - 1}=1.0.1") as data:
        report = assay(tmp_path, capsys, data, SLOTS)
    assert report["decision"] == "hold"
    mismatch = [r["message"] for r in report["reasons"] if r["code"] == "build_mismatch"]
    assert mismatch, report["reasons"]
    assert any(
        "tools.servers.shop reported 2 different builds" in m
        and "'warehouse-shop-{slot}@1.0.1'" in m
        for m in mismatch
    )


@pytest.mark.parametrize(
    ("build", "one"),
    [
        ("boxoffice-desk-3@1.0.0", "boxoffice-desk-{slot}@1.0.0"),
        ("desk_12@2.1", "desk_{slot}@2.1"),
        ("desk-3", "desk-{slot}"),
        ("@team/desk-3@1.0", "@team/desk-{slot}@1.0"),
        # The version is the build's: never rewritten. Nor is a number that is part of a word.
        ("desk@1.0.0-3", "desk@1.0.0-3"),
        ("desk3@1.0", "desk3@1.0"),
        ("desk-v2@1.0", "desk-v2@1.0"),
        ("desk-{slot}@1.0", "desk-{slot}@1.0"),
    ],
)
def test_a_per_slot_name_is_the_number_that_ends_the_servers_name(build: str, one: str) -> None:
    assert slot_build(build) == one


def test_a_declared_build_in_a_world_with_slots_is_read_as_its_reports_are() -> None:
    data: dict[str, Any] = json.loads((EXAMPLE / "manifest.slots.json").read_text())
    data["tools"]["servers"]["shop"]["build"] = "warehouse-shop-0@1.0.0"
    data["tools"]["servers"]["admin"]["build"] = "warehouse-admin-{slot}@1.0.0"
    declared = build_endpoints(parse_manifest(data))
    assert declared == {
        "tools.servers.admin": "warehouse-admin-{slot}@1.0.0",
        "tools.servers.shop": "warehouse-shop-{slot}@1.0.0",
    }
    # A world without slots reads a name as written.
    del data["tools"]["slots"]
    for server in ("shop", "admin"):
        data["tools"]["servers"][server]["url"] = "http://127.0.0.1:9/mcp"
    assert build_endpoints(parse_manifest(data))["tools.servers.shop"] == "warehouse-shop-0@1.0.0"
