"""`assaygate serve` with no configuration: SQLite, a filesystem broker, a worker child process.
The same end-to-end check as against PostgreSQL and Redis, with neither in reach."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest

from service.core.faults.plan import parse_plan
from service.core.shards.assay import run_assay
from service.core.system.manifest import parse_manifest
from tests.support.reports import figures
from tests.support.service import (
    EXAMPLES,
    ROOT,
    candidate_body,
    free_port,
    local_report,
    wait_decided,
    wait_for,
)

pytestmark = pytest.mark.integration

MODES = ["subject_swap", "stale_policy", "timeout_after_commit", "fork_run"]


class Embedded(NamedTuple):
    url: str
    data_dir: Path
    server: subprocess.Popen[bytes]
    # The first admin key, printed once by the first start.
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


FIRST_KEY = re.compile(rb"\b(ag_[A-Za-z0-9_-]{43})\b")


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Embedded]:
    data_dir = tmp_path_factory.mktemp("embedded")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    # Make any attempt to reach the real servers fail loudly rather than pass by accident.
    env["PGHOST"] = "127.0.0.1"
    env["PGPORT"] = "1"
    log = (data_dir / "serve.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port)],
        cwd=data_dir,
        env={**env, "PYTHONPATH": str(ROOT)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(f"{url}/readyz").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(ready, 60.0, "embedded service ready")
        keys = FIRST_KEY.findall((data_dir / "serve.log").read_bytes())
        assert len(keys) == 1, "the first start prints exactly one key"
        yield Embedded(url, data_dir, server, keys[0].decode())
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def test_serve_with_no_configuration_keeps_everything_under_var(
    embedded: Embedded,
) -> None:
    data_dir = embedded.data_dir
    assert (data_dir / "var" / "assaygate.sqlite3").is_file()
    assert (data_dir / "var" / "broker" / "queue").is_dir()


def point_body(**plan: Any) -> dict[str, Any]:
    """The typed candidate as the service tests submit it (floors on the point estimate), under
    its own version: the `submit` commands here send the committed file, another manifest."""
    return {**candidate_body("typed", **plan), "version": "1.5.0-point"}


def test_embedded_mode_decides_the_typed_candidate_like_the_local_assay(
    embedded: Embedded,
) -> None:
    url = embedded.url
    with httpx.Client(base_url=url, timeout=30.0, headers=embedded.headers) as client:
        body = point_body(trials=30, seed=11)
        response = client.post("/v1/candidates", json=body)
        assert response.status_code == 202
        done = wait_decided(client, response.json()["id"])
        report = client.get(f"/v1/assays/{done['assay_id']}").json()["report"]
    assert figures(report) == figures(local_report("typed", trials=30, seed=11))
    assert done["decision"] == report["decision"]


def test_embedded_mode_refuses_bad_input_the_same_way(embedded: Embedded) -> None:
    url = embedded.url
    body = candidate_body("typed", trials=0)
    assert httpx.post(f"{url}/v1/candidates", json=body).status_code == 401
    response = httpx.post(f"{url}/v1/candidates", json=body, headers=embedded.headers)
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "plan.trials"


def test_submit_wait_exits_with_the_decision(embedded: Embedded) -> None:
    url = embedded.url
    command = [
        sys.executable,
        "-m",
        "service.cli",
        "submit",
        str(EXAMPLES / "copperfin-baseline.json"),
        "--url",
        url,
        "--trials",
        "5",
        "--wait",
    ]
    env = {**os.environ, "ASSAYGATE_API_KEY": embedded.key}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    answer = json.loads(done.stdout)
    decision = answer["gate"]["decision"]
    assert done.returncode == {"allow": 0, "block": 1, "hold": 2, "reopened": 2}[decision]
    assert answer["dossier"]["decision"] == decision
    page = f"{url}/candidates/{answer['id']}"
    assert answer["dashboard_url"] == page
    assert answer["id"] in done.stderr and answer["assay_id"] in done.stderr and page in done.stderr
    # No terminal: no progress bar, but progress lines a CI log keeps.
    assert "━" not in done.stderr
    assert re.search(r"assaygate: assay \w+: \d+/\d+ shards, \d+/\d+ trials", done.stderr)


def on_a_terminal(command: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run `command` with stdout and stderr on a pseudo-terminal; its exit code and output."""
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        command, cwd=ROOT, stdout=follower, stderr=follower, env={**env, "COLUMNS": "110"}
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    code = proc.wait(timeout=120)
    os.close(leader)
    return code, b"".join(chunks).decode(errors="replace")


def test_submit_wait_on_a_terminal_shows_each_faults_shards_and_where_to_follow_it(
    embedded: Embedded,
) -> None:
    command = [
        sys.executable,
        "-m",
        "service.cli",
        "submit",
        str(EXAMPLES / "copperfin-typed.json"),
        "--url",
        embedded.url,
        "--trials",
        "400",
        "--wait",
    ]
    code, out = on_a_terminal(command, {**os.environ, "ASSAYGATE_API_KEY": embedded.key})
    assert code == 2, out  # the typed system holds
    found = re.search(r"candidate (\S+) \(assay (\S+)\) submitted; follow it at (\S+)", out)
    assert found, out
    assert found.group(3) == f"{embedded.url}/candidates/{found.group(1)}"
    assert re.search(r"assay (queued|running|done)\s", out) and "shards" in out
    assert "subject_swap" in out and "break_trace_lineage" in out  # a bar per fault
    assert "the gate says hold" in out


def test_a_submit_wait_timeout_names_the_candidate_its_assay_and_how_far_it_got(
    embedded: Embedded,
) -> None:
    command = [
        sys.executable,
        "-m",
        "service.cli",
        "submit",
        str(EXAMPLES / "copperfin-typed.json"),
        "--trials",
        "20000",
        "--wait",
        "--timeout",
        "0",
    ]
    env = {**os.environ, "ASSAYGATE_URL": embedded.url, "ASSAYGATE_API_KEY": embedded.key}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "timeout"
    assert error["dashboard_url"] == f"{embedded.url}/candidates/{error['candidate_id']}"
    assert error["candidate_id"] in error["message"] and error["assay_id"] in error["message"]
    assert re.search(r"\d+ of \d+ shards, \d+ of \d+ trials done", error["message"])
    assert error["message"] in done.stderr


def test_serve_frames_its_first_key_after_start_up(embedded: Embedded) -> None:
    printed = (embedded.data_dir / "serve.log").read_text(errors="replace")
    started = printed.index("Application startup complete")
    frame = printed.index("┌", started)
    assert printed.index(embedded.key) > frame and printed.index("└", frame) > printed.index(
        embedded.key
    )
    assert "Assaygate is up: http://127.0.0.1:" in printed[frame:]


def test_demo_keep_leaves_a_service_to_browse_and_says_how(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    env["TMPDIR"] = str(tmp_path)
    demo = subprocess.run(
        [sys.executable, "-m", "service.cli", "demo", "--keep", "--trials", "5"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert demo.returncode == 0, demo.stderr
    told = re.search(r"serve --data-dir (\S+)", demo.stdout)
    key = re.search(r"sign in with this reviewer key:[\s│]*(ag_\S+)", demo.stdout)
    submitter = re.search(r"the submitter key:[\s│]*(ag_\S+)", demo.stdout)
    assert told and key and submitter, demo.stdout
    folder = Path(told.group(1))
    assert folder.parent == tmp_path and (folder / "assaygate.sqlite3").is_file()
    # Browse it as told: serve the kept folder and read the decisions with the printed key.
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "service.cli",
            "serve",
            "--data-dir",
            str(folder),
            "--port",
            str(port),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _ready(url), 60.0, "the kept demo served")
        headers = {"Authorization": f"Bearer {key.group(1)}"}
        items = httpx.get(f"{url}/v1/candidates", headers=headers).json()["items"]
        assert len(items) == len(list(EXAMPLES.glob("*.json")))
        assert {c["gate"]["decision"] for c in items} <= {"allow", "hold", "block"}
        assert httpx.get(f"{url}/signin").status_code == 200
        # The submitter key the demo printed submits against the demo's data (a reviewer's: 403).
        manifest = json.loads((EXAMPLES / "copperfin-typed-repair.json").read_text())
        body = {"manifest": manifest, "source_revision": "mine", "plan": {"trials": 5}}
        for printed, status in ((submitter, 202), (key, 403)):
            posted = httpx.post(
                f"{url}/v1/candidates",
                json=body,
                headers={
                    "Authorization": f"Bearer {printed.group(1)}",
                    "Idempotency-Key": str(status),
                },
            )
            assert posted.status_code == status, posted.text
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz").status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.timeout(420)
def test_a_killed_embedded_worker_is_restarted_and_its_shards_run_again(
    embedded: Embedded,
) -> None:
    # 96 shards: long enough, even on a loaded machine, to be seen under way and killed mid-run.
    body = point_body(trials=12000, seed=5, modes=MODES)
    # A loaded machine answers a poll slowly (the worker holds SQLite's write lock): the client
    # waits long, and the kill is aimed anywhere before the last sixteen shards, not a narrow band.
    with httpx.Client(base_url=embedded.url, timeout=90.0, headers=embedded.headers) as client:
        submitted = client.post("/v1/candidates", json=body).json()

        def under_way() -> bool:
            answer = client.get(f"/v1/candidates/{submitted['id']}")
            if answer.status_code == 503:
                # SQLite busy past its timeout on a loaded machine: the read says so; ask again.
                return False
            assert answer.status_code == 200, answer.text
            progress = answer.json()["progress"]
            assert progress is not None, answer.text
            return 2 <= progress["shards_done"] <= progress["shard_count"] - 16

        wait_for(under_way, 180.0, "the assay to be under way")
        os.kill(worker_pid(embedded.server.pid), signal.SIGKILL)
        done = wait_decided(client, submitted["id"], timeout=120.0)
        report = client.get(f"/v1/assays/{done['assay_id']}").json()["report"]
    expected = run_assay(parse_manifest(body["manifest"]), parse_plan(body["plan"])).to_dict()
    assert figures(report) == figures(expected)
    assert done["progress"]["trials_done"] == 4 * 12000


def worker_pid(server_pid: int) -> int:
    children = subprocess.run(
        ["pgrep", "-P", str(server_pid), "-f", "worker --concurrency"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert len(children) == 1, children
    return int(children[0])
