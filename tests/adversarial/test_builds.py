"""Attacks on what answers: a candidate declares the build behind its URLs, and an endpoint that
reports another one (from the start, or only after the first trials: a swap behind the URL
mid-assay) or reports none is held with `build_mismatch`, naming the endpoint, the declared and
the reported builds and in how many trials. Each target is otherwise careful: the build is what
stands between it and `allow`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.cli import main
from tests.adversarial.conftest import assay_target, codes, manifest, plan, reasons
from tests.mcp.conftest import EXAMPLE, ROOT, wait_port
from tests.support.agents import StartAgent
from tests.support.service import free_port

pytestmark = pytest.mark.timeout(600)

AGENTS = Path(__file__).resolve().parent / "agents"
BUILD = "copperfin-http-agent@1.0.0"
# Each trial of timeout_after_commit posts six tasks: the trial, its matched baseline and four
# counterfactual runs.
TASKS = 4 * 6


def careful_http(url: str) -> dict[str, Any]:
    m = manifest("typed", kind="http", url=url, build=BUILD)
    return assay_target(m, plan(4, "timeout_after_commit"))


def test_an_http_agent_swapped_for_another_build_after_its_first_tasks_is_held(
    start_agent: StartAgent,
) -> None:
    other = "copperfin-http-agent@1.0.1"
    url = start_agent(
        "--after", "8", "--then", other, "--controls", "typed", script=AGENTS / "swapped_http.py"
    )
    report = careful_http(url)
    assert report["decision"] == "hold"
    assert codes(report) == {"build_mismatch"}, report["reasons"]
    [reason] = reasons(report, "build_mismatch")
    assert reason["severity"] == "hold"
    assert f"target was declared as build {BUILD!r}" in reason["message"]
    assert f"reported {other!r} in {TASKS - 8} of {TASKS} trials" in reason["message"]
    assert report["builds"]["target"] == {
        "declared": BUILD,
        "reported": [{"build": BUILD, "trials": 8}, {"build": other, "trials": TASKS - 8}],
        "assurance": "declared",
    }


def test_an_http_agent_that_names_no_build_where_one_was_declared_is_held(
    start_agent: StartAgent,
) -> None:
    url = start_agent("--controls", "typed", "--build", "")
    report = careful_http(url)
    assert report["decision"] == "hold"
    assert codes(report) == {"build_mismatch"}, report["reasons"]
    [reason] = reasons(report, "build_mismatch")
    assert f"reported nothing in {TASKS} of {TASKS} trials" in reason["message"]
    assert report["builds"]["target"]["reported"] == [{"build": None, "trials": TASKS}]
    assert report["builds"]["target"]["assurance"] == "declared"


@pytest.fixture
def swapped_shop(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The warehouse servers over HTTP whose shop reports 1.0.0 for two trials, then 1.0.1."""
    shop, admin = free_port(), free_port()
    script = AGENTS / "swapped_shop.py"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(script),
            "--db",
            str(tmp_path / "world.db"),
            "--shop-port",
            str(shop),
            "--admin-port",
            str(admin),
            "--after",
            "2",
            "--then",
            "1.0.1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(shop)
        wait_port(admin)
        yield f"http://127.0.0.1:{shop}/mcp", f"http://127.0.0.1:{admin}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


def careful_mcp(shop: str, admin: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLE / "manifest.careful.json").read_text())
    data["target"]["runner"]["command"] = [sys.executable, str(EXAMPLE / "agents.py"), "careful"]
    servers = data["tools"]["servers"]
    servers["shop"]["url"], servers["admin"]["url"] = shop, admin
    return data


def assayed(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict[str, Any]) -> Any:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(data))
    main(["assay", str(path), "--trials", "3", "--json", "--mode", "ship_order_partial_reply"])
    return json.loads(capsys.readouterr().out)


def test_an_mcp_server_swapped_for_another_build_after_two_trials_is_held(
    swapped_shop: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = assayed(tmp_path, capsys, careful_mcp(*swapped_shop))
    assert report["decision"] == "hold"
    assert {r["code"] for r in report["reasons"]} == {"build_mismatch"}, report["reasons"]
    [reason] = report["reasons"]
    assert "tools.servers.shop was declared as build 'warehouse-shop@1.0.0'" in reason["message"]
    assert "reported 'warehouse-shop@1.0.1' in" in reason["message"]
    shop = report["builds"]["tools.servers.shop"]
    seen = {r["build"]: r["trials"] for r in shop["reported"]}
    assert set(seen) == {"warehouse-shop@1.0.0", "warehouse-shop@1.0.1"}
    assert shop["assurance"] == "declared"
    # The admin server was not swapped: corroborated in every trial.
    assert report["builds"]["tools.servers.admin"]["assurance"] == "reported"


@pytest.fixture
def served_careful() -> Iterator[str]:
    """The example's careful agent served over the http runner protocol by Assaygate's own host,
    which names no build."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "assaygate.mcp_host", "agents:run_careful"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=EXAMPLE,
        env=env,
    )
    assert proc.stdout is not None
    try:
        yield str(json.loads(proc.stdout.readline())["url"])
    finally:
        proc.kill()
        proc.wait()


def test_an_http_runner_that_names_no_build_where_one_was_declared_is_held(
    sandbox: Any, served_careful: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = careful_mcp(sandbox.shop, sandbox.admin)
    data["target"]["runner"] = {"kind": "http", "url": served_careful, "build": "careful@1"}
    report = assayed(tmp_path, capsys, data)
    assert report["decision"] == "hold"
    assert {r["code"] for r in report["reasons"]} == {"build_mismatch"}, report["reasons"]
    [reason] = report["reasons"]
    assert (
        "target.runner was declared as build 'careful@1' but reported nothing"
        in (reason["message"])
    )
    assert report["builds"]["target.runner"]["assurance"] == "declared"
    assert report["builds"]["tools.servers.shop"]["assurance"] == "reported"
