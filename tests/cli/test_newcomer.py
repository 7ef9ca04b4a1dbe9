"""What a newcomer reads first says what is true (issue 39's list): each message that changed."""

from __future__ import annotations

import argparse
import json
import socket
from pathlib import Path

import pytest

from service.cli import common
from service.cli.demo import DemoKeys, browse_instructions
from service.cli.errors import UsageError
from tests.cli.test_commands import assaygate
from tests.support.service import ROOT


def test_secrets_help_says_a_refused_request_exits_3() -> None:
    done = assaygate("secrets", "put", "--help")
    assert done.returncode == 0
    codes = done.stdout.split("exit codes:")[1]
    assert "3  the service refused the request" in codes
    assert "2  error: bad input" in codes


def test_submit_help_says_it_exits_0_without_wait_before_any_decision() -> None:
    done = assaygate("submit", "--help")
    text = " ".join(done.stdout.split())
    assert "Without --wait it exits 0 as soon as the service accepted the candidate" in text
    assert "0 allow with --wait; without --wait, the candidate was accepted" in text


def test_db_upgrade_says_what_it_did_and_then_that_there_was_nothing_to_do(
    tmp_path: Path,
) -> None:
    first = assaygate("db", "upgrade", "--data-dir", str(tmp_path), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "migrated from revision (empty) to " in first.stdout
    assert str(tmp_path / "assaygate.sqlite3") in first.stdout
    again = assaygate("db", "upgrade", "--data-dir", str(tmp_path), cwd=tmp_path)
    assert "is already at revision" in again.stdout and "(nothing to do)" in again.stdout


def test_keys_list_marks_the_active_key_after_a_rotation(tmp_path: Path) -> None:
    first = json.loads(assaygate("keys", "rotate", "--data-dir", str(tmp_path)).stdout)
    second = json.loads(assaygate("keys", "rotate", "--data-dir", str(tmp_path)).stdout)
    listed = json.loads(assaygate("keys", "list", "--data-dir", str(tmp_path)).stdout)
    assert listed["active"] == second["active"] != first["active"]
    marks = {k["keyid"]: k["active"] for k in listed["keys"]}
    assert marks[second["active"]] is True
    assert marks[first["active"]] is False


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_default_address_hints_to_set_assaygate_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The default address on a port where nothing listens (8000 may be anyone's on this machine).
    default = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setattr(common, "DEFAULT_URL", default)
    monkeypatch.delenv("ASSAYGATE_URL", raising=False)
    with (
        pytest.raises(UsageError) as err,
        common.service_client(argparse.Namespace(url=None), {}) as client,
    ):
        client.get("/v1/secrets")
    assert str(err.value).startswith(f"cannot reach {default}")
    assert "set ASSAYGATE_URL, or pass --url" in str(err.value)


def test_an_unreachable_address_from_the_environment_says_it_came_from_there(
    tmp_path: Path,
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    done = assaygate("secrets", "list", cwd=tmp_path, env={"ASSAYGATE_URL": url})
    assert f"cannot reach {url}" in done.stderr
    assert "the address in ASSAYGATE_URL" in done.stderr


def test_the_demo_says_where_its_data_is_kept_and_the_port_serve_will_use(tmp_path: Path) -> None:
    text = browse_instructions(tmp_path, DemoKeys("sub-key", "rev-key"), 8123)
    assert f"kept in {tmp_path}" in text
    assert "http://127.0.0.1:8123/" in text
    assert "8000" not in text


def test_make_demo_keeps_its_data_in_var_demo_and_replaces_it_each_run() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ndemo:")[1].split("\n\n")[0]
    assert "\nDEMO_DIR ?= var/demo\n" in makefile
    assert "rm -rf $(DEMO_DIR)" in recipe
    assert "demo --data-dir $(DEMO_DIR)" in recipe
    assert "--keep" not in recipe
