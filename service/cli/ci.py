"""What CI runs: `submit` (and `--wait`) and `gate`.

`submit` prints JSON, `gate` one line (`--json`: the whole answer); both exit 0 allow, 1 block,
2 hold or reopened, 3 error (unreachable service, refused input, a failed assay, a timeout), and
write their reports on every exit code. `gate --artifact` exits 4 on an allow that rests on an
artifact assurance weaker than `executed` which the organisation's policy accepts; `gate` exits 5
when the gate knows no candidate for what it was asked (a 404: nothing to decide on).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from service.app.errors import AppError
from service.cli import reports
from service.cli.artifacts import code_bytes, digest_of, upload
from service.cli.common import (
    auth_headers,
    client_options,
    load_json,
    plan_overrides,
    refused,
    save_envelope,
    service_client,
)
from service.cli.engine import report_args
from service.cli.errors import (
    DECISION_EXIT,
    EXIT_ACCEPTED,
    EXIT_ERROR,
    EXIT_UNKNOWN,
    UsageError,
)
from service.cli.progress import ProgressLines, ShardProgress, say_deprecated
from service.core.decision.assurance import CODE as ASSURANCE
from service.core.decision.gate import reason_view
from service.core.errors import AssaygateError
from service.core.system.artifact import written


def register(sub: Any) -> None:
    """Add the `submit` and `gate` command(s) to the top-level parser."""
    submit = sub.add_parser(
        "submit",
        help="submit a manifest to a running service; exit 0 once accepted (--wait: on the "
        "decision)",
        description="Submit a manifest to a running service and print the candidate as JSON. "
        "Without --wait it exits 0 as soon as the service accepted the candidate, before any "
        "decision (read it later with `assaygate gate`); with --wait it waits for the decision "
        "and exits by it.",
    )
    submit.add_argument("manifest", type=Path)
    submit.add_argument(
        "--url", default=None, help="default: $ASSAYGATE_URL, else http://127.0.0.1:8000"
    )
    submit.add_argument(
        "--system", default=None, help="the system's name (default: the manifest's `system`)"
    )
    submit.add_argument(
        "--version",
        dest="candidate_version",
        default=None,
        metavar="VERSION",
        help="the candidate's version, e.g. the commit (default: the manifest's `version`)",
    )
    submit.add_argument("--source-revision", default=None, help="default: $GITHUB_SHA or 'local'")
    submit.add_argument("--catalogue", choices=("paper", "full"), default=None)
    submit.add_argument(
        "--trials",
        type=int,
        default=None,
        help="trials per fault (full catalogue) or in total (paper); default: the service's plan",
    )
    submit.add_argument(
        "--seed", type=int, default=None, help="the assay's seed (default: the service's plan)"
    )
    submit.add_argument(
        "--idempotency-key",
        default=None,
        help="resubmitting with the same key returns the first candidate instead of a second "
        "(default: a new random key each run; pass e.g. the commit to make a retried job safe)",
    )
    submit.add_argument(
        "--code",
        type=Path,
        default=None,
        metavar="PATH",
        help="the candidate's code: a folder (packed as `assaygate pack` packs it: HEAD inside "
        "a git work tree) or a packed file; uploaded, and the candidate names its digest",
    )
    submit.add_argument("--wait", action="store_true", help="wait for the decision")
    submit.add_argument(
        "--timeout", type=float, default=3600.0, help="seconds to wait (default 3600); then exit 3"
    )
    submit.add_argument(
        "--dossier-out", type=Path, default=None, metavar="PATH", help="save the signed envelope"
    )
    report_args(submit)
    client_options(submit)
    submit.set_defaults(func=_submit)

    gate = sub.add_parser(
        "gate",
        help="may this version ship? one line (--json: the whole answer); exit 0 allow, 1 block, "
        "2 hold or reopened, 3 error, 4 allow on an accepted weaker assurance (--artifact), 5 "
        "no such candidate",
        description="Ask the service whether a version may ship. Prints one line, the decision "
        "and its leading reasons; --json prints the whole answer. Without --version the answer "
        "is for the system's last submitted candidate.",
    )
    which = gate.add_mutually_exclusive_group()
    which.add_argument(
        "system",
        nargs="?",
        default=None,
        help="the system's name (not needed with --artifact: the system whose newest "
        "candidate ships it)",
    )
    which.add_argument(
        "--manifest",
        type=Path,
        default=None,
        metavar="FILE",
        help="or take the system's name, and its version unless --version is given, from this "
        "manifest (the file `submit` sent)",
    )
    gate.add_argument(
        "--version",
        dest="candidate_version",
        default=None,
        metavar="VERSION",
        help="the candidate's version (default: the system's last submitted candidate)",
    )
    gate.add_argument(
        "--artifact",
        default=None,
        metavar="DIGEST|PATH",
        help="ask about the candidate that ships this artifact: its digest (sha256:…), or a "
        "packed file or a folder to digest as `submit --code` does; allow only for code the "
        "gate ran (executed), unless the organisation's policy accepts weaker (exit 4)",
    )
    gate.add_argument("--json", action="store_true", help="print the whole answer as JSON")
    gate.add_argument(
        "--url", default=None, help="default: $ASSAYGATE_URL, else http://127.0.0.1:8000"
    )
    gate.add_argument(
        "--dossier-out", type=Path, default=None, metavar="PATH", help="save the signed envelope"
    )
    report_args(gate)
    client_options(gate)
    gate.set_defaults(func=_gate)


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


FINISHED = ("done", "stopped", "failed")


class Undecided(Exception):
    """`submit --wait` ran out of time; the message names the candidate, assay and progress."""


def wait_for_decision(
    client: httpx.Client,
    candidate_id: str,
    deadline: float,
    interval: float = 0.2,
    on_progress: Any = None,
    ceiling: float = 1.0,
) -> dict[str, Any]:
    """Poll the candidate until its assay is finished; `on_progress(candidate)` after each
    poll. Raises `Undecided` at the deadline, naming the candidate, its assay and how far it got.

    The first poll waits `interval`, each later one a quarter longer, up to `ceiling`: a read of
    a candidate is nine queries and ~16 ms of the API's CPU, and a CI job waits minutes, so a
    steady 0.2 s made every waiting job an API core's twelfth."""
    pause = interval
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
        time.sleep(pause)
        pause = min(max(interval, ceiling), pause * 1.25)


def dashboard_url(base: str, candidate_id: str) -> str:
    return f"{base.rstrip('/')}/candidates/{candidate_id}"


def _reports_on_every_exit(run: Callable[[argparse.Namespace], int]) -> Callable[..., int]:
    """The JUnit and summary files appear on every exit code: on 3 (refused, unreachable, a
    failed assay, a timeout) they say what went wrong, so a CI step that uploads them `if:
    always()` finds them and the test report shows the error instead of nothing."""

    def command(args: argparse.Namespace) -> int:
        reports.check_paths(args.junit, args.summary, args.dossier_out)
        args.reported, args.error = False, None
        try:
            code = run(args)
        except (UsageError, AssaygateError, AppError) as exc:
            _error_reports(args, getattr(exc, "message", None) or str(exc))
            raise
        if code in (EXIT_ERROR, EXIT_UNKNOWN) and not args.reported:
            _error_reports(args, args.error or "see the job's log", code)
        return code

    return command


def _error_reports(args: argparse.Namespace, message: str, code: int = EXIT_ERROR) -> None:
    if args.junit is None and args.summary is None:
        return
    system = getattr(args, "system", None) or getattr(args, "system_name", None) or "assaygate"
    faults = reports.catalogue_faults(getattr(args, "catalogue", None))
    outcome = reports.error_outcome(
        str(system), args.candidate_version or "", message, faults, exit_code=code
    )
    reports.write_reports(outcome, args.junit, args.summary)
    args.reported = True


def _refused(args: argparse.Namespace, response: httpx.Response) -> int:
    try:
        error = response.json().get("error") or {}
        field = f"{error['field']}: " if error.get("field") else ""
        args.error = f"HTTP {response.status_code}: {field}{error.get('message', '')}"
    except (ValueError, AttributeError):
        args.error = f"HTTP {response.status_code}: {response.text[:200]}"
    return refused(response)


@_reports_on_every_exit
def _submit(args: argparse.Namespace) -> int:
    document = load_json(args.manifest)
    body = candidate_body(
        document,
        system=args.system,
        version=args.candidate_version,
        source_revision=args.source_revision,
        plan=plan_overrides(args),
    )
    args.system_name = body.get("system")
    args.candidate_version = args.candidate_version or body.get("version")
    code = code_bytes(args.code, "--code") if args.code is not None else None
    headers = {"Idempotency-Key": args.idempotency_key or str(uuid.uuid4()), **auth_headers(args)}
    deadline = time.monotonic() + args.timeout
    with service_client(args, headers) as client:
        if code is not None:
            uploaded, body["code"] = upload(client, code)
            if uploaded.status_code >= 400:
                return _refused(args, uploaded)
            print(f"assaygate: code {body['code']} uploaded", file=sys.stderr, flush=True)
        response = client.post("/v1/candidates", json=body)
        if response.status_code >= 400:
            return _refused(args, response)
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
            candidate = _wait(client, candidate, deadline)
        except Undecided as exc:
            args.error = f"{exc}; follow it at {url}"
            return _timed_out(exc, candidate, url)
        candidate["dashboard_url"] = url
        say_deprecated(client, str(candidate["id"]))
        dossier = None
        if candidate.get("status") != "failed":
            found = client.get(f"/v1/candidates/{candidate['id']}/dossier")
            if found.status_code != 200:
                return _refused(args, found)
            dossier = found.json()
    if dossier is None:
        print(json.dumps(candidate, indent=2))
        args.error = (
            f"the assay of candidate {candidate['id']} failed: "
            f"{candidate.get('error') or 'no reason given'}; see {url}"
        )
        return EXIT_ERROR
    candidate["dossier"] = {k: v for k, v in dossier.items() if k != "envelope"}
    print(json.dumps(candidate, indent=2))
    save_envelope(args.dossier_out, dossier)
    # What the deploy gate says about this candidate now, not only what its assay decided.
    gate_now = candidate.get("gate") or {}
    decision = str(gate_now.get("decision") or dossier["decision"])
    _write_reports(
        args,
        dossier,
        decision,
        gate_now.get("reasons", dossier.get("reasons") or []),
        url,
        gate_now.get("waived") or [],
    )
    print(f"assaygate: the gate says {decision}: {url}", file=sys.stderr)
    return DECISION_EXIT.get(decision, EXIT_ERROR)


def _wait(client: httpx.Client, candidate: dict[str, Any], deadline: float) -> dict[str, Any]:
    """Wait for the decision, with a progress bar when a person watches the terminal."""
    if not sys.stderr.isatty():
        lines = ProgressLines()
        return wait_for_decision(client, candidate["id"], deadline, on_progress=lines)
    with ShardProgress(client, str(candidate["assay_id"])) as bar:
        return wait_for_decision(client, candidate["id"], deadline, interval=0.5, on_progress=bar)


def _timed_out(exc: Undecided, candidate: dict[str, Any], url: str) -> int:
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


def gate_system(args: argparse.Namespace) -> str:
    """The system `gate` asks about: named, or the `system` of the manifest `--manifest` names
    (a manifest, or a candidate body holding one, as `submit` reads it). With `--manifest` and
    no `--version`, the manifest's own `version` is the one asked about: the gate answers for
    the candidate that file was submitted as, never for whatever was submitted last."""
    if args.system is not None:
        return str(args.system)
    document = load_json(args.manifest)
    body = candidate_body(document)
    system = body.get("system")
    if not isinstance(system, str) or not system:
        raise UsageError(f"--manifest: {args.manifest} names no system (its `system` field)")
    version = body.get("version")
    if args.candidate_version is None and isinstance(version, str) and version:
        args.candidate_version = version
    return system


#: How many reasons the one line of `gate` names; `--json` has them all.
LEADING_REASONS = 2


def gate_line(answer: dict[str, Any]) -> str:
    """The gate's answer in one line: the decision, what it is about, and its leading reasons
    in the order the answer holds them (the gate puts the ones that decide first)."""
    head = f"{answer.get('decision')}: {answer.get('system')} {answer.get('version')}".rstrip()
    assured = answer.get("artifact_assurance") or {}
    if assured.get("accepted_by_policy") and answer.get("decision") == "allow":
        head += (
            f" — artifact {assured.get('assurance')}, not executed: accepted by the "
            "organisation's policy"
        )
    reasons = list(answer.get("reasons") or [])
    if not reasons:
        return head
    shown = []
    for reason in reasons[:LEADING_REASONS]:
        fault = f" ({reason['fault']})" if reason.get("fault") else ""
        if reason.get("code") == ASSURANCE and assured:
            fault = f" ({assured.get('assurance')}; the policy requires {assured.get('required')})"
        shown.append(f"{reason.get('code')}{fault}")
    more = len(reasons) - LEADING_REASONS
    tail = f" and {more} more (--json)" if more > 0 else ""
    return f"{head} — {'; '.join(shown)}{tail}"


def gate_exit(answer: dict[str, Any]) -> int:
    """The gate's exit code: the decision's, and 4 for an allow that rests on an artifact
    assurance weaker than `executed` the organisation's policy accepts."""
    decision = str(answer.get("decision"))
    assured = answer.get("artifact_assurance") or {}
    if decision == "allow" and assured.get("accepted_by_policy"):
        return EXIT_ACCEPTED
    return DECISION_EXIT.get(decision, EXIT_ERROR)


@_reports_on_every_exit
def _gate(args: argparse.Namespace) -> int:
    if args.system is None and args.manifest is None and args.artifact is None:
        raise UsageError("gate: name the system, or --manifest FILE, or --artifact")
    # By artifact alone, the service finds the system whose newest candidate ships it.
    system = gate_system(args) if args.system or args.manifest else None
    args.system_name = system
    params = {"version": args.candidate_version} if args.candidate_version else {}
    if args.artifact is not None:
        params["artifact"] = written(digest_of(args.artifact, "--artifact"))
    wants_dossier = any(p is not None for p in (args.dossier_out, args.junit, args.summary))
    with service_client(args, auth_headers(args)) as client:
        response = client.get(f"/v1/gate/{system}" if system else "/v1/gate", params=params)
        if response.status_code == 404:
            # Nothing to decide on: no such system, version or shipped artifact. Not 3, which
            # a pipeline may retry (an unreachable service); the code must be submitted first.
            _refused(args, response)
            print(f"assaygate: no candidate to answer for: {args.error}", file=sys.stderr)
            return EXIT_UNKNOWN
        if response.status_code != 200:
            return _refused(args, response)
        answer = response.json()
        print(json.dumps(answer, indent=2) if args.json else gate_line(answer))
        if wants_dossier and answer.get("dossier"):
            found = client.get(f"/v1/dossiers/{answer['dossier']['id']}")
            if found.status_code != 200:
                return _refused(args, found)
            save_envelope(args.dossier_out, found.json())
            url = dashboard_url(str(client.base_url), str(answer["candidate_id"]))
            _write_reports(
                args,
                found.json(),
                str(answer.get("decision")),
                answer.get("reasons") or [],
                url,
                answer.get("waived") or [],
            )
        elif args.junit is not None or args.summary is not None:
            # No dossier yet (pending): the reports say what the gate says, without faults.
            outcome = reports.ReportedDecision(
                system=str(answer.get("system", system)),
                version=str(answer.get("version", "")),
                decision=str(answer.get("decision")),
                reasons=[reason_view(r) for r in answer.get("reasons") or []],
                faults=[],
            )
            reports.write_reports(outcome, args.junit, args.summary)
            args.reported = True
    return gate_exit(answer)


def _write_reports(
    args: argparse.Namespace,
    dossier: dict[str, Any],
    decision: str,
    reasons: list[dict[str, Any]],
    link: str,
    waived: list[dict[str, Any]],
) -> None:
    if args.junit is None and args.summary is None:
        return
    args.reported = True
    # "Dossier:" goes to the dossier's page, not the candidate's.
    outcome = reports.from_dossier(
        dossier["envelope"],
        decision=decision,
        reasons=reasons,
        link=f"{link}/dossier",
        waived=waived,
    )
    if args.dossier_out is not None:
        outcome.properties["dossier_file"] = str(args.dossier_out)
    reports.write_reports(outcome, args.junit, args.summary)
