"""The embedded broker never hands a worker a message it is still writing."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from celery import Celery
from kombu import Connection
from kombu.transport import filesystem

from service import spool
from service.settings import Settings


@contextmanager
def channel(transport: type, folder: Path) -> Iterator[Any]:
    queue = folder / "queue"
    queue.mkdir(exist_ok=True)
    options = {"data_folder_in": str(queue), "data_folder_out": str(queue)}
    with Connection(
        "filesystem://localhost/", transport=transport, transport_options=options
    ) as connection:
        yield connection.default_channel


def poll_while_writing(
    monkeypatch: pytest.MonkeyPatch, module: Any, name: str, reader: Any
) -> list[Any]:
    """Have a reader get from the queue at the moment the writer calls `module.name`."""
    seen: list[Any] = []
    real = getattr(module, name)

    def probed(*args: Any, **kwargs: Any) -> Any:
        try:
            seen.append(reader._get("tasks"))
        except (Empty, ValueError) as exc:
            seen.append(exc)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, probed)
    return seen


def test_a_reader_polling_while_the_payload_is_written_finds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with channel(spool.Transport, tmp_path) as writer, channel(spool.Transport, tmp_path) as reader:
        seen = poll_while_writing(monkeypatch, os, "rename", reader)
        writer._put("tasks", {"body": "x" * 4096})
        monkeypatch.undo()
        assert len(seen) == 1 and isinstance(seen[0], Empty)
        assert reader._get("tasks") == {"body": "x" * 4096}


def test_kombus_own_put_is_read_half_written_and_lost_which_is_why_the_spool_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same probe against kombu's transport, at its lock (after the file exists, before its
    # payload): the reader takes an empty file and the message is gone. Should kombu fix its put,
    # this fails and the spool can go.
    with (
        channel(filesystem.Transport, tmp_path) as writer,
        channel(filesystem.Transport, tmp_path) as reader,
    ):
        seen = poll_while_writing(monkeypatch, filesystem, "lock", reader)
        writer._put("tasks", {"body": "x"})
        monkeypatch.undo()
        assert len(seen) == 1 and isinstance(seen[0], json.JSONDecodeError)
        assert not list((tmp_path / "queue").iterdir())


def test_every_message_arrives_once_and_whole_while_a_reader_polls_without_pause(
    tmp_path: Path,
) -> None:
    sent = [{"n": n, "body": "y" * (n % 7 * 1000)} for n in range(400)]
    received: list[Any] = []
    failures: list[BaseException] = []
    written = threading.Event()

    def read() -> None:
        with channel(spool.Transport, tmp_path) as reader:
            while not (written.is_set() and reader._size("tasks") == 0):
                try:
                    received.append(reader._get("tasks"))
                except Empty:
                    pass
                except BaseException as exc:  # the finding: a reader met a bad message
                    failures.append(exc)
                    return

    thread = threading.Thread(target=read)
    thread.start()
    with channel(spool.Transport, tmp_path) as writer:
        for message in sent:
            writer._put("tasks", message)
    written.set()
    thread.join(60)
    assert not failures
    assert sorted(received, key=lambda m: m["n"]) == sent
    assert not list((tmp_path / "queue").iterdir()), "no partial file is left behind"


def test_the_embedded_settings_send_and_consume_through_the_spool(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, broker_url="", database_url="")
    assert settings.broker_url.startswith("filesystem")
    app = Celery("probe", set_as_current=False)
    app.conf.update(settings.celery_config())
    with app.connection_for_write() as connection:
        assert isinstance(connection.transport, spool.Transport)
