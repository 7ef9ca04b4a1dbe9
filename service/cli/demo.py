"""`assaygate demo`: the embedded service, the example candidates, their decisions."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from service.cli.ci import Undecided, candidate_body, wait_for_decision
from service.cli.common import (
    assaygate_command,
    framed,
    free_port,
    load_json,
    plan_overrides,
)
from service.cli.errors import UsageError
from service.core.decision.gate import block_first
from service.settings import Settings, get_settings


def register(sub: Any) -> None:
    """Add the `demo` command(s) to the top-level parser."""
    demo = sub.add_parser(
        "demo",
        help="start the embedded service, submit the example candidates, print the decisions",
    )
    demo.add_argument("--examples", type=Path, default=Path("examples"), metavar="DIR")
    demo.add_argument("--data-dir", type=Path, default=None, help="default: a temporary folder")
    demo.add_argument("--port", type=int, default=0, help="default: any free port")
    demo.add_argument("--workers", type=int, default=None, help="worker processes")
    demo.add_argument("--trials", type=int, default=None, help="trials per fault")
    demo.add_argument(
        "--seed", type=int, default=None, help="the assays' seed (default: the service's plan)"
    )
    demo.add_argument("--timeout", type=float, default=600.0, help="seconds to wait in total")
    demo.add_argument(
        "--keep",
        action="store_true",
        help="keep the data (in --data-dir, or a new folder) and say how to browse it",
    )
    demo.set_defaults(func=_demo)


@dataclass(frozen=True)
class DemoKeys:
    submitter: str
    # Signs in to the dashboard afterwards: reads everything, reviews the demo's holds.
    reviewer: str


def demo_key(data_dir: Path) -> DemoKeys:
    """Migrate the demo's database and give the demo its own keys in the tenant `demo`: one to
    submit with, and a reviewer's to browse (and review) the result with."""
    from service.app.keys import OperatorMint, mint_as_operator
    from service.app.records import KeyRole, PersonKind
    from service.cli.database import upgrade
    from service.cli.keys import operator_session

    data_dir.mkdir(parents=True, exist_ok=True)
    settings = Settings(
        data_dir=data_dir,
        database_url=f"sqlite:///{data_dir / 'assaygate.sqlite3'}",
        broker_url="filesystem://localhost/",
    )
    upgrade(settings)
    with operator_session(settings) as session:
        submitter = mint_as_operator(
            session,
            OperatorMint("demo", [KeyRole.SUBMITTER], "demo", PersonKind.SERVICE, name="demo"),
        )
        reviewer = mint_as_operator(
            session,
            OperatorMint("demo", [KeyRole.REVIEWER], "demo reviewer", name="demo reviewer"),
        )
    return DemoKeys(submitter.secret, reviewer.secret)


def _demo(args: argparse.Namespace) -> int:
    examples = sorted(args.examples.glob("*.json"))
    if not examples:
        raise UsageError(f"no *.json examples in {args.examples}")
    bodies = [
        (path, candidate_body(load_json(path), source_revision="demo", plan=plan_overrides(args)))
        for path in examples
    ]
    port = args.port or free_port()
    with contextlib.ExitStack() as stack:
        if args.data_dir is not None:
            data_dir = args.data_dir.absolute()
        elif args.keep:
            data_dir = Path(tempfile.mkdtemp(prefix="assaygate-demo-"))
        else:
            data_dir = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="assaygate-demo-"))
            )
        command = [
            sys.executable,
            "-m",
            "service.cli",
            "serve",
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
        ]
        if args.workers:
            command += ["--workers", str(args.workers)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
        env["ASSAYGATE_LOG_LEVEL"] = "WARNING"
        keys = demo_key(data_dir)
        print(f"Starting the embedded service on http://127.0.0.1:{port} (data in {data_dir})")
        # The child's own announcement and worker chatter would only confuse: its stderr (warnings)
        # stays.
        server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
        try:
            code = _run_demo(
                f"http://127.0.0.1:{port}",
                bodies,
                time.monotonic() + args.timeout,
                server,
                keys.submitter,
            )
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        if args.keep or args.data_dir is not None:
            print(browse_instructions(data_dir, keys, get_settings().port))
        else:
            print("\nThe demo's data was deleted; `assaygate demo --keep` keeps it to browse.")
        return code


def browse_instructions(data_dir: Path, keys: DemoKeys, port: int) -> str:
    """Where the demo's data was kept, how to look at it in the dashboard and through the API
    (on the port `serve` will use: $ASSAYGATE_PORT, else 8000); and a submitter key, since a
    reviewer's key is refused (403) by `submit`."""
    folder = shlex.quote(str(data_dir))
    serve = f"{assaygate_command()} serve --data-dir {folder}"
    return framed(
        [
            f"The demo's data is kept in {data_dir} (delete it when done: rm -r {folder}).",
            "Browse the result:",
            f"  {serve}",
            f"  then open http://127.0.0.1:{port}/ and sign in with this reviewer key:",
            f"  {keys.reviewer}",
            f"(the CLI and curl: export ASSAYGATE_API_KEY={keys.reviewer})",
            "To submit your own candidates (`assaygate submit FILE`), the submitter key:",
            f"  {keys.submitter}",
        ]
    )


def _run_demo(
    url: str,
    bodies: list[tuple[Path, dict[str, Any]]],
    deadline: float,
    server: subprocess.Popen[bytes],
    key: str,
) -> int:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, timeout=30.0, headers=headers) as client:
        while True:
            if server.poll() is not None:
                raise UsageError("the embedded service exited during start-up")
            try:
                if client.get("/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise UsageError("the embedded service did not become ready")
            time.sleep(0.2)
        submitted: list[tuple[Path, dict[str, Any], float]] = []
        for path, body in bodies:
            response = client.post("/v1/candidates", json=body)
            if response.status_code != 202:
                error = response.json().get("error", {})
                print(f"{path.name}: refused: {error.get('field')}: {error.get('message')}")
                continue
            submitted.append((path, response.json(), time.monotonic()))
            print(f"{path.name}: submitted as candidate {response.json()['id']}")
        print()
        width = max(len(p.name) for p, _, _ in submitted) if submitted else 10
        for path, candidate, started in submitted:
            try:
                done = wait_for_decision(client, candidate["id"], deadline)
            except Undecided as exc:
                print(f"{path.name}: {exc}")
                return 1
            seconds = time.monotonic() - started
            # What the gate says about the candidate, as `assaygate gate` would.
            decision = (done.get("gate") or {}).get("decision") or done["status"]
            reasons = (done.get("gate") or {}).get("reasons") or done.get("reasons") or []
            # The line shows one reason: a block's must be a block reason.
            first = block_first(reasons)[0]["message"] if reasons else ""
            print(f"{path.name:<{width}}  {decision:<8} {seconds:6.1f}s  {first}")
    return 0
