"""Tenant code of every kind attacks the gate through the real service (API, PostgreSQL, Redis, a
shared worker and the tenant's own worker, bubblewrap): a python target, the `command`, `python`,
`langgraph` and `openai-agents` runners, a stdio MCP server and each `command` hook. From inside
its sandbox each CONNECTs through its egress proxy to the API's port under every spelling of
loopback, to another sandbox's relay and to a port named only in ASSAYGATE_CONTROL_PLANE, with
loopback otherwise allowed; and each hands back the tenant's secret (a multi-line value) encoded
every way on stderr, in its error and in a claim, to a submitter who may not read secrets.

The gate's every address answers 403, its own local service (the witness) is reached, and no form
of the secret reaches the report, the candidate, the events or the signed dossier."""

from __future__ import annotations

import base64
import binascii
import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from service.sandbox import relay
from tests.adversarial.deployment import (
    SHARED_LOOPBACK,
    Deployment,
    Witness,
    deployment,
    everything,
    witnessed,
)
from tests.api.test_secret_leaks import leaks
from tests.mcp.conftest import Sandbox, sandbox  # noqa: F401 - the fixture
from tests.sandbox.conftest import serve
from tests.support.api import submit, system_name
from tests.support.service import EXAMPLES, example, wait_decided

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TENANT = "kinds"
VALUE = "sk-leak-7Hq2Zp9Xw4Lm\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj"
LONG = "tok-" + "9fQ2mZ7xW4kR8vL1" * 12  # one line, its hex longer than a report keeps
SECRETS = ["LEAK_KEY", "LONG_KEY"]
ATTACKER = ["python", "tests/adversarial/agents/kinds.py"]
ENTRY = "tests.adversarial.agents.kinds"
PYTHON_PLAN = {"trials": 2, "seed": 3, "modes": ["timeout_before_send"]}
MCP_PLAN = {"trials": 1, "seed": 7, "modes": ["forked_run"]}


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, dict[str, str]]]:
    """The service, with a metrics port named only in ASSAYGATE_CONTROL_PLANE, another sandbox's
    relay served as the worker serves it, and the witness on loopback; the variables the attacker
    is given."""
    folder = tmp_path_factory.mktemp("kinds")
    plane = serve("the gate's metrics")
    inbound, relay_port = relay.run(relay.serve_inbound(str(folder / "in.sock")))
    relay_host = str(inbound.sockets[0].getsockname()[0])
    control_plane = f"http://127.0.0.1:{plane.server_address[1]}"
    try:
        with (
            witnessed() as witness_port,
            deployment(folder, "kinds", {TENANT: {}}, control_plane=control_plane) as service,
        ):
            service.put_secret(TENANT, "LEAK_KEY", VALUE)
            service.put_secret(TENANT, "LONG_KEY", LONG)
            env = {
                "API_PORT": str(service.port),
                "RELAY": f"{relay_host}:{relay_port}",
                "PLANE_PORT": str(plane.server_address[1]),
                "WITNESS_PORT": str(witness_port),
            }
            yield service, env
    finally:
        relay.call(inbound.close)
        plane.shutdown()


def python_target(env: dict[str, str], world: Sandbox) -> dict[str, Any]:
    target = {"kind": "python", "entrypoint": f"{ENTRY}:agent", "secrets": SECRETS, "env": env}
    return {**example("typed"), "target": target}


def warehouse(env: dict[str, str], world: Sandbox, **runner: Any) -> dict[str, Any]:
    """The warehouse example (its careful command agent, its real MCP servers), with the secret
    and the attacker's variables; `runner` replaces the agent."""
    data: dict[str, Any] = json.loads(
        (EXAMPLES / "mcp-warehouse" / "manifest.careful.json").read_text()
    )
    servers = data["tools"]["servers"]
    servers["shop"]["url"], servers["admin"]["url"] = world.shop, world.admin
    if runner:
        data["target"]["runner"] = runner
    data["target"]["secrets"], data["target"]["env"] = SECRETS, env
    return data


def stdio_server(env: dict[str, str], world: Sandbox) -> dict[str, Any]:
    data = warehouse(env, world)
    data["tools"]["servers"]["admin"] = {"command": ATTACKER}
    return data


def command_hook(hook: str) -> Callable[[dict[str, str], Sandbox], dict[str, Any]]:
    def make(env: dict[str, str], world: Sandbox) -> dict[str, Any]:
        data = warehouse(env, world)
        data["tools"]["hooks"][hook] = {"kind": "command", "command": ATTACKER}
        return data

    return make


KINDS: dict[str, Callable[[dict[str, str], Sandbox], dict[str, Any]]] = {
    "python target": python_target,
    "command runner": lambda env, w: warehouse(env, w, kind="command", command=ATTACKER),
    "python runner": lambda env, w: warehouse(env, w, kind="python", entrypoint=f"{ENTRY}:runner"),
    "langgraph runner": lambda env, w: warehouse(
        env, w, kind="langgraph", entrypoint=f"{ENTRY}:framework"
    ),
    "openai-agents runner": lambda env, w: warehouse(
        env, w, kind="openai-agents", entrypoint=f"{ENTRY}:framework"
    ),
    "stdio server": stdio_server,
    "command reset hook": command_hook("reset"),
    "command probe hook": command_hook("probe"),
}


def given_away(text: str) -> list[str]:
    """The forms of the secret in `text`: the whole value's (plain, encoded, reversed), and each
    line's own hex and base64, which is all an encoding cut short still holds of it."""
    found = leaks(text)
    for n, line in enumerate(VALUE.splitlines()):
        raw = line.encode()
        forms = {"hex": binascii.hexlify(raw).decode(), "base64": base64.b64encode(raw).decode()}
        found += [f"line {n} {name}" for name, form in forms.items() if form.rstrip("=") in text]
    # Any 16 bytes of the long secret, hex-encoded: what a cut encoding of it still holds.
    long = binascii.hexlify(LONG.encode()).decode()
    found += ["long hex"] * any(long[i : i + 32] in text for i in range(0, len(long) - 32, 2))
    return found


def submitted(service: Deployment, manifest: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    plan = MCP_PLAN if manifest["target"]["kind"] == "mcp" else PYTHON_PLAN
    with service.submitter(TENANT) as client:
        candidate = submit(client, manifest, system=system_name("kinds"), version="v1", plan=plan)
        done = wait_decided(client, candidate["id"], timeout=300)
        return everything(client, done), done


@pytest.mark.parametrize("kind", list(KINDS))
def test_code_of_every_kind_reaches_no_address_of_the_gate_and_hands_back_no_secret(
    gate: tuple[Deployment, dict[str, str]],
    sandbox: Sandbox,  # noqa: F811
    kind: str,
) -> None:
    service, env = gate
    Witness.reports.pop(kind, None)
    manifest = KINDS[kind]({**env, "KIND": kind}, sandbox)
    seen, done = submitted(service, copy.deepcopy(manifest))
    assert done["status"] in ("done", "failed") and done.get("decision") != "allow", done
    # The code ran, in this kind's sandbox, and its own service heard from it.
    [report, *_] = Witness.reports.get(kind) or pytest.fail(f"{kind} never ran: {seen[-2000:]}")
    assert report["secret"] == VALUE  # it held the secret
    answers = report["tunnels"]
    assert len(answers) == 8, answers
    assert all(a.startswith("HTTP/1.1 403") for a in answers.values()), answers
    # Nothing it printed, claimed or failed with gives the secret away.
    assert given_away(seen) == [], (given_away(seen), seen[-3000:])


def test_every_worker_warns_once_at_its_start_that_loopback_is_every_tenants_alike(
    gate: tuple[Deployment, dict[str, str]],
) -> None:
    """Loopback otherwise allowed, for every tenant alike, while this tenant runs code: where
    tenants' workers share a host, the operator should name ports per tenant instead."""
    service, _ = gate
    said = service.logged(SHARED_LOOPBACK)
    assert sorted(said) == ["kinds", "shared"]
    for lines in said.values():
        [line] = lines
        assert "warning" in line.lower() and "every loopback port" in line and f"({TENANT})" in line
        assert "ASSAYGATE_EGRESS_LOOPBACK_TENANTS" in line
