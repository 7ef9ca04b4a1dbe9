"""Service commands of the `assaygate` CLI: serve, demo, submit, gate, keys, db.

`submit --wait` and `gate` are what CI runs; they print JSON and exit 0 allow, 1 block, 2 hold or
reopened, 3 error (unreachable service, refused input, a failed assay, a timeout).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from service import reports
from service.cli import UsageError
from service.cli_engine import report_args
from service.settings import Settings, configure_logging, get_settings

log = logging.getLogger("assaygate.serve")

DECISION_EXIT = {"allow": 0, "block": 1, "hold": 2, "reopened": 2}
EXIT_ERROR = 3
#: Commands whose exit code a pipeline reads as a decision: any error there is 3, never 2.
CI_COMMANDS = ("assay", "submit", "gate")


def register(sub: Any) -> None:
    """Add the service subcommands to the top-level parser."""
    serve = sub.add_parser(
        "serve",
        help="run the API (and, embedded, a worker) on localhost:8000",
        description="With no configuration: SQLite and a filesystem broker under ./var, the "
        "schema migrated, a worker started as a child process, the API on 127.0.0.1:8000.",
    )
    _server_options(serve)
    serve.add_argument(
        "--worker",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="start a worker child process (default: only when embedded)",
    )
    serve.add_argument(
        "--migrate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run `db upgrade` before serving (default: only when embedded)",
    )
    serve.set_defaults(func=_serve)

    demo = sub.add_parser(
        "demo",
        help="start the embedded service, submit the example candidates, print the decisions",
    )
    demo.add_argument("--examples", type=Path, default=Path("examples"), metavar="DIR")
    demo.add_argument("--data-dir", type=Path, default=None, help="default: a temporary folder")
    demo.add_argument("--port", type=int, default=0, help="default: any free port")
    demo.add_argument("--workers", type=int, default=None, help="worker processes")
    demo.add_argument("--trials", type=int, default=None, help="trials per fault")
    demo.add_argument("--seed", type=int, default=None)
    demo.add_argument("--timeout", type=float, default=600.0, help="seconds to wait in total")
    demo.add_argument(
        "--keep",
        action="store_true",
        help="keep the data (in --data-dir, or a new folder) and say how to browse it",
    )
    demo.set_defaults(func=_demo)

    submit = sub.add_parser("submit", help="submit a manifest to a running service")
    submit.add_argument("manifest", type=Path)
    submit.add_argument(
        "--url", default=None, help="default: $ASSAYGATE_URL, else http://127.0.0.1:8000"
    )
    submit.add_argument("--system", default=None)
    submit.add_argument("--version", dest="candidate_version", default=None)
    submit.add_argument("--source-revision", default=None, help="default: $GITHUB_SHA or 'local'")
    submit.add_argument("--catalogue", choices=("paper", "full"), default=None)
    submit.add_argument("--trials", type=int, default=None)
    submit.add_argument("--seed", type=int, default=None)
    submit.add_argument("--idempotency-key", default=None)
    submit.add_argument("--wait", action="store_true", help="wait for the decision")
    submit.add_argument(
        "--timeout", type=float, default=3600.0, help="seconds to wait (default 3600); then exit 3"
    )
    submit.add_argument(
        "--dossier-out", type=Path, default=None, metavar="PATH", help="save the signed envelope"
    )
    report_args(submit)
    _client_options(submit)
    submit.set_defaults(func=_submit)

    gate = sub.add_parser(
        "gate",
        help="may this version ship? exit 0 allow, 1 block, 2 hold or reopened, 3 error",
    )
    gate.add_argument("system")
    gate.add_argument("--version", dest="candidate_version", default=None)
    gate.add_argument(
        "--url", default=None, help="default: $ASSAYGATE_URL, else http://127.0.0.1:8000"
    )
    gate.add_argument(
        "--dossier-out", type=Path, default=None, metavar="PATH", help="save the signed envelope"
    )
    report_args(gate)
    _client_options(gate)
    gate.set_defaults(func=_gate)

    keys = sub.add_parser(
        "keys",
        help="signing keys (rotate, list) and API keys (create, revoke, list-api); run where "
        "the keys and the database are configured",
    )
    keys_sub = keys.add_subparsers(dest="keys_command", required=True, parser_class=type(keys))
    rotate = keys_sub.add_parser("rotate", help="retire the active key and make a new one")
    rotate.set_defaults(func=_keys_rotate)
    listing = keys_sub.add_parser("list", help="print every published key (GET /v1/keys)")
    listing.set_defaults(func=_keys_list)
    create = keys_sub.add_parser(
        "create", help="create an API key for a tenant (created if new); prints the key once"
    )
    create.add_argument("--tenant", required=True, help="the team the key acts for")
    create.add_argument(
        "--role",
        dest="roles",
        action="append",
        required=True,
        choices=("submitter", "reviewer", "admin"),
        help="repeat for several roles",
    )
    create.add_argument("--name", default=None, help="what the key is for, e.g. ci-main")
    holder = create.add_mutually_exclusive_group(required=True)
    holder.add_argument(
        "--person", default=None, help="the person who holds the key, e.g. 'Ada Lovelace'"
    )
    holder.add_argument(
        "--service-account", default=None, metavar="NAME", help="or the service account, e.g. ci"
    )
    create.set_defaults(func=_keys_create)
    revoke = keys_sub.add_parser("revoke", help="revoke an API key by its id (refused at once)")
    revoke.add_argument("key_id")
    revoke.set_defaults(func=_keys_revoke)
    list_api = keys_sub.add_parser("list-api", help="list API keys (never the keys themselves)")
    list_api.add_argument("--tenant", default=None)
    list_api.set_defaults(func=_keys_list_api)

    db = sub.add_parser("db", help="database schema (Alembic migrations)")
    db_sub = db.add_subparsers(dest="db_command", required=True, parser_class=type(db))
    up = db_sub.add_parser("upgrade", help="migrate to a revision (default: head)")
    up.add_argument("revision", nargs="?", default="head")
    up.set_defaults(func=_db_upgrade)
    down = db_sub.add_parser("downgrade", help="migrate back to a revision")
    down.add_argument("revision")
    down.set_defaults(func=_db_downgrade)
    check = db_sub.add_parser("check", help="fail if the models need a migration")
    check.set_defaults(func=_db_check)


def _client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--api-key", default=None, help="sent as a bearer token (default: $ASSAYGATE_API_KEY)"
    )


def _headers(args: argparse.Namespace) -> dict[str, str]:
    headers: dict[str, str] = {}
    api_key = args.api_key or os.environ.get("ASSAYGATE_API_KEY")
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _server_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=None, help="default: $ASSAYGATE_HOST or 127.0.0.1")
    parser.add_argument("--port", type=int, default=None, help="default: $ASSAYGATE_PORT or 8000")
    parser.add_argument("--data-dir", type=Path, default=None, help="default: ./var")
    parser.add_argument("--workers", type=int, default=None, help="worker processes (embedded)")


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    for name in ("host", "port", "data_dir"):
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    workers = getattr(args, "workers", None)
    if workers is not None:
        if workers < 1:
            raise UsageError("--workers must be at least 1")
        overrides["worker_concurrency"] = workers
    if not overrides:
        return get_settings()
    return Settings(**overrides)


# ---------------------------------------------------------------------------------------- db


def _db_upgrade(args: argparse.Namespace) -> int:
    from service.db import migrate

    settings = get_settings()
    if settings.database_is_sqlite:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    migrate.upgrade(settings, args.revision)
    return 0


def _db_downgrade(args: argparse.Namespace) -> int:
    from service.db import migrate

    migrate.downgrade(get_settings(), args.revision)
    return 0


def _db_check(_args: argparse.Namespace) -> int:
    from alembic.util.exc import CommandError

    from service.db import migrate

    try:
        migrate.check(get_settings())
    except CommandError as exc:
        print(f"assaygate: {exc}", file=sys.stderr)
        return 1
    return 0


# ------------------------------------------------------------------------------------- serve


class EmbeddedWorker:
    """The worker child of `serve`: started, restarted if it dies, stopped with the server.

    The embedded broker has no visibility timeout, and a message is gone from its folder once a
    worker has read it. The child's reconciler would send a shard it held again once its lease
    lapsed; embedded, the child is the only worker, so `serve` need not wait: before each child
    starts, every shard of an open assay that has no result is released (pending, a fresh lease)
    and enqueued again. Copies of shards that are still queued cost one lookup each: by the time
    a copy is read the original has stored the result or holds the shard, and the copy finds it
    done or leased.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._process: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._supervise, name="worker-supervisor", daemon=True
        )

    def start(self, ready_within: float = 30.0) -> None:
        """Start the child and wait (up to `ready_within` seconds) until it consumes tasks."""
        self._requeue_unfinished()
        self._spawn()
        self._thread.start()
        deadline = time.monotonic() + ready_within
        while not self._ready_file.exists() and time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                break
            time.sleep(0.05)

    @property
    def _ready_file(self) -> Path:
        return self.settings.data_dir / f"worker-ready-{os.getpid()}"

    def _spawn(self) -> None:
        command = [
            sys.executable,
            "-m",
            "worker",
            "--concurrency",
            str(self.settings.worker_concurrency),
        ]
        self._ready_file.unlink(missing_ok=True)
        env = self.settings.child_environment()
        env["ASSAYGATE_WORKER_READY_FILE"] = str(self._ready_file)
        self._process = subprocess.Popen(command, env=env, preexec_fn=_die_with_parent)
        log.info("worker started", extra={"worker": str(self._process.pid)})

    def _supervise(self) -> None:
        backoff = 1.0
        while not self._stopping.wait(backoff):
            process = self._process
            if process is None or process.poll() is None or self._stopping.is_set():
                backoff = 1.0
                continue
            # A worker that cannot start would otherwise be respawned every second forever.
            backoff = min(backoff * 2, 60.0)
            log.error("worker exited with %s; restarting", process.returncode)
            self._requeue_unfinished()
            self._spawn()

    def _requeue_unfinished(self) -> None:

        from service.db.lease import release_all
        from service.db.session import make_engine, session_scope
        from service.http.dispatch import Dispatcher

        if not self.settings.embedded:
            return  # other workers may hold these shards: their leases and reconcilers decide
        engine = make_engine(self.settings)
        dispatcher = Dispatcher(self.settings)
        dispatcher.prepare()
        try:
            # Released and sent in one transaction: if the queue refuses, nothing is counted.
            with session_scope(engine) as session:
                unfinished = release_all(session, self.settings.shard_lease_s)
                for assay_id, indices in unfinished.items():
                    dispatcher.enqueue_shards(assay_id, indices)
        finally:
            dispatcher.close()
            engine.dispose()

    def stop(self) -> None:
        self._stopping.set()
        self._ready_file.unlink(missing_ok=True)
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _die_with_parent() -> None:
    """Linux: the worker child gets SIGTERM if `serve` dies without cleaning up (SIGKILL, OOM)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _exit_on_sigterm(_signum: int, _frame: object) -> None:
    # uvicorn restores this handler and re-raises SIGTERM once it has shut down; exiting through
    # SystemExit (not the default handler's instant death) lets `serve` stop its worker first.
    raise SystemExit(0)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service.asgi import create_app
    from service.db import migrate

    settings = _settings(args)
    configure_logging(settings)
    if settings.database_is_sqlite:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    if args.migrate if args.migrate is not None else settings.embedded:
        migrate.upgrade(settings)
    first_key = _first_admin_key(settings) if settings.embedded else None
    worker = (
        EmbeddedWorker(settings)
        if (args.worker if args.worker is not None else settings.embedded)
        else None
    )
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if worker is not None:
        worker.start()
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
    )
    announcement = _announcement(settings, first_key)

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            # Listening now; no request is served before this block is out.
            if self.started:
                print(announcement, flush=True)

    try:
        Server(config).run()
    finally:
        if worker is not None:
            worker.stop()
    return 0


def _announcement(settings: Settings, first_key: str | None) -> str:
    """What `serve` prints once it listens: where it is, and (first start only) the first key,
    framed so it stands out from the log lines around it."""
    url = f"http://{settings.host}:{settings.port}"
    lines = [f"Assaygate is up: {url}/ (dashboard), {url}/docs (OpenAPI)"]
    if first_key is not None:
        lines += [
            "",
            f"First API key (tenant {_default_tenant()}; admin, submitter, reviewer), shown",
            "only now:",
            f"  {first_key}",
            "Sign in to the dashboard with it, or send it as `Authorization: Bearer <key>`",
            "(ASSAYGATE_API_KEY for the CLI); more keys: `assaygate keys create`.",
        ]
    return framed(lines)


def _default_tenant() -> str:
    from service.db.apikey import DEFAULT_TENANT

    return DEFAULT_TENANT


# ------------------------------------------------------------------------------- submit/demo


def candidate_body(
    document: dict[str, Any],
    *,
    system: str | None = None,
    version: str | None = None,
    source_revision: str | None = None,
    plan: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A POST /v1/candidates body from a manifest file (or a file that already is such a body)."""
    body: dict[str, Any] = dict(document) if "manifest" in document else {"manifest": document}
    manifest = body["manifest"]
    body.setdefault("system", system or manifest.get("system"))
    body.setdefault("version", version or manifest.get("version"))
    body.setdefault("source_revision", source_revision or os.environ.get("GITHUB_SHA") or "local")
    if plan:
        body["plan"] = {**body.get("plan", {}), **plan}
    return {k: v for k, v in body.items() if v is not None}


def _load(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise UsageError(f"{path} must hold a JSON object")
    return document


def _plan(args: argparse.Namespace) -> dict[str, Any]:
    plan = {k: getattr(args, k, None) for k in ("catalogue", "trials", "seed")}
    return {k: v for k, v in plan.items() if v is not None}


FINISHED = ("done", "stopped", "failed")


class Undecided(Exception):
    """`submit --wait` ran out of time; the message names the candidate, assay and progress."""


def wait_for_decision(
    client: httpx.Client,
    candidate_id: str,
    deadline: float,
    interval: float = 0.2,
    on_progress: Any = None,
) -> dict[str, Any]:
    """Poll the candidate until its assay is finished; `on_progress(candidate)` after each
    poll. Raises `Undecided` at the deadline, naming the candidate, its assay and how far it got."""
    while True:
        try:
            response = client.get(f"/v1/candidates/{candidate_id}")
        except httpx.TransportError:
            response = None  # the API is restarting or unreachable: keep waiting
        # 503: the service's database is away; the assay resumes when it is back.
        if response is not None and response.status_code != 503:
            response.raise_for_status()
            candidate: dict[str, Any] = response.json()
            if on_progress is not None:
                on_progress(candidate)
            if candidate["status"] in FINISHED:
                return candidate
        if time.monotonic() > deadline:
            p = candidate.get("progress") or {}
            raise Undecided(
                f"candidate {candidate_id} (assay {candidate.get('assay_id')}) undecided after "
                f"the timeout: {p.get('shards_done', 0)} of {p.get('shard_count', '?')} shards, "
                f"{p.get('trials_done', 0)} of {p.get('trials_planned', '?')} trials done"
            )
        time.sleep(interval)


def dashboard_url(base: str, candidate_id: str) -> str:
    return f"{base.rstrip('/')}/candidates/{candidate_id}"


class ShardProgress:
    """A progress bar on stderr while `submit --wait` waits on a terminal: the assay's shards
    done, and each fault's. Polls `GET /v1/assays/{id}` at most once a second."""

    def __init__(self, client: httpx.Client, assay_id: str) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self._client = client
        self._assay = assay_id
        self._last = 0.0
        self._bar = Progress(
            TextColumn("{task.description:<28}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("shards"),
            console=Console(stderr=True),
            transient=True,
        )
        self._overall = self._bar.add_task("assay", total=None)
        self._faults: dict[str, Any] = {}

    def __enter__(self) -> ShardProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def __call__(self, candidate: dict[str, Any]) -> None:
        p = candidate.get("progress") or {}
        self._bar.update(
            self._overall,
            completed=p.get("shards_done", 0),
            total=p.get("shard_count") or None,
            description=f"assay {candidate.get('status', '')}",
        )
        if time.monotonic() - self._last < 1.0:
            return
        self._last = time.monotonic()
        response = self._client.get(f"/v1/assays/{self._assay}")
        if response.status_code != 200:
            return
        for fault in response.json().get("faults", []):
            name = str(fault.get("id") or "all faults")
            fp = fault.get("progress") or {}
            if name not in self._faults:
                self._faults[name] = self._bar.add_task(f"  {name}", total=fp.get("shard_count"))
            self._bar.update(
                self._faults[name],
                completed=fp.get("shards_done", 0),
                total=fp.get("shard_count") or None,
            )


def _submit(args: argparse.Namespace) -> int:
    reports.check_paths(args.junit, args.summary, args.dossier_out)
    body = candidate_body(
        _load(args.manifest),
        system=args.system,
        version=args.candidate_version,
        source_revision=args.source_revision,
        plan=_plan(args),
    )
    headers = {"Idempotency-Key": args.idempotency_key or str(uuid.uuid4()), **_headers(args)}
    deadline = time.monotonic() + args.timeout
    with _client(args, headers) as client:
        response = client.post("/v1/candidates", json=body)
        if response.status_code >= 400:
            return _refused(response)
        candidate = response.json()
        url = dashboard_url(str(client.base_url), candidate["id"])
        print(
            f"assaygate: candidate {candidate['id']} (assay {candidate['assay_id']}) "
            f"submitted; follow it at {url}",
            file=sys.stderr,
            flush=True,
        )
        if not args.wait:
            print(json.dumps({**candidate, "dashboard_url": url}, indent=2))
            return 0
        try:
            if sys.stderr.isatty():
                with ShardProgress(client, str(candidate["assay_id"])) as bar:
                    candidate = wait_for_decision(
                        client, candidate["id"], deadline, interval=0.5, on_progress=bar
                    )
            else:
                candidate = wait_for_decision(client, candidate["id"], deadline)
        except Undecided as exc:
            error = {
                "code": "timeout",
                "message": f"{exc}; follow it at {url}",
                "candidate_id": candidate["id"],
                "assay_id": candidate["assay_id"],
                "dashboard_url": url,
            }
            print(json.dumps({"error": error}, indent=2))
            print(f"assaygate: error: {error['message']}", file=sys.stderr)
            return EXIT_ERROR
        candidate["dashboard_url"] = url
        dossier = None
        if candidate.get("status") != "failed":
            found = client.get(f"/v1/candidates/{candidate['id']}/dossier")
            if found.status_code != 200:
                return _refused(found)
            dossier = found.json()
    if dossier is None:
        print(json.dumps(candidate, indent=2))
        return EXIT_ERROR
    candidate["dossier"] = {k: v for k, v in dossier.items() if k != "envelope"}
    print(json.dumps(candidate, indent=2))
    _save_envelope(args.dossier_out, dossier)
    # What the deploy gate says about this candidate now, not only what its assay decided.
    gate_now = candidate.get("gate") or {}
    decision = str(gate_now.get("decision") or dossier["decision"])
    _write_reports(
        args,
        dossier,
        decision,
        gate_now.get("reasons", dossier.get("reasons") or []),
        url,
    )
    print(f"assaygate: the gate says {decision}: {url}", file=sys.stderr)
    return DECISION_EXIT.get(decision, EXIT_ERROR)


def _gate(args: argparse.Namespace) -> int:
    reports.check_paths(args.junit, args.summary, args.dossier_out)
    params = {"version": args.candidate_version} if args.candidate_version else {}
    wants_dossier = any(p is not None for p in (args.dossier_out, args.junit, args.summary))
    with _client(args, _headers(args)) as client:
        response = client.get(f"/v1/gate/{args.system}", params=params)
        if response.status_code != 200:
            return _refused(response)
        answer = response.json()
        print(json.dumps(answer, indent=2))
        if wants_dossier and answer.get("dossier"):
            found = client.get(f"/v1/dossiers/{answer['dossier']['id']}")
            if found.status_code != 200:
                return _refused(found)
            _save_envelope(args.dossier_out, found.json())
            url = dashboard_url(str(client.base_url), str(answer["candidate_id"]))
            _write_reports(
                args,
                found.json(),
                str(answer.get("decision")),
                answer.get("reasons") or [],
                url,
            )
        elif args.junit is not None or args.summary is not None:
            # No dossier yet (pending): the reports say what the gate says, without faults.
            outcome = reports.Outcome(
                system=str(answer.get("system", args.system)),
                version=str(answer.get("version", "")),
                decision=str(answer.get("decision")),
                reasons=list(answer.get("reasons") or []),
                faults=[],
            )
            reports.write_reports(outcome, args.junit, args.summary)
    return DECISION_EXIT.get(str(answer.get("decision")), EXIT_ERROR)


def _write_reports(
    args: argparse.Namespace,
    dossier: dict[str, Any],
    decision: str,
    reasons: list[dict[str, Any]],
    link: str,
) -> None:
    if args.junit is None and args.summary is None:
        return
    outcome = reports.from_dossier(
        dossier["envelope"], decision=decision, reasons=reasons, link=link
    )
    if args.dossier_out is not None:
        outcome.properties["dossier_file"] = str(args.dossier_out)
    reports.write_reports(outcome, args.junit, args.summary)


class _Client(httpx.Client):
    """An httpx client whose transport errors become one line and exit code 3."""

    def request(self, *args: Any, **kwargs: Any) -> httpx.Response:
        try:
            return super().request(*args, **kwargs)
        except httpx.HTTPError as exc:
            raise UsageError(f"cannot reach {self.base_url}: {exc}") from None


def _client(args: argparse.Namespace, headers: dict[str, str]) -> httpx.Client:
    url = args.url or os.environ.get("ASSAYGATE_URL") or "http://127.0.0.1:8000"
    return _Client(base_url=url, timeout=30.0, headers=headers)


def _refused(response: httpx.Response) -> int:
    try:
        print(json.dumps(response.json(), indent=2))
    except ValueError:
        print(json.dumps({"error": {"code": "http_error", "message": response.text[:500]}}))
    return EXIT_ERROR


def _save_envelope(path: Path | None, dossier: dict[str, Any]) -> None:
    if path is None:
        return
    # The envelope as the service signed it; `assaygate verify` reads this file.
    path.write_text(json.dumps(dossier["envelope"], indent=2) + "\n")


def _keys_rotate(_args: argparse.Namespace) -> int:
    from service.keys import KeyRing

    settings = get_settings()
    assert settings.keys_dir is not None
    signer = KeyRing(settings.keys_dir).rotate()
    print(json.dumps({"active": signer.keyid, "keys_dir": str(settings.keys_dir)}, indent=2))
    return 0


def _keys_list(_args: argparse.Namespace) -> int:
    from service.keys import KeyRing

    settings = get_settings()
    assert settings.keys_dir is not None
    published = KeyRing(settings.keys_dir).published()
    print(json.dumps({"keys": [k.view() for k in published]}, indent=2))
    return 0


def _keys_create(args: argparse.Namespace) -> int:
    from sqlmodel import Session

    from service.db.apikey import KeyRequestInvalid, create_key, key_row
    from service.db.models import PersonKind, Role
    from service.db.session import make_engine

    tenant = args.tenant.strip()
    if not tenant or len(tenant) > 100:
        raise UsageError("--tenant must be 1 to 100 characters")
    engine = make_engine(get_settings())
    try:
        with Session(engine) as session:
            try:
                created = create_key(
                    session,
                    tenant=tenant,
                    roles=[Role(r) for r in args.roles],
                    name=args.name,
                    person=args.person or args.service_account,
                    kind=PersonKind.SERVICE if args.service_account else PersonKind.PERSON,
                )
            except KeyRequestInvalid as exc:
                flag = {"kind": "--person/--service-account", "person": "--person"}
                raise UsageError(f"{flag.get(exc.field, exc.field)}: {exc.message}") from None
            session.commit()
            row = key_row(session, created.key.id)
            assert row is not None
            view = _key_view(row)
    finally:
        engine.dispose()
    print(json.dumps({**view, "key": created.secret}, indent=2))
    print("Keep the key now: it is stored only as a hash and never shown again.", file=sys.stderr)
    return 0


def _keys_revoke(args: argparse.Namespace) -> int:
    from sqlmodel import Session

    from service.db.apikey import get_key, key_row, revoke
    from service.db.session import make_engine

    try:
        key_id = uuid.UUID(args.key_id)
    except ValueError as exc:
        raise UsageError(f"not a key id: {args.key_id}") from exc
    engine = make_engine(get_settings())
    try:
        with Session(engine) as session:
            key = get_key(session, key_id, None)
            if key is None:
                raise UsageError(f"no API key {key_id}")
            revoke(session, key)
            session.commit()
            row = key_row(session, key.id)
            assert row is not None
            print(json.dumps(_key_view(row), indent=2))
    finally:
        engine.dispose()
    return 0


def _keys_list_api(args: argparse.Namespace) -> int:
    from sqlmodel import Session

    from service.db.apikey import keys, tenant_by_name
    from service.db.session import make_engine

    engine = make_engine(get_settings())
    try:
        with Session(engine) as session:
            tenant_id = None
            if args.tenant is not None:
                tenant = tenant_by_name(session, args.tenant)
                if tenant is None:
                    raise UsageError(f"no tenant {args.tenant}")
                tenant_id = tenant.id
            items = [_key_view(row) for row in keys(session, tenant_id)]
    finally:
        engine.dispose()
    print(json.dumps({"items": items}, indent=2))
    return 0


def _key_view(row: Any) -> dict[str, Any]:
    key = row.key
    return {
        "id": str(key.id),
        "tenant": row.tenant.name,
        "roles": list(key.roles),
        "name": key.name,
        "person": row.person.name,
        "kind": row.person.kind,
        "minted_by": row.minted_by.name if row.minted_by else None,
        "prefix": key.prefix,
        "created_at": key.created_at.isoformat(),
        "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
    }


def _first_admin_key(settings: Settings) -> str | None:
    """Embedded first start: with no API key at all, make one (shown once, by `_announce`)."""
    from sqlmodel import Session

    from service.db.apikey import DEFAULT_TENANT, any_key, create_key
    from service.db.models import Role
    from service.db.session import make_engine

    engine = make_engine(settings)
    try:
        with Session(engine) as session:
            if any_key(session):
                return None
            created = create_key(
                session,
                tenant=DEFAULT_TENANT,
                roles=list(Role),
                name="first admin key",
                person="admin",
            )
            session.commit()
    finally:
        engine.dispose()
    return created.secret


@dataclass(frozen=True)
class DemoKeys:
    submitter: str
    # Signs in to the dashboard afterwards: reads everything, reviews the demo's holds.
    reviewer: str


def demo_key(data_dir: Path) -> DemoKeys:
    """Migrate the demo's database and give the demo its own keys in the tenant `demo`: one to
    submit with, and a reviewer's to browse (and review) the result with."""
    from sqlmodel import Session

    from service.db import migrate
    from service.db.apikey import create_key
    from service.db.models import PersonKind, Role
    from service.db.session import make_engine

    data_dir.mkdir(parents=True, exist_ok=True)
    settings = Settings(
        data_dir=data_dir,
        database_url=f"sqlite:///{data_dir / 'assaygate.sqlite3'}",
        broker_url="filesystem://localhost/",
    )
    migrate.upgrade(settings)
    engine = make_engine(settings)
    try:
        with Session(engine) as session:
            submitter = create_key(
                session,
                tenant="demo",
                roles=[Role.SUBMITTER],
                name="demo",
                person="demo",
                kind=PersonKind.SERVICE,
            )
            reviewer = create_key(
                session,
                tenant="demo",
                roles=[Role.REVIEWER],
                name="demo reviewer",
                person="demo reviewer",
                kind=PersonKind.PERSON,
            )
            session.commit()
    finally:
        engine.dispose()
    return DemoKeys(submitter.secret, reviewer.secret)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _demo(args: argparse.Namespace) -> int:
    examples = sorted(args.examples.glob("*.json"))
    if not examples:
        raise UsageError(f"no *.json examples in {args.examples}")
    bodies = [
        (path, candidate_body(_load(path), source_revision="demo", plan=_plan(args)))
        for path in examples
    ]
    port = args.port or _free_port()
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
            print(browse_instructions(data_dir, keys.reviewer))
        else:
            print("\nThe demo's data was deleted; `assaygate demo --keep` keeps it to browse.")
        return code


def browse_instructions(data_dir: Path, key: str) -> str:
    """How to look at what the demo left behind, in the dashboard and through the API."""
    serve = f"{_assaygate()} serve --data-dir {shlex.quote(str(data_dir))}"
    return framed(
        [
            "Browse the result:",
            f"  {serve}",
            "  then open http://127.0.0.1:8000/ and sign in with this reviewer key:",
            f"  {key}",
            f"(the CLI and curl: export ASSAYGATE_API_KEY={key})",
        ]
    )


def _assaygate() -> str:
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
            first = reasons[0]["message"] if reasons else ""
            print(f"{path.name:<{width}}  {decision:<8} {seconds:6.1f}s  {first}")
    return 0
