"""What several commands share: the service client, server options, framed output."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from service.cli.errors import EXIT_ERROR, UsageError
from service.settings import Settings, SettingsInvalid, get_settings, settings_problems


def client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--api-key", default=None, help="sent as a bearer token (default: $ASSAYGATE_API_KEY)"
    )


def auth_headers(args: argparse.Namespace) -> dict[str, str]:
    headers: dict[str, str] = {}
    api_key = args.api_key or os.environ.get("ASSAYGATE_API_KEY")
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def server_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=None, help="default: $ASSAYGATE_HOST or 127.0.0.1")
    parser.add_argument("--port", type=int, default=None, help="default: $ASSAYGATE_PORT or 8000")
    parser.add_argument("--data-dir", type=Path, default=None, help="default: ./var")
    parser.add_argument("--workers", type=int, default=None, help="worker processes (embedded)")


def data_dir_option(parser: argparse.ArgumentParser) -> None:
    """`--data-dir` on the commands that open the service's database or keys directly."""
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="the service's folder, as `serve --data-dir` was given (default: "
        "$ASSAYGATE_DATA_DIR, else ./var)",
    )


def settings_from(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    for name in ("host", "port", "data_dir"):
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    processes = getattr(args, "processes", None)
    if processes is not None:
        if processes < 1:
            raise UsageError("--processes must be at least 1")
        overrides["api_processes"] = processes
    workers = getattr(args, "workers", None)
    if workers is not None:
        if workers < 1:
            raise UsageError("--workers must be at least 1")
        overrides["worker_concurrency"] = workers
    if not overrides:
        return get_settings()
    try:
        return Settings(**overrides)
    except ValidationError as error:
        raise SettingsInvalid(settings_problems(error)) from None


def load_json(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise UsageError(f"{path} must hold a JSON object")
    return document


def plan_overrides(args: argparse.Namespace) -> dict[str, Any]:
    plan = {k: getattr(args, k, None) for k in ("catalogue", "trials", "seed")}
    return {k: v for k, v in plan.items() if v is not None}


DEFAULT_URL = "http://127.0.0.1:8000"


class ServiceClient(httpx.Client):
    """An httpx client whose transport errors become one line and exit code 3, with what to do
    about it: where the address came from is where a newcomer changes it."""

    hint = ""

    def request(self, *args: Any, **kwargs: Any) -> httpx.Response:
        try:
            return super().request(*args, **kwargs)
        except httpx.HTTPError as exc:
            raise UsageError(f"cannot reach {self.base_url}: {exc}{self.hint}") from None


def service_client(args: argparse.Namespace, headers: dict[str, str]) -> httpx.Client:
    if args.url:
        url, hint = args.url, " (check --url)"
    elif os.environ.get("ASSAYGATE_URL"):
        url, hint = os.environ["ASSAYGATE_URL"], " (the address in ASSAYGATE_URL)"
    else:
        url = DEFAULT_URL
        hint = (
            " (nothing answers at the default address: start `assaygate serve`, or set "
            "ASSAYGATE_URL, or pass --url, to the address your service prints)"
        )
    client = ServiceClient(base_url=url, timeout=30.0, headers=headers)
    client.hint = hint
    return client


def refused(response: httpx.Response) -> int:
    try:
        print(json.dumps(response.json(), indent=2))
    except ValueError:
        print(json.dumps({"error": {"code": "http_error", "message": response.text[:500]}}))
    return EXIT_ERROR


def save_envelope(path: Path | None, dossier: dict[str, Any]) -> None:
    if path is None:
        return
    # The envelope as the service signed it; `assaygate verify` reads this file.
    path.write_text(json.dumps(dossier["envelope"], indent=2) + "\n")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def assaygate_command() -> str:
    """The command as the user can type it: `.venv/bin/assaygate` from a checkout's venv."""
    here = Path(sys.executable).parent / "assaygate"
    if here.exists():
        try:
            return str(here.relative_to(Path.cwd()))
        except ValueError:
            return str(here)
    return "assaygate"


def framed(lines: list[str]) -> str:
    """Lines in a box, so a key or an instruction stands out among log lines."""
    width = max(len(line) for line in lines)
    rule = "─" * (width + 2)
    body = "\n".join(f"│ {line:<{width}} │" for line in lines)
    return f"┌{rule}┐\n{body}\n└{rule}┘"
