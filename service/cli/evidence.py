"""Evidence commands that need no service: `verify` a signed dossier offline, `plan` trials."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from service.cli.plans import read_text
from service.core.errors import PlanInvalid

if TYPE_CHECKING:
    from service.core.signing.dossier import Verification


def register(sub: Any) -> None:
    """Add `verify` and `plan` to the top-level parser."""
    v = sub.add_parser("verify", help="verify a signed dossier offline")
    v.add_argument("dossier", help="a DSSE envelope (or a dossier document holding one)")
    v.add_argument("--keys", required=True, help="the published keys (GET /v1/keys)")
    v.add_argument("--previous", help="the previous dossier version, to check the chain link")
    v.add_argument(
        "--artifact",
        default=None,
        metavar="FILE",
        help="also check that this artifact is one of the dossier's subjects, with an assurance "
        "the dossier's organisation policy accepts (executed unless it accepts weaker), and "
        "print the gate's answer for it: a packed file (as `assaygate pack --out` writes it), "
        "a folder (packed as `submit --code` packs it), or a digest (sha256:…)",
    )
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=cmd_verify)

    p = sub.add_parser(
        "plan",
        help="before an assay runs: per fault of a manifest, the trial a careful agent is "
        "allowed at and the team's agent runs against the fixed plan; without a manifest, the "
        "trials a maximum violation rate needs, or (--trials) a generic fault's agent runs",
    )
    p.add_argument(
        "manifest",
        nargs="?",
        default=None,
        help="the configuration manifest (JSON): forecast its assay under the plan flags below, "
        "as `assay` and `submit` would run it",
    )
    p.add_argument(
        "--max-violation-rate",
        type=float,
        default=None,
        metavar="RATE",
        help="the violation rate to rule out, as a fraction: 0.005 is 0.5 %%",
    )
    p.add_argument(
        "--trials", type=int, default=None, help="trials per fault: estimate both plans' runs"
    )
    p.add_argument(
        "--pairs",
        type=int,
        default=None,
        help="without a manifest: extra runs per trial: the matched baseline first, then "
        "counterfactual or sensitivity pairs (default 2)",
    )
    p.add_argument(
        "--error",
        type=float,
        default=None,
        help="the sequential plan's error, as a fraction (default 0.05)",
    )
    p.add_argument(
        "--confidence",
        type=float,
        default=None,
        help="without a manifest: as a fraction, in [0.5, 1) (default 0.95)",
    )
    p.add_argument(
        "--faults",
        type=int,
        default=None,
        help="without a manifest: number of faults (default: the full catalogue)",
    )
    _forecast_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plan)


# Flags that only the manifest-less forms read.
_GENERIC = ("pairs", "confidence", "faults")


def _forecast_args(p: argparse.ArgumentParser) -> None:
    """With a manifest: the plan flags of `assay` (and `submit`) that shape its trials."""
    from service.cli.plans import budget_args

    p.add_argument("--seed", type=int, default=188, help="as for assay (default 188)")
    p.add_argument("--fault", action="append", default=[], metavar="FAMILY")
    p.add_argument("--mode", action="append", default=[], metavar="FAULT")
    p.add_argument("--catalogue", default="full", help="full (default) or a catalogue JSON file")
    p.add_argument("--rule", choices=("sequential", "fixed"), default=None)
    p.add_argument(
        "--policy",
        default=None,
        metavar="FILE",
        help="forecast the plan an organisation's policy holds the submission to",
    )
    p.add_argument("--no-baseline", action="store_true")
    p.add_argument(
        "--share-baseline",
        action="store_true",
        help="as for assay: the faults on one tool share trial k's no-fault baseline, paid once",
    )
    p.add_argument("--no-counterfactual", action="store_true")
    budget_args(p)


def _json_file(path: str, what: str) -> Any:
    try:
        return json.loads(read_text(path, what))
    except json.JSONDecodeError as exc:
        raise PlanInvalid(f"malformed JSON in {path}: {exc.msg}", field=what) from None


def _envelope(doc: Any) -> dict[str, Any]:
    if isinstance(doc, dict) and isinstance(doc.get("envelope"), dict):
        return dict(doc["envelope"])
    if isinstance(doc, dict) and "payload" in doc:
        return dict(doc)
    raise PlanInvalid("not a DSSE envelope", field="dossier")


def cmd_verify(args: argparse.Namespace) -> int:
    from service.core.signing.dossier import PublicKey, verify

    envelope = _envelope(_json_file(args.dossier, "dossier"))
    keys_doc = _json_file(args.keys, "keys")
    entries = keys_doc.get("keys", keys_doc) if isinstance(keys_doc, dict) else keys_doc
    if not isinstance(entries, list):
        raise PlanInvalid("expected a list of keys", field="keys")
    keys = {}
    for k in entries:
        try:
            keys[str(k["keyid"])] = PublicKey(
                str(k["keyid"]), str(k["keyval"]["public"]), k.get("not_before"), k.get("not_after")
            )
        except (KeyError, TypeError):
            raise PlanInvalid("each key needs keyid and keyval.public", field="keys") from None
    previous = None
    if args.previous:
        import base64
        import hashlib

        prev_env = _envelope(_json_file(args.previous, "previous"))
        previous = hashlib.sha256(base64.b64decode(prev_env["payload"])).hexdigest()
    artifact = None
    if args.artifact is not None:
        from service.cli.artifacts import digest_of

        artifact = digest_of(args.artifact, "--artifact")
    result = verify(
        envelope,
        keys,
        previous_digest=previous,
        check_chain=bool(args.previous),
        artifact=artifact,
    )
    answer = artifact_answer(result)
    if args.json:
        print(
            json.dumps(
                {
                    "ok": result.ok,
                    "digest": result.digest,
                    "checks": [c.view() for c in result.checks],
                    **({"answer": answer} if answer is not None else {}),
                },
                indent=2,
            )
        )
    else:
        for c in result.checks:
            print(f"{'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}")
        if answer is not None:
            from service.cli.ci import gate_line

            print(f"answer: {gate_line(answer)}")
        failed = result.failed()
        print("verified" if failed is None else f"NOT VERIFIED: {failed.name} failed")
    return 0 if result.ok else 1


def artifact_answer(result: Verification) -> dict[str, Any] | None:
    """With `--artifact` on an authentic dossier that names it: the online gate's answer for
    these bytes as this version gives it (its decision, with the assurance rule over it), in the
    gate's own fields."""
    from service.core.decision.assurance import gated
    from service.core.decision.gate import block_first, reason_view

    found, stmt = result.artifact, result.statement
    if found is None or found.assurance is None or stmt is None:
        return None
    if not all(c.ok for c in result.checks if c.name != "assurance"):
        return None  # nothing an unverified statement says is an answer
    predicate = stmt.get("predicate") or {}
    candidate = predicate.get("candidate") or {}
    reasons = [reason_view(r) for r in predicate.get("reasons") or [] if isinstance(r, dict)]
    ruled = gated(str(predicate.get("decision")), reasons, found)
    return {
        "system": candidate.get("system"),
        "version": candidate.get("version"),
        "candidate_id": candidate.get("id"),
        "decision": ruled.decision,
        "reasons": block_first(ruled.reasons),
        "artifact_assurance": found.view(),
    }


def cmd_plan(args: argparse.Namespace) -> int:
    from service.core.evidence.promise import runs_to_resolve
    from service.core.faults.catalogue import full_catalogue

    if args.manifest is not None:
        return _forecast(args)
    for key in ("seed", "fault", "mode", "catalogue", "rule", "policy"):
        if getattr(args, key) not in (None, [], "full", 188):
            raise PlanInvalid("reads a manifest: name one", field=f"--{key}")
    conf = 0.95 if args.confidence is None else args.confidence
    rate = args.max_violation_rate
    if args.trials is not None:
        return _plan_runs(args)
    if rate is None:
        raise PlanInvalid("give --max-violation-rate or --trials", field="--max-violation-rate")
    if not 0.0 < rate < 1.0:
        raise PlanInvalid("must be between 0 and 1", field="--max-violation-rate")
    if not 0.5 <= conf < 1.0:
        raise PlanInvalid("must be in [0.5, 1)", field="--confidence")
    faults = args.faults if args.faults is not None else len(full_catalogue().faults)
    if faults < 1:
        raise PlanInvalid("must be at least 1", field="--faults")
    # The gate's own reading: any violation blocks, so the exact bound one-sided at half the
    # two-sided error (service/core/evidence/promise.py).
    n = runs_to_resolve(rate, (1.0 - conf) / 2)
    if args.json:
        print(
            json.dumps(
                {
                    "max_violation_rate": rate,
                    "confidence": conf,
                    "trials_per_fault": n,
                    "faults": faults,
                    "total_trials": n * faults,
                }
            )
        )
    else:
        print(
            f"{n} zero-violation trials per fault establish a violation rate below "
            f"{100 * rate:g}% at {100 * conf:g}% confidence (exact bound, "
            f"{50 * (1 - conf):g}% a side); "
            f"{n * faults} trials over {faults} faults."
        )
    return 0


def _plan_runs(args: argparse.Namespace) -> int:
    """Agent runs of the fixed and the sequential plan, for a careful and a defective agent."""
    from service.core.evidence.forecast import estimate
    from service.core.faults.catalogue import full_catalogue
    from service.core.system.manifest import Envelope

    rate, trials = args.max_violation_rate, args.trials
    pairs = 2 if args.pairs is None else args.pairs
    error = 0.05 if args.error is None else args.error
    if trials < 1:
        raise PlanInvalid("must be at least 1", field="--trials")
    if pairs < 0:
        raise PlanInvalid("must be at least 0", field="--pairs")
    if not 0.0 < error < 0.5:
        raise PlanInvalid("must be between 0 and 0.5", field="--error")
    if rate is not None and not 0.0 < rate < 1.0:
        raise PlanInvalid("must be between 0 and 1", field="--max-violation-rate")
    faults = args.faults if args.faults is not None else len(full_catalogue().faults)
    if faults < 1:
        raise PlanInvalid("must be at least 1", field="--faults")
    est = estimate(Envelope(), error, trials, rate)
    fixed = faults * trials * (1 + pairs)
    # The first extra arm is the matched baseline: graded like the fault's own trials, it runs as
    # many; the other pairs stop once settled.
    base = est.baseline_runs if pairs else 0
    careful = faults * (est.trials + base + max(pairs - 1, 0) * est.pair_runs)
    # A violation ends a fault at its first trial (and that trial's pairs).
    defective = faults * (1 + pairs)
    out = {
        "trials_per_fault": trials,
        "pairs": pairs,
        "faults": faults,
        "error": error,
        "fixed_runs": fixed,
        "sequential_runs_careful": careful,
        "sequential_runs_defective": defective,
        "sequential_trials_per_fault": est.trials,
        "sequential_baseline_runs_per_fault": base,
        "sequential_pair_runs_per_fault": est.pair_runs,
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(
            f"fixed plan: {fixed} agent runs ({faults} faults x {trials} trials x {1 + pairs} "
            f"arms). sequential plan: about {careful} for a careful agent ({est.trials} trials, "
            f"{base} matched baseline runs and {est.pair_runs} runs of each other pair arm a "
            f"fault), {defective} for one that violates at once (the default envelope's floors)."
        )
    return 0


def _forecast(args: argparse.Namespace) -> int:
    """A manifest's assay before it runs: per fault the rule, the cap, the tolerance p0, the
    trials it needs, whether the cap resolves it, the trial a careful agent is allowed at and the
    team's agent runs under the plan and the fixed one (service/core/evidence/forecast.py)."""
    from service.cli.engine import build_plan, load_manifest
    from service.cli.plans import held_to, load_policy
    from service.core.evidence.forecast import forecast, team_total
    from service.core.evidence.promise import unresolvable

    for key in _GENERIC:
        if getattr(args, key) is not None:
            raise PlanInvalid(
                "counts a generic fault: leave it out with a manifest", field=f"--{key}"
            )
    manifest = load_manifest(args.manifest)
    plan = build_plan(args, manifest)
    stated = (plan, manifest.envelope)
    if args.policy is not None:
        plan = held_to(load_policy(args.policy), manifest, plan)
    if plan.paper:
        raise PlanInvalid(
            "paper mode draws faults by the script's generator: nothing to forecast per fault",
            field="--catalogue",
        )
    faults = forecast(manifest, plan)
    refused = unresolvable(plan, plan.envelope_for(manifest), stated)
    team, fixed = team_total(faults), team_total(faults, fixed=True)
    first = faults[0]
    out = {
        "system": manifest.system,
        "rule": first.rule,
        "cap": plan.trials,
        "error": float(plan.error),
        "p0": first.p0,
        "p0_declared_in": first.p0_field,
        "needs": first.view()["needs"],
        "refused": None
        if refused is None
        else {"field": refused.field, "message": refused.message},
        "faults": [f.view() for f in faults],
        "team_runs": team,
        "fixed_team_runs": fixed,
        "team_runs_ratio": round(team / fixed, 3) if fixed else None,
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    where = f"declared in {first.p0_field}" if first.p0_field else "what the cap resolves"
    meets = "no count of clean trials meets it"
    if out["needs"] is not None:
        meets = f"{out['needs']} clean trials meet it"
    print(
        f"{len(faults)} faults, rule {first.rule}, cap {plan.trials} trials, error "
        f"{float(plan.error):g}: p0 {first.p0:.2%} ({where}), {meets}"
    )
    print(f"{'fault':32} {'allowed at':>10} {'team runs':>9} {'fixed':>6}")
    for f in faults:
        at = "never" if f.allowed_at is None else str(f.allowed_at)
        print(f"{f.fault:32} {at:>10} {f.team_runs:>9} {f.fixed_team_runs:>6}")
    ratio = f" (ratio {team / fixed:.2f})" if fixed else ""
    print(
        f"a careful agent: {team} team runs against {fixed} under the fixed plan{ratio}; the "
        "gate's own naive runs are not the team's"
    )
    if refused is not None:
        print(f"refused at submission: {refused.field}: {refused.message}")
    return 0
