"""The runner author's helpers: a claim is built as the proxy will read it, or refused at once."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import urllib.request

import pytest

from assaygate.mcp import ClaimInvalid, claim, mcp_url, serve_lines


def test_a_completed_claim_names_its_effect_and_an_alarm_is_marked() -> None:
    assert claim("completed", "s-1") == {"status": "completed", "effect_id": "s-1"}
    assert claim("held", anomaly=True) == {"status": "held", "anomaly": True}


@pytest.mark.parametrize(
    ("status", "effect"), [("done", None), ("completed", None), ("denied", "s")]
)
def test_a_claim_the_gate_would_refuse_is_refused_by_the_helper(
    status: str, effect: str | None
) -> None:
    with pytest.raises(ClaimInvalid):
        claim(status, effect)


def test_the_proxy_url_missing_says_which_variable_to_set() -> None:
    with pytest.raises(LookupError, match="ASSAYGATE_MCP_URL"):
        mcp_url({})
    assert mcp_url({"ASSAYGATE_MCP_URL": "http://127.0.0.1:9/t"}) == "http://127.0.0.1:9/t"


def test_the_lines_loop_answers_each_run_with_one_line() -> None:
    runs = [{"task": {"order_id": f"o-{i}"}, "mcp_url": f"http://p/{i}"} for i in range(2)]
    stdin = io.StringIO("".join(json.dumps(r) + "\n" for r in runs) + "\n")
    stdout = io.StringIO()

    def run(task: dict[str, str], url: str) -> dict[str, str] | list[dict[str, str]]:
        if task["order_id"] == "o-0":
            return claim("denied")
        return [claim("completed", url)]

    serve_lines(run, stdin, stdout)
    lines = [json.loads(x) for x in stdout.getvalue().splitlines()]
    assert lines == [
        {"status": "denied"},
        {"claims": [{"status": "completed", "effect_id": "http://p/1"}]},
    ]


@pytest.mark.parametrize("module", ["assaygate.mcp_host", "service.mcp.host"])
def test_the_mcp_runners_host_serves_a_callable_by_its_name_and_its_earlier_one(
    module: str,
) -> None:
    # The earlier name (service.mcp.host) still starts the host, for a release.
    host = subprocess.Popen(
        [
            sys.executable,
            "-W",
            "always::DeprecationWarning",
            "-m",
            module,
            "builtins:dict.fromkeys",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert host.stdout is not None
        url = json.loads(host.stdout.readline())["url"]
        body = json.dumps({"task": {"id": 1}, "mcp_url": "http://127.0.0.1:9/mcp"}).encode()
        request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            # `dict.fromkeys(task, mcp_url)`: the reply is the callable's return, as JSON.
            assert json.loads(reply.read()) == {"id": "http://127.0.0.1:9/mcp"}
    finally:
        _, err = host.communicate(b"", timeout=30)
    deprecated = b"DeprecationWarning: service.mcp.host is deprecated" in err
    assert deprecated == (module == "service.mcp.host"), err
