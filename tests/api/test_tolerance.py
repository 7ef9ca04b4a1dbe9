"""A declared tolerance through the service: a careful agent is allowed where the exact bound meets
p0, a blind one blocks, a floor it cannot meet stops futile and holds, and a cap that cannot
resolve p0 (the submission's or the organisation's policy's) is refused at submission.

The API's plan takes no rule: the organisation's policy for each system here runs the sequential
rule (`rules: ["sequential"]`), as an mcp target runs it by default."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from service.core.evidence.promise import runs_to_resolve
from tests.support.api import decided, system_name
from tests.support.service import default_example

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

# Faults the careful reference workflow contains, recovers and proves in every trial.
CAREFUL = ["subject_swap", "timeout_before_send"]
P0 = 0.05
# (1 - 0.05)^n <= 2.5 %, one side of the default 5 % error.
STOPS_AT = runs_to_resolve(P0, 0.025)


def sequential_system(client: httpx.Client, **policy: Any) -> str:
    """A new system whose policy runs the sequential rule (and whatever else `policy` asks)."""
    system = system_name("tol")
    put = client.put(
        "/v1/policy", params={"system": system}, json={"rules": ["sequential"]} | policy
    )
    assert put.status_code == 200, put.text
    return system


def careful(max_violation_rate: float | None = P0, **controls: bool) -> dict[str, Any]:
    """The typed example on the default floors (0.80 on the lower bound), declaring p0."""
    manifest = default_example("typed")
    manifest["controls"] = {**manifest["controls"], **controls}
    if max_violation_rate is not None:
        manifest["envelope"] = {"max_violation_rate": max_violation_rate}
    return manifest


def body(system: str, manifest: dict[str, Any], trials: int, modes: list[str]) -> dict[str, Any]:
    return {
        "system": system,
        "version": "1",
        "source_revision": "abc123",
        "manifest": manifest,
        "plan": {"trials": trials, "seed": 3, "modes": modes},
    }


def stops(client: httpx.Client, done: dict[str, Any]) -> dict[str, tuple[str, int]]:
    report = client.get(f"/v1/assays/{done['assay_id']}").json()["report"]
    return {f["id"]: (f["stop"]["code"], f["stop"]["trials"]) for f in report["faults"]}


def nothing_stored(client: httpx.Client, system: str) -> None:
    assert client.get(f"/v1/gate/{system}").status_code == 404
    listed = client.get("/v1/systems").json()["items"]
    assert system not in [s["name"] for s in listed]


def test_a_careful_agent_declaring_p0_is_allowed_where_the_exact_bound_meets_it(
    client: httpx.Client,
) -> None:
    assert STOPS_AT == 72
    system = sequential_system(client)
    done = decided(
        client,
        careful(),
        system=system,
        version="1",
        plan={"trials": 200, "seed": 3, "modes": CAREFUL},
        timeout=600,
    )
    assert done["decision"] == "allow", done
    assert stops(client, done) == dict.fromkeys(CAREFUL, ("decided", STOPS_AT))


def test_a_blind_agent_blocks_at_its_first_violation(client: httpx.Client) -> None:
    system = sequential_system(client)
    off = dict.fromkeys(default_example("typed")["controls"], False)
    done = decided(
        client,
        careful(**off),
        system=system,
        version="1",
        plan={"trials": 200, "seed": 3, "modes": CAREFUL},
        timeout=600,
    )
    assert done["decision"] == "block", done
    # Without identity binding the first swapped subject escapes; the retry the workflow does
    # without any control still contains a timeout before send, so that fault is decided clean.
    assert stops(client, done) == {
        "subject_swap": ("violation", 1),
        "timeout_before_send": ("decided", STOPS_AT),
    }


def test_a_floor_the_agent_cannot_meet_stops_futile_and_holds(client: httpx.Client) -> None:
    # The reference workflow never repairs a broken trace lineage (evidence_repair is off): its
    # recovery floor's confidence sequence falls below 0.80 within a few trials.
    system = sequential_system(client)
    done = decided(
        client,
        careful(),
        system=system,
        version="1",
        plan={"trials": 200, "seed": 3, "modes": ["break_trace_lineage"]},
        timeout=600,
    )
    assert done["decision"] == "hold", done
    ((code, trials),) = stops(client, done).values()
    assert code == "futile" and trials < 20
    assert all(r["code"].startswith("floor:") for r in done["reasons"]), done["reasons"]


def test_a_cap_that_cannot_resolve_the_declared_p0_is_refused_naming_the_trials_it_needs(
    client: httpx.Client,
) -> None:
    system = sequential_system(client)
    answer = client.post("/v1/candidates", json=body(system, careful(), 50, CAREFUL))
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == "manifest.envelope.max_violation_rate"
    assert f"needs {STOPS_AT} clean trials" in error["message"]
    assert f"raise plan.trials to {STOPS_AT}" in error["message"]
    assert "policy" not in error["message"]
    nothing_stored(client, system)


def test_a_policys_p0_is_read_after_tightening_and_no_retry_gets_a_looser_one(
    client: httpx.Client,
) -> None:
    system = sequential_system(client, max_violation_rate=P0)
    # Silent on p0, too short a cap for the policy's: refused, saying the policy set it.
    short = client.post("/v1/candidates", json=body(system, careful(None), 50, CAREFUL))
    assert short.status_code == 422, short.text
    error = short.json()["error"]
    assert error["field"] == "manifest.envelope.max_violation_rate"
    assert "set by the organisation's policy" in error["message"]
    assert f"needs {STOPS_AT} clean trials" in error["message"]
    # A retry declaring a looser p0, whatever the cap: refused, never run at the looser rate.
    for trials in (17, 200):
        looser = client.post("/v1/candidates", json=body(system, careful(0.2), trials, CAREFUL))
        assert looser.status_code == 422, looser.text
        assert looser.json()["error"]["code"] == "policy_violation"
    nothing_stored(client, system)
    # Silent on p0 with a cap that resolves it: the policy's p0, so the stop at 72, not at the
    # 17 trials a 0.2 would need.
    done = decided(
        client,
        careful(None),
        system=system,
        version="1",
        plan={"trials": 200, "seed": 3, "modes": ["timeout_before_send"]},
        timeout=600,
    )
    assert done["decision"] == "allow", done
    assert stops(client, done) == {"timeout_before_send": ("decided", STOPS_AT)}
    # A stricter p0 than the policy's is the submitter's to declare: it stops later.
    stricter = decided(
        client,
        careful(0.02),
        system=system,
        version="2",
        plan={"trials": 200, "seed": 3, "modes": ["timeout_before_send"]},
        timeout=600,
    )
    assert stops(client, stricter) == {
        "timeout_before_send": ("decided", runs_to_resolve(0.02, 0.025))
    }
