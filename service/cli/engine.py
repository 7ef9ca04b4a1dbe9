"""Engine commands of the `assaygate` CLI: assay, catalogue, replay. They need only the core."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from service.cli.errors import DECISION_EXIT, EXIT_ERROR, mcp_start_failed
from service.cli.plans import held_to, load_policy, read_text, rule_args, rule_overrides
from service.cli.printing import print_report
from service.core.errors import AssaygateError, PlanInvalid
from service.core.evidence.promise import refuse_unresolvable
from service.core.evidence.tally import Tally
from service.core.faults.catalogue import Catalogue, catalogue_named, custom_catalogue
from service.core.faults.contract_catalogue import catalogue_for
from service.core.faults.plan import AssayPlan, parse_plan, validate_plan
from service.core.shards.assay import AssayReport, StopLimits, replay_trial, run_assay
from service.core.system.contract import MAX_SLOTS
from service.core.system.manifest import Manifest, parse_manifest_json
from service.core.system.secret import code_env
from service.net.egress import EgressPolicy
from service.sandbox.local import declare as declare_code_env
from service.sandbox.local import secrets_from
from service.targets import DEFAULT_TIMEOUT_S, close_target, load_target


def register(sub: Any) -> None:
    """Add the engine's commands: `assay`, `catalogue`, `mcp-proxy` and `replay`."""
    _assay_args(sub.add_parser("assay", help="run a fault assay locally and print its signature"))

    c = sub.add_parser("catalogue", help="list every FaultSpec with its coverage key")
    c.add_argument("--catalogue", default="full", help="paper, full, or a catalogue JSON file")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_catalogue)

    m = sub.add_parser(
        "mcp-proxy",
        help="serve the trial's MCP proxy over stdio (the command an agent launches; reads "
        "ASSAYGATE_MCP_URL)",
    )
    m.add_argument(
        "--url", default=None, help="the trial's proxy URL (default: $ASSAYGATE_MCP_URL)"
    )
    m.set_defaults(func=cmd_mcp_proxy)

    r = sub.add_parser("replay", help="re-execute one trial of a run and print its full trace")
    _plan_args(r)
    r.add_argument("--trial", type=int, required=True, help="the trial number in the run")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_replay)


def _assay_args(p: argparse.ArgumentParser) -> None:
    _plan_args(p)
    rule_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--policy",
        default=None,
        metavar="FILE",
        help="hold the manifest and plan to an organisation's policy, as the service does (the "
        "`policy` that `GET /v1/policy?system=NAME` answers): a looser field is an error, one "
        "left out takes the policy's value",
    )
    p.add_argument("--no-baseline", action="store_true", help="skip the matched baseline runs")
    p.add_argument(
        "--share-baseline",
        action="store_true",
        help="the faults on one tool run trial k on the same task and share its no-fault "
        "baseline, run once (plan baseline: shared)",
    )
    p.add_argument(
        "--no-counterfactual", action="store_true", help="skip the counterfactual containment pairs"
    )
    p.add_argument(
        "--trial-timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"wall-clock deadline of one agent task (python and http targets; default "
        f"{DEFAULT_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--max-target-errors",
        type=int,
        default=DEFAULT_MAX_TARGET_ERRORS,
        metavar="N",
        help=f"stop (and block) after more than N target errors (default "
        f"{DEFAULT_MAX_TARGET_ERRORS}; -1: never)",
    )
    p.add_argument(
        "--deadline",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop (and block) when the assay has run this long",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=1,
        metavar="N",
        help="run N trials at once in isolated copies of an mcp target's world, as many as "
        "it offers (tools.slots; a world without slots runs one at a time); the counts are "
        "the same at any N",
    )
    p.add_argument(
        "--secrets",
        type=Path,
        default=None,
        metavar="FILE",
        help="a JSON object of the values of the secrets the manifest names (target.secrets); "
        "without it each is read from the environment variable of its name",
    )
    p.add_argument(
        "--inherit-env",
        action="store_true",
        help="give the team's code this whole environment, not only what the manifest declares "
        "(target.env, target.secrets) as a worker does: a decision may then differ from the "
        "service's",
    )
    report_args(p)
    p.add_argument(
        "--report-out",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write the JSON report (what --json prints) to FILE; the summary links to it",
    )
    p.set_defaults(func=cmd_assay)


def report_args(p: argparse.ArgumentParser) -> None:
    """`--junit` and `--summary`, alike on `assay`, `submit` and `gate`."""
    p.add_argument(
        "--junit",
        type=Path,
        default=None,
        metavar="FILE",
        help="write a JUnit XML report: one test case per fault, failures carry the reasons",
    )
    p.add_argument(
        "--summary",
        type=Path,
        default=None,
        metavar="FILE",
        help="append a Markdown summary (e.g. $GITHUB_STEP_SUMMARY): decision, reasons, faults",
    )


def _plan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("manifest", help="the configuration manifest (JSON)")
    p.add_argument(
        "--trials",
        type=int,
        default=None,
        help="trials per fault (full catalogue) or in total (paper); default 200 / 2000",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=188,
        help="the seed of the sandbox worlds and faults: the same seed, the same trials "
        "(default 188)",
    )
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="FAMILY",
        help="only this fault family (identity, context, tool, state, evidence)",
    )
    p.add_argument(
        "--mode",
        action="append",
        default=[],
        metavar="FAULT",
        help="only this fault (id or mode); full or custom catalogue",
    )
    p.add_argument(
        "--catalogue",
        default="full",
        help="full (default), paper (the script's ten modes), or a catalogue JSON file",
    )


def load_manifest(path: str) -> Manifest:
    return parse_manifest_json(read_text(path, "manifest"))


def load_catalogue(name: str) -> str | Catalogue:
    if name in ("paper", "full"):
        return name
    try:
        data = json.loads(read_text(name, "catalogue"))
    except json.JSONDecodeError as exc:
        raise PlanInvalid(f"malformed catalogue JSON: {exc}", field="catalogue") from None
    if not isinstance(data, dict) or not isinstance(data.get("faults"), list):
        raise PlanInvalid("a catalogue file needs a 'faults' list", field="catalogue")
    return custom_catalogue(str(data.get("version", "custom")), data["faults"])


def build_plan(args: argparse.Namespace, manifest: Manifest | None = None) -> AssayPlan:
    catalogue: str | Catalogue = load_catalogue(args.catalogue)
    if manifest is not None and catalogue == "full" and manifest.target.kind == "mcp":
        catalogue = catalogue_for(manifest)
    if args.trials is not None and args.trials < 1:
        raise PlanInvalid("must be at least 1", field="--trials")
    data: dict[str, object] = {
        "catalogue": catalogue,
        "families": tuple(args.fault),
        "modes": tuple(args.mode),
        "seed": args.seed,
    }
    # Only what was asked for is set: an organisation's policy raises what was left out.
    if args.trials is not None or catalogue == "paper":
        data["trials"] = args.trials if args.trials is not None else 2000
    if getattr(args, "no_baseline", False):
        data["matched_baseline"] = False
    if getattr(args, "no_counterfactual", False):
        data["counterfactuals"] = False
    if getattr(args, "share_baseline", False):
        data["baseline"] = "shared"
    data.update(rule_overrides(args))
    if isinstance(catalogue, Catalogue):
        plan = validate_plan({**data, "catalogue": catalogue})
        plan.faults()
        plan.rule_for("reference")
        return plan
    return parse_plan(data)


# `assay` exits like `gate`: the decision as the exit code, 3 for an error.
DEFAULT_MAX_TARGET_ERRORS = 20


def _limits(args: argparse.Namespace) -> StopLimits:
    if not args.trial_timeout > 0:
        raise PlanInvalid("must be a positive number of seconds", field="--trial-timeout")
    if args.max_target_errors < -1:
        raise PlanInvalid("must be -1 (never stop) or at least 0", field="--max-target-errors")
    if args.deadline is not None and not args.deadline > 0:
        raise PlanInvalid("must be a positive number of seconds", field="--deadline")
    return StopLimits(
        max_target_errors=None if args.max_target_errors == -1 else args.max_target_errors,
        deadline=None if args.deadline is None else time.monotonic() + args.deadline,
        clock=time.monotonic,
    )


def cmd_mcp_proxy(args: argparse.Namespace) -> int:
    from service.mcp.stdio import main

    return main(args.url)


def _assay_here(
    args: argparse.Namespace, manifest: Manifest, plan: AssayPlan, limits: StopLimits
) -> AssayReport:
    # The user's own machine: loopback and private addresses are theirs; metadata never.
    try:
        target = load_target(
            manifest,
            http_timeout_s=args.trial_timeout,
            egress=EgressPolicy.local(),
            slots=args.concurrency,
        )
    except (OSError, ExceptionGroup) as exc:
        if manifest.target.kind != "mcp":
            raise
        raise mcp_start_failed(manifest, exc) from None
    notice = getattr(target, "notice", None)  # an mcp world with fewer slots than asked for
    if notice:
        print(notice, file=sys.stderr, flush=True)
    try:
        return _run(
            manifest,
            plan,
            target,
            limits,
            progress_bar=not args.json and sys.stdout.isatty(),
            concurrency=args.concurrency,
        )
    finally:
        close_target(target)


def cmd_assay(args: argparse.Namespace) -> int:
    from service.cli import reports

    reports.check_paths(args.junit, args.summary, args.report_out)
    try:
        manifest = load_manifest(args.manifest)
        plan = build_plan(args, manifest)
        stated = (plan, manifest.envelope)
        if getattr(args, "policy", None) is not None:
            plan = held_to(load_policy(args.policy), manifest, plan)
        refuse_unresolvable(plan, plan.envelope_for(manifest), stated)
        limits = _limits(args)
        # As on a worker: the code sees its declared variables and named secrets only.
        declared = (
            None
            if args.inherit_env
            else code_env(manifest.target.env, secrets_from(manifest.target.secrets, args.secrets))
        )
        if not 1 <= args.concurrency <= MAX_SLOTS:
            raise PlanInvalid(f"must be from 1 to {MAX_SLOTS}", field="--concurrency")
        declare_code_env(declared)
        try:
            report = _assay_here(args, manifest, plan, limits)
        finally:
            declare_code_env(None)
    except AssaygateError as exc:
        # Exit 3 writes its reports too: the CI step that uploads them finds the error.
        faults = reports.catalogue_faults(getattr(args, "catalogue", None))
        outcome = reports.error_outcome(Path(args.manifest).stem, "", str(exc), faults)
        reports.write_reports(outcome, args.junit, args.summary)
        raise
    data = report.to_dict()
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print_report(manifest, plan, report)
    # The causes go to stderr in every mode: a CI log that keeps only stderr still says what
    # failed, not only how often.
    for messages in report.target_error_causes.values():
        for message in messages:
            print(f"assaygate: target error: {message}", file=sys.stderr)
    if args.report_out is not None:
        try:
            args.report_out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        except OSError as exc:
            raise PlanInvalid(
                f"cannot write {args.report_out}: {exc.strerror}", field="--report-out"
            ) from None
    outcome = reports.from_report(
        report,
        manifest.system,
        manifest.version,
        None if args.report_out is None else str(args.report_out),
    )
    reports.write_reports(outcome, args.junit, args.summary)
    return DECISION_EXIT.get(report.decision, EXIT_ERROR)


def _run(
    manifest: Manifest,
    plan: AssayPlan,
    target: Any,
    limits: StopLimits,
    progress_bar: bool,
    concurrency: int = 1,
) -> AssayReport:
    if progress_bar:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("assaying", total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            def waiting(note: str) -> None:
                bar.update(task, description=note)

            if hasattr(target, "on_wait"):  # an mcp target waiting for its world
                target.on_wait = waiting

            return run_assay(
                manifest,
                plan,
                progress=progress,
                target=target,
                limits=limits,
                concurrency=concurrency,
            )
    if hasattr(target, "on_wait"):
        target.on_wait = lambda note: print(note, file=sys.stderr, flush=True)
    return run_assay(
        manifest,
        plan,
        target=target,
        limits=limits,
        fault_done=_fault_lines(plan),
        concurrency=concurrency,
    )


def _fault_lines(plan: AssayPlan) -> Callable[[str, Tally, int, int], None]:
    """Without a progress bar (no terminal, or --json): a line on stderr per finished fault, so
    a slow assay in CI shows where it is (stdout keeps only the report)."""
    faults = 0 if plan.paper else len(plan.faults())
    finished = [0]
    start = time.monotonic()

    def line(fault: str, tally: Tally, done: int, total: int) -> None:
        finished[0] += 1
        # Every trial run counts, fired or not: a fault that never fires still shows violations.
        arms = tally.arms
        violations = arms["intervention"].violations + arms["unfired"].violations
        print(
            f"assaygate: fault {finished[0]}/{faults} {fault}: {tally.planned} trials run, fired "
            f"in {tally.exercised}, violations {violations}, target errors {tally.all_errors} "
            f"({time.monotonic() - start:.1f} s; {done}/{total} trials)",
            file=sys.stderr,
            flush=True,
        )

    return line


def cmd_catalogue(args: argparse.Namespace) -> int:
    loaded = load_catalogue(args.catalogue)
    cat = loaded if isinstance(loaded, Catalogue) else catalogue_named(loaded)
    if args.json:
        print(
            json.dumps(
                {
                    "version": cat.version,
                    "faults": [
                        {**f.model_dump(mode="json"), "coverage_key": f.coverage_key()}
                        for f in cat.faults
                    ],
                    "steps": [
                        {**f.model_dump(mode="json"), "coverage_key": f.coverage_key()}
                        for f in cat.steps
                    ],
                },
                indent=2,
            )
        )
        return 0
    print(f"Catalogue {cat.version}: {len(cat.faults)} faults")
    for f in cat.faults:
        controls = ", ".join(c.value for c in f.nominated_control) or "-"
        print(f"\n{f.id}  [{f.domain.value}]  {f.mode}")
        print(
            f"  boundary {f.boundary} | phase {f.phase} | {f.disturbance.value} | "
            f"{f.persistence.value}, {f.correlation.value}, intensity {f.intensity}"
        )
        print(
            f"  removes: {f.signal_removed} | oracle: {f.oracle} | owes: "
            f"{f.expected_recoverability.value}"
        )
        print(
            f"  nominated control: {controls} -> {f.predicted_transfer or '-'}"
            + (f" | then: {', '.join(f.then)}" if f.then else "")
        )
        print(f"  coverage key: {f.coverage_key()}")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    manifest = load_manifest(args.manifest)
    plan = build_plan(args)
    target = load_target(manifest, egress=EgressPolicy.local())
    try:
        trace = replay_trial(manifest, plan, args.trial, target=target)
    finally:
        close_target(target)
    if args.json:
        print(json.dumps(trace, indent=2, sort_keys=True))
        return 0
    print(f"Trial {trace['trial']}: fault {trace['fault']} ({trace['coverage_key']})")
    print("\nWorkload:")
    for k, v in trace["workload"].items():
        print(f"  {k:16} {v}")
    print("\nCalls:")
    for c in trace["calls"] or []:
        if "injection" in c:
            print(
                f"  t={c['at']:>9}  ** injected {c['injection']} at {c['boundary']} ({c['phase']})"
            )
        else:
            print(
                f"  t={c['at']:>9}  {c['call']:20} {json.dumps(c['args'], sort_keys=True)} -> "
                f"{json.dumps(c['result'], sort_keys=True)}"
            )
    print("\nInjection receipts:")
    for r in trace["injections"]:
        print(f"  {r['fault']} at {r['boundary']} / {r['phase']} on {r['call']} (t={r['at']})")
    if not trace["injections"]:
        print("  none: the fault was not exercised in this trial")
    print("\nWorld read by the oracle:")
    for e in trace["ledger"]:
        print(f"  ledger   {json.dumps(e, sort_keys=True)}")
    for r in trace["evidence"]:
        print(f"  evidence {json.dumps(r, sort_keys=True)}")
    print(f"  claim    {json.dumps(trace['claim'], sort_keys=True)}")
    print("\nGrade:")
    print("  " + json.dumps(trace["outcome"], sort_keys=True))
    return 0
