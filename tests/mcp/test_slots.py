"""Slots on a team's own world: the warehouse servers serve isolated copies (`http --slots N`),
the engine opens one proxy, session set and runner per copy, and trials run at once with the
same per-fault counts as one at a time."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.cli import main
from service.core.errors import ManifestInvalid
from service.core.system.contract import Hook, parse_contract
from service.core.system.manifest import parse_manifest
from service.mcp import engine as mcp_engine
from service.mcp.engine import McpEngine
from service.mcp.hooks import Upstreams
from service.mcp.lock import world_key
from tests.mcp.conftest import EXAMPLE, Sandbox, free_port, wait_port

pytestmark = pytest.mark.timeout(600)
SLOTS = 4
FAULTS = ("ship_order_timeout_after_commit", "check_release_revoked", "world_mutated")


class Slotted:
    """The warehouse servers with `SLOTS` worlds, world i at /s/<i>/mcp over `<db>.<i>`."""

    def __init__(self, db: Path, shop: int, admin: int) -> None:
        self.db = db
        self.shop = f"http://127.0.0.1:{shop}/s/{{slot}}/mcp"
        self.admin = f"http://127.0.0.1:{admin}/s/{{slot}}/mcp"

    def manifest(self, agent: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((EXAMPLE / "manifest.slots.json").read_text())
        # The example's agent kept warm: one process per slot (`protocol: "lines"`).
        command = [sys.executable, str(EXAMPLE / "agents.py"), agent, "--lines"]
        data["target"]["runner"]["command"] = command
        servers = data["tools"]["servers"]
        servers["shop"] = {**servers["shop"], "url": self.shop}
        servers["admin"] = {**servers["admin"], "url": self.admin}
        return data

    def orders_in(self, slot: int) -> int:
        with sqlite3.connect(f"{self.db}.{slot}") as db:
            return int(db.execute("SELECT count(*) FROM orders").fetchone()[0])


@pytest.fixture(scope="module")
def slotted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slotted]:
    db = tmp_path_factory.mktemp("warehouse-slots") / "world.db"
    shop, admin = free_port(), free_port()
    argv = [sys.executable, str(EXAMPLE / "servers.py"), "http", "--db", str(db)]
    argv += ["--shop-port", str(shop), "--admin-port", str(admin), "--slots", str(SLOTS)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(shop, server=proc)
        wait_port(admin, server=proc)
        yield Slotted(db, shop, admin)
    finally:
        proc.terminate()
        proc.wait(10)


def assay(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    manifest: dict[str, Any],
    concurrency: int,
    trials: int = 3,
    faults: tuple[str, ...] = FAULTS,
) -> tuple[dict[str, Any], str]:
    path = tmp_path / f"manifest-{concurrency}.json"
    path.write_text(json.dumps(manifest))
    args = ["assay", str(path), "--trials", str(trials), "--json", "--seed", "11"]
    args += ["--concurrency", str(concurrency)]
    for mode in faults:
        args += ["--mode", mode]
    main(args)
    out = capsys.readouterr()
    report: dict[str, Any] = json.loads(out.out)
    return report, out.err


def trial_ids(report: dict[str, Any]) -> dict[str, list[str]]:
    """Per fault, the `trial_id` of each sampled trial's task."""
    return {f["id"]: [x["task"]["trial_id"] for x in f["samples"]] for f in report["faults"]}


def counts(report: dict[str, Any]) -> dict[str, Any]:
    """Per fault, what the gate reads: the arms' counts, the invariants, errors, the decision."""
    # `applicability`: the matched baselines' reach, read in whichever slot each baseline ran.
    keep = (
        *("planned", "exercised", "not_exercised", "target_errors", "baseline_errors", "arms"),
        "applicability",
    )
    faults = {f["id"]: {k: f.get(k) for k in keep} for f in report["faults"]}
    for f in report["faults"]:
        faults[f["id"]]["invariants"] = {n: v["failed"] for n, v in f["invariants"].items()}
        faults[f["id"]]["signature"] = f["signature"]["counts"]
    return {"faults": faults, "decision": report["decision"], "trials": report["trials_executed"]}


def test_the_same_seed_gives_the_same_per_fault_counts_at_concurrency_1_and_4(
    slotted: Slotted,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Trial ids are keyed per run (opaque to the agent): both runs share one key here, so the
    # ids compare.
    monkeypatch.setattr(mcp_engine, "run_key", lambda: bytes(32))
    serial, _ = assay(tmp_path, capsys, slotted.manifest("careful"), 1)
    concurrent, err = assay(tmp_path, capsys, slotted.manifest("careful"), SLOTS)
    assert counts(concurrent) == counts(serial)
    assert all(f["applicability"] for f in counts(serial)["faults"].values())
    assert serial["decision"] == "allow", serial["reasons"]
    # The agent's task names its trial alike at any concurrency (never the slot that ran it).
    assert trial_ids(concurrent) == trial_ids(serial)
    assert all(re.fullmatch(r"t[0-9a-f]{16}", i) for ids in trial_ids(serial).values() for i in ids)
    assert "offers no slots" not in err
    # The serial run used world 0 alone; at concurrency 4 a fault's three trials ran at once,
    # each in a world of its own.
    assert all(slotted.orders_in(i) > 0 for i in range(3))


def test_a_defective_agent_is_blocked_alike_at_any_concurrency_and_no_trial_runs_past_the_stop(
    slotted: Slotted, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claimer, one = slotted.manifest("claimer"), FAULTS[:1]
    serial, _ = assay(tmp_path, capsys, claimer, 1, faults=one)
    concurrent, _ = assay(tmp_path, capsys, claimer, SLOTS, faults=one)
    assert serial["decision"] == concurrent["decision"] == "block"
    assert {r["code"] for r in concurrent["reasons"]} == {r["code"] for r in serial["reasons"]}
    # The sequential fault runs one trial at a time whatever the slots: its first violating
    # trial decides it, and no slot starts another (runs and counts are the serial run's).
    assert counts(concurrent) == counts(serial)
    assert concurrent["spend"]["total"]["runs"] == serial["spend"]["total"]["runs"]
    for c in counts(concurrent)["faults"].values():
        assert c["planned"] == concurrent["trials_executed"] == 1


def test_a_world_without_slots_runs_one_trial_at_a_time_with_a_notice(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = McpEngine(parse_manifest(sandbox.manifest("careful")), slots=SLOTS)
    try:
        assert engine.slots == 1
        assert engine.notice is not None and "offers no slots" in engine.notice
    finally:
        engine.close()
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(sandbox.manifest("careful")))
    main(["assay", str(path), "--trials", "1", "--json", "--concurrency", "4", "--mode", FAULTS[0]])
    err = capsys.readouterr().err
    assert "the world offers no slots (tools.slots): trials run one at a time" in err


def test_a_world_offering_fewer_slots_than_asked_runs_as_many_as_it_offers(
    slotted: Slotted,
) -> None:
    engine = McpEngine(parse_manifest(slotted.manifest("careful")), slots=SLOTS + 4)
    try:
        assert engine.slots == SLOTS
        assert engine.notice == f"assaygate: the world offers {SLOTS} slots: {SLOTS} trials at once"
        # Each slot reaches its own world under its own lock.
        assert [engine.slot(i).upstreams.contract.servers["shop"].url for i in (0, 3)] == [
            slotted.shop.format(slot=0),
            slotted.shop.format(slot=3),
        ]
        assert len({engine.slot(i).world for i in range(SLOTS)}) == SLOTS
    finally:
        engine.close()


def test_slot_urls_and_hook_payloads_and_environments_carry_the_slot(tmp_path: Path) -> None:
    echo = [
        sys.executable,
        "-c",
        "import json, os, sys; print(json.dumps({'payload': json.load(sys.stdin), "
        "'env': os.environ.get('ASSAYGATE_SLOT')}))",
    ]
    contract = parse_contract(
        {
            "slots": 3,
            "servers": {"shop": {"url": "http://127.0.0.1:9/s/{slot}/mcp"}},
            "tools": {
                "ship": {"role": "effect", "server": "shop", "subject": "o", "reply_field": "id"}
            },
            "hooks": {
                "reset": {"kind": "command", "command": echo},
                "probe": {"kind": "http", "url": "http://127.0.0.1:9/probe/{slot}"},
            },
        }
    )
    second = contract.for_slot(2)
    assert second.servers["shop"].url == "http://127.0.0.1:9/s/2/mcp"
    assert second.hooks.probe.url == "http://127.0.0.1:9/probe/2"
    upstreams = Upstreams(second, slot=2)
    answer = asyncio.run(upstreams.hook(second.hooks.reset, {"seed": 5, "trial_id": "t"}))
    assert answer == {"payload": {"seed": 5, "trial_id": "t", "slot": 2}, "env": "2"}
    # A world without slots is told none: its hooks see exactly what they saw before.
    plain = Upstreams(contract.for_slot(0).model_copy(update={"slots": None}))
    answer = asyncio.run(plain.hook(Hook(kind="command", command=echo), {"seed": 5}))
    assert answer == {"payload": {"seed": 5}, "env": None}
    # Command hooks reach the same program for every slot: the lock tells the copies apart.
    assert world_key(contract, None, 0) != world_key(contract, None, 1)


def test_a_slot_url_in_a_world_that_offers_no_slots_is_refused_naming_the_field() -> None:
    with pytest.raises(ManifestInvalid) as caught:
        parse_contract(
            {
                "servers": {"shop": {"url": "http://127.0.0.1:9/s/{slot}/mcp"}},
                "tools": {
                    "ship": {
                        "role": "effect",
                        "server": "shop",
                        "subject": "o",
                        "reply_field": "id",
                    }
                },
                "hooks": {
                    "reset": {"kind": "mcp", "server": "shop", "tool": "reset"},
                    "probe": {"kind": "mcp", "server": "shop", "tool": "probe"},
                },
            }
        )
    assert caught.value.field == "tools.servers.shop.url"
    assert "tools.slots" in caught.value.message
