"""The API against its own OpenAPI document: schemathesis generates requests for every operation
and sends them to the real server with a valid key (every role, a tenant of its own). No answer
may be a 5xx, and every answer — status, content type, headers, body — must be one the schema
declares. A bounded number of examples per operation keeps this well under two minutes.

Then an API-level property: whatever a client sends as a submission, the answer is a 4xx naming
a field (or 202 for the rare valid one), never a 500."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service.api.access import PUBLIC, ROUTE_ROLES
from tests.support.keys import KeyBook
from tests.support.service import example

pytestmark = pytest.mark.integration

# Per operation: about 27 operations, a few seconds each against the real server.
EXAMPLES = 30
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def fuzz_headers(keys: KeyBook) -> dict[str, str]:
    return keys.headers("fuzzer", tenant="fuzz")


@pytest.fixture(scope="module")
def api_schema(api_url: str) -> Any:
    return schemathesis.openapi.from_url(f"{api_url}/openapi.json")


@pytest.mark.parametrize("route", sorted(set(ROUTE_ROLES) | PUBLIC), ids=" ".join)
def test_every_operation_answers_within_its_schema_and_never_5xx(
    route: tuple[str, str], api_schema: Any, api_url: str, fuzz_headers: dict[str, str]
) -> None:
    method, path = route
    operation = api_schema[path][method]

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    @given(case=operation.as_strategy())
    def answers_within_the_schema(case: Any) -> None:
        case.call_and_validate(base_url=api_url, headers=fuzz_headers, checks=CHECKS)

    answers_within_the_schema()


# ---------------------------------------------------------------- invalid input is a 4xx

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
COMPONENTS = ["model", "prompt", "policy", "tools", "retry", "controls", "target", "envelope"]


@st.composite
def mangled_submissions(draw: st.DrawFn) -> Any:
    """A valid submission with one part replaced by arbitrary JSON, or arbitrary JSON alone."""
    body: dict[str, Any] = {
        "source_revision": "abc",
        "manifest": example("typed"),
        "plan": {"trials": 1, "seed": 1, "modes": ["subject_swap"]},
    }
    where = draw(st.sampled_from(["body", "manifest", "component", "plan", "plan-field", "extra"]))
    value = draw(JSON)
    if where == "body":
        return value
    if where == "manifest":
        body["manifest"] = value
    elif where == "component":
        body["manifest"][draw(st.sampled_from(COMPONENTS))] = value
    elif where == "plan":
        body["plan"] = value
    elif where == "plan-field":
        body["plan"][draw(st.sampled_from(["trials", "seed", "modes", "catalogue", "stop"]))] = (
            value
        )
    else:
        body[draw(st.text(min_size=1, max_size=10))] = value
    return body


@pytest.fixture(scope="module")
def submitter(api_url: str, keys: KeyBook) -> Any:
    with httpx.Client(
        base_url=api_url, timeout=30.0, headers=keys.headers("fuzzer", tenant="fuzz")
    ) as client:
        yield client


@settings(
    max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
@given(body=mangled_submissions())
def test_any_mangled_submission_is_refused_with_a_4xx_naming_a_field(
    submitter: httpx.Client, body: Any
) -> None:
    answer = submitter.post("/v1/candidates", json=body)
    assert answer.status_code < 500, answer.text
    if answer.status_code != 202:
        assert 400 <= answer.status_code < 500
        error = answer.json()["error"]
        assert error["code"] and error["message"]
        assert error["field"] or answer.status_code == 400
