"""Configuration, import-time behaviour and the structured logs."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from service.settings import JsonLineFormatter, Settings, TextFormatter, log_format
from tests.support.service import ROOT, WorkerProcess, candidate_body, wait_decided


def bare_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}


def test_no_configuration_means_the_embedded_mode_under_var(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in list(os.environ):
        if name.startswith("ASSAYGATE_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    settings = Settings()
    assert settings.embedded
    assert settings.database_url == f"sqlite:///{tmp_path / 'var' / 'assaygate.sqlite3'}"
    assert settings.broker_url.startswith("filesystem://")
    assert settings.celery_config()["task_ignore_result"] is True
    assert settings.max_body_bytes == 1024 * 1024


def test_by_default_a_run_of_target_errors_stops_the_assay(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A hung or broken target must not cost every planned trial: the service stops it by default.
    for name in list(os.environ):
        if name.startswith("ASSAYGATE_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    assert Settings().stop_max_target_errors == 20


def test_a_redis_broker_is_also_the_result_backend_with_a_short_visibility_timeout() -> None:
    settings = Settings(
        database_url="postgresql+psycopg://db/assaygate",
        broker_url="redis://cache:6379/0",
        broker_visibility_timeout=30,
    )
    config = settings.celery_config()
    assert not settings.embedded
    assert config["result_backend"] == "redis://cache:6379/0"
    assert config["broker_transport_options"]["visibility_timeout"] == 30


def test_importing_the_service_reads_no_configuration() -> None:
    # A setting that cannot parse would raise the moment anything read the environment.
    env = {**bare_environment(), "ASSAYGATE_MAX_BODY_BYTES": "lots"}
    code = "import service.asgi, service.db.session, worker.app, worker.tasks"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True)


def test_log_lines_are_json_objects_carrying_the_ids() -> None:
    record = logging.LogRecord(
        "assaygate.worker", logging.INFO, __file__, 1, "shard stored", (), None
    )
    record.__dict__.update(assay_id="a-1", candidate_id="c-1", shard=3)
    line = json.loads(JsonLineFormatter().format(record))
    assert line["msg"] == "shard stored"
    assert (line["assay_id"], line["candidate_id"], line["shard"]) == ("a-1", "c-1", 3)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_logs_are_readable_lines_on_a_terminal_and_json_for_everything_else(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path)
    assert settings.log_format == "auto"
    assert log_format(settings, Terminal()) == "text"
    with (tmp_path / "log").open("w") as file:
        assert log_format(settings, file) == "json"
    assert log_format(Settings(data_dir=tmp_path, log_format="json"), Terminal()) == "json"
    assert log_format(Settings(data_dir=tmp_path, log_format="text"), io.StringIO()) == "text"


def test_a_readable_log_line_carries_the_ids_as_key_value_pairs() -> None:
    record = logging.LogRecord(
        "assaygate.worker", logging.INFO, __file__, 1, "shard stored", (), None
    )
    record.__dict__.update(assay_id="a-1", shard=3)
    line = TextFormatter().format(record)
    assert re.fullmatch(r"\d\d:\d\d:\d\d INFO +shard stored +\((.*)\)", line), line
    assert "assay_id=a-1" in line and "shard=3" in line
    assert not line.startswith("{")


@pytest.mark.integration
def test_workers_log_each_stored_shard_with_its_ids(
    client: httpx.Client, workers: list[WorkerProcess]
) -> None:
    submitted = client.post("/v1/candidates", json=candidate_body("baseline", trials=3)).json()
    wait_decided(client, submitted["id"])
    lines = [
        json.loads(line)
        for worker in workers
        for line in worker.log_path.read_text().splitlines()
        if line.startswith("{")
    ]
    stored = [
        line
        for line in lines
        if line["msg"] == "shard stored" and line.get("assay_id") == submitted["assay_id"]
    ]
    assert len(stored) == 18
    assert all(line["candidate_id"] == submitted["id"] for line in stored)
    assert sorted(line["shard"] for line in stored) == list(range(18))
