"""The retry storm fires by what the gate controls (its own fleet model and the agent's attempts),
never by a race on the wall clock: the same agent gets the same firing count run after run. The
example's agents run warm (`protocol: "lines"`): the claim is the storm's, not the protocol's."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from service.cli import main
from service.mcp.proxy import Limiter
from tests.mcp.conftest import ROOT, Sandbox

pytestmark = pytest.mark.timeout(600)

TRIALS = 3
PACED = ROOT / "tests" / "mcp" / "agents" / "paced.py"


def test_a_refusal_hints_the_wait_after_which_the_run_is_admitted() -> None:
    limit = Limiter(agents=3, capacity=1, tick_s=0.05)
    assert not limit.admit(10.0)
    hint = limit.retry_after_ms(10.0)
    assert hint == 151  # its fair share, 3 agents on 1 call a tick of 50 ms, and a ms more
    assert not limit.admit(10.1)
    # Later refusals hint what is left of the wait, not the whole of it again.
    assert limit.retry_after_ms(10.1) == hint - 100
    assert limit.admit(10.0 + hint / 1000)


def test_a_fleet_that_fits_the_limit_is_never_refused() -> None:
    assert Limiter(agents=2, capacity=2, tick_s=0.05).admit(0.0)


def storm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], manifest: dict[str, Any]
) -> dict[str, Any]:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    main(["assay", str(path), "--trials", str(TRIALS), "--json", "--mode", "retry_storm"])
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    fault: dict[str, Any] = report["faults"][0]
    return {"decision": report["decision"], **fault}


def test_the_storm_fires_in_every_trial_of_every_assay_for_the_same_agent(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [storm(tmp_path, capsys, sandbox.manifest("careful", warm=True)) for _ in range(3)]
    assert [r["exercised"] for r in runs] == [TRIALS] * 3
    assert [r["not_exercised"] for r in runs] == [0] * 3
    # A careful agent backs off with jitter, waits its share, gets through and is allowed.
    assert [r["decision"] for r in runs] == ["allow"] * 3, [r["decision"] for r in runs]
    assert all(r["storm"]["observed"]["admitted"] == TRIALS for r in runs), runs[0]["storm"]


def test_an_agent_that_hammers_the_limit_is_never_admitted_and_loses_service(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = storm(tmp_path, capsys, sandbox.manifest("blind", warm=True))
    assert result["exercised"] == TRIALS
    assert result["decision"] != "allow"
    assert result["signature"]["counts"]["useful_service"] == 0


def test_an_agent_that_waits_exactly_the_hinted_retry_after_is_admitted_and_allowed(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The refusal's `retry_after_ms` is the model's own wait: an agent that honours it, with no
    # jitter or back-off of its own, is refused once and admitted on its second attempt.
    manifest = sandbox.manifest("careful")
    manifest["target"]["runner"]["command"] = [sys.executable, str(PACED), "hinted"]
    result = storm(tmp_path, capsys, manifest)
    assert result["exercised"] == TRIALS
    assert result["decision"] == "allow", result
    observed = result["storm"]["observed"]
    assert observed["admitted"] == TRIALS
    assert observed["attempts_max"] == 2
    # Its one wait is the fleet's fair share of the limit: 3 agents on 1 call a tick of 50 ms.
    storm_ = manifest["tools"]["storm"]
    fair_ms = -(-storm_["agents"] // storm_["capacity_per_tick"]) * storm_["tick_ms"]
    assert observed["shortest_wait_ms"] >= fair_ms
