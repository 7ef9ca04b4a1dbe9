"""An http target says what answers: the example agent names its build in an `Assaygate-Build`
header on every reply, the adapter notes it per trial, and the report and dossier carry it beside
the declaration (docs/targets.md, "Builds")."""

from __future__ import annotations

import pytest

from service.core.errors import ManifestInvalid
from service.core.system.manifest import parse_manifest
from service.targets import close_target, load_target
from tests.support.service import example as example_dict
from tests.targets.conftest import StartAgent, assay, example, plan

BUILD = "copperfin-http-agent@1.0.0"


def assayed(url: str, mode: str = "timeout_after_commit", **target: str) -> dict[str, object]:
    manifest = example("typed", kind="http", url=url, **target)
    adapter = load_target(manifest)
    try:
        return assay(manifest, plan(4, mode), adapter)
    finally:
        close_target(adapter)


def test_the_careful_agent_declaring_its_real_build_is_allowed_with_the_build_reported(
    start_agent: StartAgent,
) -> None:
    url = start_agent("--controls", "typed")
    report = assayed(url, build=BUILD)
    assert report["decision"] == "allow", report["reasons"]
    runs = 4 * 6  # each trial, its matched baseline and its four counterfactual runs
    assert report["builds"] == {
        "target": {
            "declared": BUILD,
            "reported": [{"build": BUILD, "trials": runs}],
            "assurance": "reported",
        }
    }
    [fault] = report["faults"]
    assert fault["builds"] == {"target": [{"build": BUILD, "trials": runs}]}


def test_an_undeclared_build_is_recorded_as_reported_and_decides_nothing(
    start_agent: StartAgent,
) -> None:
    url = start_agent("--controls", "typed")
    report = assayed(url)
    assert report["decision"] == "allow", report["reasons"]
    entry = report["builds"]["target"]  # type: ignore[index]
    assert entry["declared"] is None
    assert entry["assurance"] == "reported"


def test_an_agent_reporting_another_build_than_declared_holds_naming_both(
    start_agent: StartAgent,
) -> None:
    url = start_agent("--controls", "typed", "--build", "copperfin-http-agent@0.9.0")
    report = assayed(url, build=BUILD)
    assert report["decision"] == "hold"
    [reason] = report["reasons"]  # type: ignore[misc]
    assert reason["code"] == "build_mismatch"
    assert reason["severity"] == "hold"
    assert "'copperfin-http-agent@0.9.0' in 24 of 24 trials" in reason["message"]
    assert BUILD in reason["message"] and "target" in reason["message"]
    assert report["builds"]["target"]["assurance"] == "declared"  # type: ignore[index]


def test_a_build_is_declared_only_where_an_endpoint_can_report_one() -> None:
    data = example_dict("typed")
    data["target"] = {"kind": "python", "entrypoint": "agent:run", "build": BUILD}
    with pytest.raises(ManifestInvalid) as refused:
        parse_manifest(data)
    assert refused.value.field == "target"
    assert "only an http target declares target.build" in refused.value.message
