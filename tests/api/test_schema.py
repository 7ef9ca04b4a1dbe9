"""The API against its own OpenAPI document, as the `schemathesis` command runs it: every check
it has (server errors, status codes, content types, headers and bodies against the schema, public
routes that the document says need a key, `405` without an `Allow` header, schema-valid requests
refused, schema-violating ones accepted, missing headers), in its examples, coverage, fuzzing and
stateful phases, against the real server with a valid key of a tenant of its own. Submissions it
makes are queued where no worker listens, so the fuzzer never loads the suite's workers.

One check is left out: `ensure_resource_availability` reads a candidate's dossier right after
submitting it, and a dossier exists only once the assay is decided (`404` until then, as
documented). Submissions and re-runs skip `positive_data_acceptance`, which every other operation
is held to outside the stateful phase (whose chained requests carry ids of other callers' making):
an mcp manifest's tool contract has cross-references JSON Schema cannot state, and a re-run's plan
must select a fault of the candidate's own catalogue. Adding a webhook skips it too: its URL must
also pass the deployment's egress policy, which no schema can state; and so does uploading an
artifact: its bytes must be an archive a worker would unpack safely, which a schema of bytes
cannot state; and so does the gate read by query: it needs `system` or `artifact`, one of two
optional query parameters, which a schema of parameters cannot state (without either it is 422
naming `system`, tests/api/test_gate.py).

Then two API-level properties: a submission with any part of a kind that part can never be is a
4xx naming the field; and whatever a client sends, the answer is never a 500."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.asgi import create_app
from service.db import migrate
from service.db.session import make_engine
from service.http.access import PUBLIC
from service.settings import Settings
from tests.support.keys import KeyBook
from tests.support.service import ApiServer, example, postgres_database

pytestmark = pytest.mark.integration

SCHEMATHESIS = Path(sys.executable).with_name("st")
SEED = 188
EXAMPLES = 25


@pytest.fixture(scope="module")
def fuzz_settings(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    """A database of the fuzzer's own, and a queue where no worker listens. Its submissions stay
    queued for ever: in the suite's database they kept every later test that waits for quiet (no
    assay queued or running) waiting, so which files passed depended on their order."""
    with postgres_database("fuzz") as url:
        fuzzed = settings.model_copy(
            update={
                "database_url": url,
                "queue": f"{settings.queue}-fuzz",
                "max_shards_per_assay": 20,
            }
        )
        migrate.upgrade(fuzzed)
        yield fuzzed


@pytest.fixture(scope="module")
def fuzz_engine(fuzz_settings: Settings) -> Iterator[sa.Engine]:
    engine = make_engine(fuzz_settings)
    yield engine
    engine.dispose()


@pytest.fixture(scope="module")
def fuzz_keys(fuzz_engine: sa.Engine) -> KeyBook:
    return KeyBook(fuzz_engine)


@pytest.fixture(scope="module")
def fuzz_url(fuzz_settings: Settings) -> Iterator[str]:
    """The API on the fuzzer's database, sending its work to a queue of its own."""
    with ApiServer(create_app(fuzz_settings)) as server:
        yield server.url


# What the run leaves out, and where (see the module's docstring).
CONFIG = """
[checks]
enabled = true
ensure_resource_availability.enabled = false

[phases.stateful.checks]
positive_data_acceptance.enabled = false

[[operations]]
include-operation-id = [
  "submit_candidate_v1_candidates_post",
  "rerun_v1_candidates__candidate_id__rerun_post",
  "create_webhook_v1_webhooks_post",
  "upload_artifact_v1_artifacts_post",
  "get_gate_by_query_v1_gate_get",
]
checks.positive_data_acceptance.enabled = false
"""


@pytest.mark.timeout(600)
def test_schemathesis_finds_nothing_with_every_check_in_every_phase(
    fuzz_url: str, fuzz_keys: KeyBook, tmp_path: Path
) -> None:
    key = fuzz_keys.key("fuzzer", tenant="fuzz").secret
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    command = [
        str(SCHEMATHESIS),
        "--config-file",
        str(config),
        "run",
        f"{fuzz_url}/openapi.json",
        "--header",
        f"Authorization: Bearer {key}",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--max-examples",
        str(EXAMPLES),
        "--seed",
        str(SEED),
        "--generation-deterministic",
        "--request-timeout",
        "30",
        "--no-color",
    ]
    env = {**os.environ, "NO_COLOR": "1"}
    run = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=580
    )
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-4000:]
    assert "passed" in run.stdout


# ------------------------------------------------------- what schemathesis found, one by one


def test_public_routes_are_documented_as_needing_no_key(anonymous: httpx.Client) -> None:
    document = anonymous.get("/openapi.json").json()
    for method, path in sorted(PUBLIC):
        operation = document["paths"][path][method.lower()]
        assert "security" not in operation, path
        assert not {"401", "403"} & set(operation["responses"]), path
        assert anonymous.request(method, path).status_code == 200
    guarded = document["paths"]["/v1/candidates"]["post"]
    assert guarded["security"] and "401" in guarded["responses"]


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("OPTIONS", "/v1/api-keys", "GET, POST"),
        ("PATCH", "/v1/candidates", "GET, POST"),
        ("DELETE", "/v1/systems/refunds/triggers", "GET, PUT"),
        ("PUT", "/healthz", "GET"),
    ],
)
def test_a_method_a_path_does_not_serve_is_405_naming_every_method_it_does(
    client: httpx.Client, method: str, path: str, allow: str
) -> None:
    answer = client.request(method, path)
    assert answer.status_code == 405
    assert answer.headers["allow"] == allow
    assert answer.json()["error"]["code"] == "method_not_allowed"


def test_the_manifest_and_plan_rules_are_in_the_document(anonymous: httpx.Client) -> None:
    schemas = anonymous.get("/openapi.json").json()["components"]["schemas"]
    manifest = schemas["Manifest"]
    assert {"model", "prompt", "policy", "tools", "retry", "controls"} <= set(manifest["required"])
    assert manifest["additionalProperties"] is False
    assert schemas["CandidateCreate"]["properties"]["manifest"]["$ref"].endswith("/Manifest")
    trials = next(o for o in schemas["PlanCreate"]["properties"]["trials"]["anyOf"] if o)
    assert trials["maximum"] == 100_000 and trials["minimum"] == 1
    assert schemas["ConfigChangeCreate"]["properties"]["component"]["enum"]


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
def submitter(fuzz_url: str, fuzz_keys: KeyBook) -> Any:
    with httpx.Client(
        base_url=fuzz_url, timeout=30.0, headers=fuzz_keys.headers("fuzzer", tenant="fuzz")
    ) as client:
        yield client


# The parts of a submission no arbitrary JSON of the wrong kind can satisfy: where each part, when
# given a value of a kind in `WRONG`, makes the whole body invalid (strict integers refuse booleans,
# floats and strings; a model refuses a list or a scalar; `prompt` is any JSON and is left out).
NOT_AN_OBJECT = st.one_of(
    st.booleans(), st.integers(), st.text(max_size=8), st.lists(JSON, max_size=3)
)
NOT_AN_INTEGER = st.one_of(
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.lists(JSON, max_size=3),
    st.dictionaries(st.text(max_size=4), JSON, max_size=2),
)
WRONG: dict[str, st.SearchStrategy[Any]] = {
    "trials": NOT_AN_INTEGER,
    "seed": NOT_AN_INTEGER,
    "modes": NOT_AN_OBJECT.filter(lambda v: not isinstance(v, list)),
    "catalogue": JSON.filter(lambda v: v not in ("paper", "full", None)),
    "stop": NOT_AN_OBJECT,
}
MODELLED = ["model", "policy", "tools", "retry", "controls", "target", "envelope"]
TOP_LEVEL = {"system", "version", "source_revision", "manifest", "plan"}


@st.composite
def invalid_submissions(draw: st.DrawFn) -> tuple[str, Any]:
    """A valid submission with one part replaced by JSON of a kind that part can never be."""
    body: dict[str, Any] = {
        "source_revision": "abc",
        "manifest": example("typed"),
        "plan": {"trials": 1, "seed": 1, "modes": ["subject_swap"]},
    }
    where = draw(st.sampled_from(["body", "manifest", "component", "plan", "plan-field", "extra"]))
    if where == "body":
        return where, draw(NOT_AN_OBJECT)
    if where == "manifest":
        body["manifest"] = draw(NOT_AN_OBJECT)
    elif where == "component":
        body["manifest"][draw(st.sampled_from(MODELLED))] = draw(NOT_AN_OBJECT | st.none())
    elif where == "plan":
        body["plan"] = draw(NOT_AN_OBJECT)
    elif where == "plan-field":
        field = draw(st.sampled_from(sorted(WRONG)))
        body["plan"][field] = draw(WRONG[field])
    else:
        body[draw(st.text(min_size=1, max_size=10).filter(lambda k: k not in TOP_LEVEL))] = draw(
            JSON
        )
    return where, body


@settings(
    max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
@given(drawn=invalid_submissions())
def test_any_invalid_submission_is_refused_with_a_4xx_naming_a_field(
    submitter: httpx.Client, drawn: tuple[str, Any]
) -> None:
    where, body = drawn
    answer = submitter.post("/v1/candidates", json=body)
    assert 400 <= answer.status_code < 500, (where, answer.status_code, answer.text)
    error = answer.json()["error"]
    assert error["code"] and error["message"]
    # A body that is not an object has no field to name; everything else names the one it broke.
    assert error["field"] or where == "body", (where, error)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(body=mangled_submissions())
def test_any_mangled_submission_is_never_a_server_error(submitter: httpx.Client, body: Any) -> None:
    # Arbitrary JSON may happen to be valid (`prompt` is any JSON, a plan may be null), so this
    # property is only "never a 5xx, and a refusal names its rule"; the test above is the 4xx one.
    answer = submitter.post("/v1/candidates", json=body)
    assert answer.status_code < 500, answer.text
    assert answer.status_code == 202 or answer.json()["error"]["code"]
