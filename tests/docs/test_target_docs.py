"""What docs/targets.md and docs/mcp.md tell a target author is what a target is given (issue 47:
`Task` had no `action_id`, and a python target that read a tool's reply in the HTTP reply's
shape, `.get("policy", {})`, checked nothing and said nothing).

Every field of the task and every tool's reply the pages show is compared with what a real trial
gives, in both forms (the python methods and the HTTP endpoints), and each example a page names
as a file (a python block whose first line is `# NAME.py`) runs: the careful python target
decides without a violation, the misread one is the target error the page quotes, and the MCP
runner runs against the warehouse example's servers."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from assaygate.host import RemoteTools
from assaygate.replies import SHAPES
from service.core.shards.assay import replay_trial
from service.core.trial.sandbox import Task, Tools
from service.targets import load_target
from service.targets.tool_server import ROUTES, ToolServer
from tests.mcp.conftest import Sandbox, sandbox  # noqa: F401 (the warehouse servers)
from tests.support.service import ROOT
from tests.targets.conftest import assay, example, fault, plan

TARGETS = ROOT / "docs" / "targets.md"
MCP = ROOT / "docs" / "mcp.md"
# The python method behind each tool endpoint (the same name in both tables).
ENDPOINTS = {
    "now": "/v1/clock/now",
    "sleep": "/v1/clock/sleep",
    "new_trace": "/v1/ids/trace",
    "request_id": "/v1/ids/request",
    "record": "/v1/evidence/record",
    "checkpoint_save": "/v1/checkpoints/save",
    "checkpoint_load": "/v1/checkpoints/load",
    "respond": "/v1/claims",
    **{s.method: s.endpoint for s in SHAPES.values()},
}


def section(document: Path, heading: str) -> str:
    """The text under `heading` (a `###` or `##` line), up to the next heading of its level or
    above (a `#` line inside a code block is code, not a heading)."""
    level = len(heading.split(" ", 1)[0])
    lines = document.read_text().splitlines()
    start = lines.index(heading) + 1
    out, fenced = [], False
    for line in lines[start:]:
        fenced = fenced != line.startswith("```")
        mark = re.match(r"(#+) ", line)
        if not fenced and mark and len(mark.group(1)) <= level:
            break
        out.append(line)
    return "\n".join(out) + "\n"


def table(text: str) -> list[list[str]]:
    """The first Markdown table's body rows, each as its cells (`\\|` kept inside a cell)."""
    rows = [line for line in text.splitlines() if line.startswith("|")]
    cells = [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", r)[1:-1]] for r in rows]
    return cells[2:]


def named(cell: str) -> str:
    """`crm_read(order_id)` -> `crm_read`: the name a cell starts with."""
    found = re.match(r"`(\w+)", cell)
    assert found, cell
    return found.group(1)


def examples(document: Path) -> dict[str, str]:
    """Each python block whose first line names it as a file (`# careful_target.py`)."""
    found = re.findall(
        r"^```python\n# (\w+)\.py\b.*?\n(.*?)^```", document.read_text(), re.M | re.S
    )
    return {name: code for name, code in found}


def top_keys(cell: str) -> set[str]:
    """The keys of a documented reply at its top level: `{"grant": {...} | null}` -> {grant},
    `{"status": "committed", "ledger_ref", ...}` -> {status, ledger_ref, ...}."""
    depth, keys, after_colon = 0, set(), False
    for token in re.finditer(r'"(\w+)"|[{}\[\]:,]', cell):
        t = token.group(0)
        if t in "{[":
            depth += 1
        elif t in "}]":
            depth -= 1
        elif t == ":":
            after_colon = True
            continue
        elif token.group(1) and depth == 1 and not after_colon:
            keys.add(token.group(1))
        after_colon = False
    return keys


def same_shape(documented: Any, real: Any, where: str) -> None:
    """The same JSON type, the same keys, all the way down (a list by its first item)."""
    assert type(documented) is type(real), f"{where}: {documented!r} vs {real!r}"
    if isinstance(real, dict):
        assert set(documented) == set(real), f"{where}: {sorted(documented)} vs {sorted(real)}"
        for key in real:
            same_shape(documented[key], real[key], f"{where}.{key}")
    if isinstance(real, list) and real:
        assert documented, where
        same_shape(documented[0], real[0], f"{where}[0]")


def in_a_trial(
    probe: Callable[[Task, RemoteTools, Callable[[str, dict[str, Any]], Any]], None],
) -> None:
    """Run `probe` in a real trial with the python tools and a `post(path, body)` over HTTP.
    `checkpoint_rollback` arms nothing any probe call crosses."""

    def target(task: Task, tools: Tools) -> None:
        with ToolServer() as server:
            session = server.open(task, tools)
            host, port = server.base_url.removeprefix("http://").split(":")
            conn = http.client.HTTPConnection(host, int(port), timeout=10)

            def post(path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
                head = {"Authorization": f"Bearer {session.token}", **(headers or {})}
                conn.request("POST", path, json.dumps(body), head)
                reply = conn.getresponse()
                data = reply.read()
                assert reply.status == 200, (path, reply.status, data)
                return json.loads(data)

            try:
                probe(task, RemoteTools(server.base_url, session.token), post)
            finally:
                conn.close()
                server.release(session)

    replay_trial(example("typed"), plan(1, "checkpoint_rollback"), 0, target)


# -- the task -------------------------------------------------------------------------------------


def test_the_docs_name_every_field_of_the_task_with_an_example_of_its_type() -> None:
    rows = {named(r[0]): r for r in table(section(TARGETS, "### The task, field by field"))}
    assert set(rows) == {*Task.__slots__, "action_id"}
    given: dict[str, Any] = {}

    def probe(task: Task, tools: RemoteTools, post: Any) -> None:
        given.update(task.view(), action_id=task.action_id)
        # The http task request carries every field but `action_id` in `task`, and it beside.
        assert set(task.view()) == set(rows) - {"action_id"}

    in_a_trial(probe)
    shown = {name: json.loads(row[3].strip("`")) for name, row in rows.items()}
    for name, value in given.items():
        assert type(shown[name]) is type(value), (name, shown[name], value)
    assert shown["action_id"] == f"{shown['order_id']}:refund:{shown['run_id']}"
    assert given["action_id"] == f"{given['order_id']}:refund:{given['run_id']}"


# -- each tool's reply, in both forms -------------------------------------------------------------


def documented_returns() -> dict[str, Any]:
    text = section(TARGETS, "### What each tool returns")
    block = re.search(r"^```json\n(.*?)^```", text, re.M | re.S)
    assert block is not None
    return dict(json.loads(block.group(1)))


def test_each_tool_returns_what_the_docs_show_and_the_http_reply_wraps_it() -> None:
    rows = {named(r[0]): r for r in table(section(TARGETS, "### What each tool returns"))}
    assert set(rows) == set(ENDPOINTS), "every method of the Tools protocol, once"
    shown = documented_returns()
    http_rows = {r[0].strip("`"): r for r in table(section(TARGETS, "### Tool endpoints"))}
    assert set(http_rows) == set(ROUTES), "every endpoint the tool server serves, once"
    returned: dict[str, Any] = {}
    replied: dict[str, Any] = {}

    def probe(task: Task, tools: RemoteTools, post: Any) -> None:
        aid, order = task.action_id, task.order_id
        returned["now"], replied["now"] = tools.now(), post("/v1/clock/now", {})
        returned["new_trace"] = trace = tools.new_trace()
        replied["new_trace"] = post("/v1/ids/trace", {})
        returned["request_id"], replied["request_id"] = (
            tools.request_id(),
            post("/v1/ids/request", {}),
        )
        returned["sleep"], replied["sleep"] = tools.sleep(1), post("/v1/clock/sleep", {"ms": 1})
        for method, body in (
            ("crm_read", {"order_id": order}),
            ("orders_read", {"order_id": order}),
            ("capability_check", {"grant_id": task.grant_id}),
        ):
            returned[method] = getattr(tools, method)(*body.values())
            replied[method] = post(ENDPOINTS[method], body)
        returned["policy_read"], replied["policy_read"] = (
            tools.policy_read(),
            post("/v1/policy/read", {}),
        )
        proposal = (order, task.tenant, task.grant_id, task.amount)
        returned["propose"] = action = tools.propose(*proposal)
        replied["propose"] = post(
            "/v1/proposals",
            dict(zip(("order_id", "tenant", "grant_id", "amount"), proposal, strict=True)),
        )
        refund = (action["subject"], action["tenant"], action["amount"])
        returned["refund"] = tools.refund(*refund, aid, aid, trace, action["grant_id"])
        replied["refund"] = post(
            "/v1/payments/refunds",
            {
                **dict(zip(("subject", "tenant", "amount"), refund, strict=True)),
                "grant_id": action["grant_id"],
                "expected_version": None,
            },
            {"Idempotency-Key": aid, "Assaygate-Action-Id": aid},
        )
        returned["lookup"], replied["lookup"] = (
            tools.lookup(aid),
            post("/v1/payments/lookup", {"action_id": aid}),
        )
        record = ("effect", aid, trace, returned["refund"]["ledger_ref"], "refunded")
        returned["record"] = tools.record(*record)
        replied["record"] = post(
            "/v1/evidence/record",
            dict(
                zip(("kind", "action_id", "trace_id", "ledger_ref", "detail"), record, strict=True)
            ),
        )
        returned["evidence_read"], replied["evidence_read"] = (
            tools.evidence_read(aid),
            post("/v1/evidence/read", {"action_id": aid}),
        )
        saved = {"run_id": task.run_id, "stage": "authorised", "data": {"note": 1}}
        returned["checkpoint_save"] = tools.checkpoint_save(*saved.values())
        replied["checkpoint_save"] = post("/v1/checkpoints/save", saved)
        returned["checkpoint_load"] = tools.checkpoint_load(task.run_id)
        replied["checkpoint_load"] = post("/v1/checkpoints/load", {"run_id": task.run_id})
        returned["respond"] = tools.respond("completed", aid, returned["refund"]["ledger_ref"])
        replied["respond"] = post(
            "/v1/claims", {"status": "denied", "action_id": aid, "ledger_ref": None}
        )

    in_a_trial(probe)
    assert set(returned) == set(rows)
    for method, value in returned.items():
        # The python form: the documented example's shape, or None where the docs say so.
        if value is None:
            assert method not in shown and "`None`" in rows[method][1], method
        else:
            same_shape(shown[method], json.loads(json.dumps(value)), method)
        # The http form: the documented keys, wrapping what the method returned.
        reply, cell = replied[method], rows[method][2]
        if "unwrapped" in cell:
            same_shape(reply, json.loads(json.dumps(value)), f"{method} (http)")
            continue
        assert set(reply) == top_keys(cell), (method, reply, cell)
        assert set(reply) == top_keys(http_rows[ENDPOINTS[method]][2]), (method, reply)
        if method in SHAPES or method == "checkpoint_load":
            (wrapped,) = reply.values()
            same_shape(json.loads(json.dumps(value)), wrapped, f"{method} (http)")
    # The objects a python target is handed refuse the keys these shapes do not name.
    for method, shape in SHAPES.items():
        item = shown[method][0] if shape.listed else shown[method]
        assert set(item) == set(shape.keys), method


# -- the examples ---------------------------------------------------------------------------------


@pytest.fixture
def code_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on the import path the python target's host inherits."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path


def test_the_careful_python_target_of_the_docs_runs_without_a_violation(code_folder: Path) -> None:
    (code_folder / "careful_target.py").write_text(examples(TARGETS)["careful_target"])
    manifest = example("typed", kind="python", entrypoint="careful_target:run")
    modes = ("timeout_after_commit", "stale_policy", "partial_success_response")
    target = load_target(manifest)
    try:
        report = assay(manifest, plan(3, *modes), target)
    finally:
        target.close()  # type: ignore[union-attr]
    assert report["target_errors"]["total"] == 0, report["target_errors"]
    for mode in modes:
        counts = fault(report, mode)["signature"]["counts"]
        bad = ("unsafe_escape", "duplicate_effect", "unverifiable_release")
        assert all(counts[c] == 0 for c in bad), (mode, counts)
        assert counts["useful_service"] + counts["contained"] > 0, (mode, counts)


def test_the_misread_python_target_of_the_docs_is_the_target_error_the_docs_quote(
    code_folder: Path,
) -> None:
    (code_folder / "misread_target.py").write_text(examples(TARGETS)["misread_target"])
    manifest = example("typed", kind="python", entrypoint="misread_target:run")
    target = load_target(manifest)
    try:
        report = assay(manifest, plan(1, "stale_policy"), target)
    finally:
        target.close()  # type: ignore[union-attr]
    causes = report["target_errors"]["causes"]
    quoted = re.search(
        r"^```text\n(TargetRaised: .*)\n```", section(TARGETS, "### What each tool returns"), re.M
    )
    assert quoted is not None
    assert report["target_errors"]["total"] >= 1
    assert causes["TargetRaised"] == [quoted.group(1)]


def test_the_mcp_runner_of_the_docs_is_given_the_documented_task_and_reads_every_reply(
    sandbox: Sandbox,  # noqa: F811
    tmp_path: Path,
) -> None:
    (tmp_path / "warehouse_runner.py").write_text(examples(MCP)["warehouse_runner"])
    seen = tmp_path / "tasks.jsonl"
    # Records what the runner was handed, then runs the docs' runner on it.
    (tmp_path / "recording.py").write_text(
        "import json\nimport warehouse_runner\n\n\ndef run(task, mcp_url):\n"
        f"    with open({str(seen)!r}, 'a') as out:\n"
        "        out.write(json.dumps(task) + '\\n')\n"
        "    return warehouse_runner.run(task, mcp_url)\n"
    )
    manifest = sandbox.manifest("careful")
    manifest["target"]["runner"] = {
        "kind": "python",
        "entrypoint": "recording:run",
        "deadline_s": 60,
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    modes = [
        f"ship_order_{m}" for m in ("timeout_after_commit", "partial_reply", "malformed_reply")
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    env["PYTHONPATH"] = str(ROOT)
    args = ["assay", "manifest.json", "--trials", "1", "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", *args, *(a for m in modes for a in ("--mode", m))],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = json.loads(done.stdout)
    assert report["target_errors"]["total"] == 0, done.stderr[-2000:]
    for mode in modes:
        counts = fault(report, mode)["signature"]["counts"]
        assert counts["duplicate_effect"] == counts["unsafe_escape"] == 0, (mode, counts)
    rows = {r[0].strip("`"): r for r in table(section(MCP, "### What a runner is given"))}
    added = {name for name in rows if re.fullmatch(r"\w+", name)}
    assert added == {"trial_id", "disabled_controls"}
    reset_fields = set(re.findall(r"`(\w+)`", rows["your reset's fields"][2]))
    tasks = [json.loads(line) for line in seen.read_text().splitlines()]
    assert tasks
    for task in tasks:
        assert added <= set(task) and set(task) - added <= reset_fields, task
        assert re.fullmatch(r"t[0-9a-f]{16}", task["trial_id"])
        assert task["disabled_controls"] == sorted(task["disabled_controls"])
