"""Bad input is refused with a JSON error naming the field, and writes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.service import candidate_body

pytestmark = pytest.mark.integration


def refused(response: httpx.Response, status: int, field: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["field"] == field
    assert error["code"] and error["message"]
    return error


def test_a_body_that_is_not_json_is_refused(client: httpx.Client, unchanged: None) -> None:
    response = client.post(
        "/v1/candidates", content=b'{"manifest": {', headers={"content-type": "application/json"}
    )
    refused(response, 400, "body")


def test_a_body_over_the_limit_is_refused_before_it_is_read(
    client: httpx.Client, unchanged: None
) -> None:
    body = candidate_body("typed")
    body["manifest"]["prompt"] = {"padding": "x" * (1024 * 1024)}
    refused(client.post("/v1/candidates", json=body), 413, "body")


def test_a_chunked_body_over_the_limit_is_refused_too(
    client: httpx.Client, unchanged: None
) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"source_revision": "x", "manifest": {"prompt": "'
        for _ in range(1100):
            yield b"x" * 1024
        yield b'"}}'

    response = client.post(
        "/v1/candidates", content=chunks(), headers={"content-type": "application/json"}
    )
    refused(response, 413, "body")


def test_an_unknown_manifest_key_is_refused_naming_it(
    client: httpx.Client, unchanged: None
) -> None:
    body = candidate_body("typed")
    body["manifest"]["tools_v2"] = {}
    refused(client.post("/v1/candidates", json=body), 422, "manifest.tools_v2")


def test_an_unknown_control_is_refused_naming_it(client: httpx.Client, unchanged: None) -> None:
    body = candidate_body("typed")
    body["manifest"]["controls"]["pray"] = True
    refused(client.post("/v1/candidates", json=body), 422, "manifest.controls.pray")


def test_an_unknown_fault_mode_is_refused_naming_the_plan_field(
    client: httpx.Client, unchanged: None
) -> None:
    body = candidate_body("typed", modes=["cosmic_ray"])
    error = refused(client.post("/v1/candidates", json=body), 422, "plan.modes")
    assert "cosmic_ray" in error["message"]


def test_an_unknown_fault_family_is_refused_naming_the_plan_field(
    client: httpx.Client, unchanged: None
) -> None:
    body = candidate_body("typed", families=["weather"])
    refused(client.post("/v1/candidates", json=body), 422, "plan.families")


def test_a_shared_baseline_in_paper_mode_is_refused_naming_the_plan_field(
    client: httpx.Client, unchanged: None
) -> None:
    body = candidate_body("typed", catalogue="paper", baseline="shared")
    error = refused(client.post("/v1/candidates", json=body), 422, "plan.baseline")
    assert "paper" in error["message"]


def test_a_baseline_that_is_neither_per_fault_nor_shared_is_refused(
    client: httpx.Client, unchanged: None
) -> None:
    body = candidate_body("typed", baseline="sometimes")
    refused(client.post("/v1/candidates", json=body), 422, "plan.baseline")


@pytest.mark.parametrize("trials", [0, -5])
def test_non_positive_trials_are_refused(
    client: httpx.Client, unchanged: None, trials: int
) -> None:
    body = candidate_body("typed", trials=trials)
    refused(client.post("/v1/candidates", json=body), 422, "plan.trials")


def test_trials_as_a_string_are_refused(client: httpx.Client, unchanged: None) -> None:
    body = candidate_body("typed", trials="100")
    refused(client.post("/v1/candidates", json=body), 422, "plan.trials")


def test_an_unknown_body_key_is_refused(client: httpx.Client, unchanged: None) -> None:
    body = {**candidate_body("typed"), "priority": "high"}
    refused(client.post("/v1/candidates", json=body), 422, "priority")


def test_a_missing_source_revision_is_refused(client: httpx.Client, unchanged: None) -> None:
    body = candidate_body("typed")
    del body["source_revision"]
    refused(client.post("/v1/candidates", json=body), 422, "source_revision")


def test_a_manifest_without_a_system_name_needs_one_in_the_body(
    client: httpx.Client, unchanged: None
) -> None:
    body = candidate_body("typed")
    del body["manifest"]["system"]
    refused(client.post("/v1/candidates", json=body), 422, "system")


def test_a_body_that_is_a_list_is_refused(client: httpx.Client, unchanged: None) -> None:
    refused(client.post("/v1/candidates", json=[1, 2]), 422, "body")


# ------------------------------------------------------------- control characters and names

NUL_URLS = [
    ("/v1/candidates?system=%00", "system"),
    ("/v1/candidates?system=a%01b", "system"),
    ("/v1/gate/x%00y", "system"),
    ("/v1/gate/copperfin-returns?version=1%00", "version"),
    ("/v1/events?kind=a%00", "kind"),
    ("/v1/holds?system=%7F", "system"),
    ("/v1/systems/x%0Ay/triggers", "system"),
]


@pytest.mark.parametrize(("url", "field"), NUL_URLS, ids=[u for u, _ in NUL_URLS])
def test_a_control_character_in_a_parameter_is_a_422_naming_it_and_the_connection_survives(
    client: httpx.Client, url: str, field: str
) -> None:
    error = refused(client.get(url), 422, field)
    assert error["code"] == "control_character"
    # The same keep-alive connection answers the next request (a 500 used to reset it).
    assert client.get("/v1/systems").status_code == 200


@pytest.mark.parametrize("field", ["system", "version", "source_revision"])
def test_a_nul_in_a_submission_field_is_a_422_naming_it_and_stores_nothing(
    client: httpx.Client, unchanged: None, field: str
) -> None:
    body = {**candidate_body("typed", trials=1), field: "a\u0000b"}
    refused(client.post("/v1/candidates", json=body), 422, field)
    assert client.get("/v1/systems").status_code == 200


@pytest.mark.parametrize(
    ("where", "field"),
    [
        (("manifest", "prompt"), "manifest.prompt"),
        (("manifest", "system"), "manifest.system"),
        (("manifest", "tools", "refund\u0000"), "manifest.tools.refund\u0000"),
    ],
)
def test_a_nul_anywhere_in_the_manifest_is_a_422_naming_its_path(
    client: httpx.Client, unchanged: None, where: tuple[str, ...], field: str
) -> None:
    body = candidate_body("typed", trials=1)
    *parents, last = where
    node = body
    for key in parents:
        node = node[key]
    node[last] = "x\u0000y" if "\u0000" not in last else {}
    refused(client.post("/v1/candidates", json=body), 422, field)


def test_other_control_characters_and_half_surrogates_are_refused_and_a_revision_is_one_line(
    client: httpx.Client, unchanged: None
) -> None:
    for bad in ("\u001b[31m", "\u007f", "\u0085", "\ud800"):
        body = candidate_body("typed", trials=1)
        body["manifest"]["prompt"] = f"be{bad}nice"
        raw = json.dumps(body)  # ensure_ascii: a lone surrogate travels as its escape
        answer = client.post(
            "/v1/candidates", content=raw, headers={"content-type": "application/json"}
        )
        refused(answer, 422, "manifest.prompt")
    body = candidate_body("typed", trials=1)
    body["source_revision"] = "0123abc\n"
    error = refused(client.post("/v1/candidates", json=body), 422, "source_revision")
    assert "one line" in error["message"]


@pytest.mark.parametrize("name", ["a/b", "   ", " ", "..", ".hidden", "tab\there", "x" * 101, "ü"])
def test_a_system_name_outside_the_documented_pattern_is_a_422_naming_system(
    client: httpx.Client, unchanged: None, name: str
) -> None:
    in_body = {**candidate_body("typed", trials=1), "system": name}
    refused(client.post("/v1/candidates", json=in_body), 422, "system")
    in_manifest = candidate_body("typed", trials=1)
    in_manifest["manifest"]["system"] = name
    refused(client.post("/v1/candidates", json=in_manifest), 422, "manifest.system")


def test_triggers_for_a_new_system_outside_the_pattern_are_refused_naming_system(
    client: httpx.Client, unchanged: None
) -> None:
    answer = client.put("/v1/systems/has%20space/triggers", json={"components": ["tools"]})
    refused(answer, 422, "system")


@pytest.mark.parametrize(
    ("key", "values"),
    [("families", ["tool"] * 100_000), ("modes", ["fork_run"] * 50_000)],
)
def test_a_plan_naming_a_family_or_mode_over_and_over_is_refused_before_it_is_stored(
    client: httpx.Client, unchanged: None, key: str, values: list[str]
) -> None:
    body = candidate_body("typed", trials=1, **{key: values})
    error = refused(client.post("/v1/candidates", json=body), 422, f"plan.{key}")
    assert "at most" in error["message"]


def test_a_seed_beyond_what_a_signed_dossier_can_hold_is_refused(
    client: httpx.Client, unchanged: None
) -> None:
    body = candidate_body("typed", trials=1, seed=2**53)
    refused(client.post("/v1/candidates", json=body), 422, "plan.seed")
