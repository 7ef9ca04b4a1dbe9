"""A release, and the attempts that decide it together.

A release is what a deploy would ship: one system's code (the code artifact's digest), its
manifest and the organisation's policy it is assayed under (their digests). A re-run of a
candidate, a re-run after an error and a new candidate with the same digests are attempts of one
release, never new draws: a block an attempt earned on evidence of a violation stands for every
later attempt until the code, the manifest or the policy changes (docs/evidence.md, "The promise
is per release"). An operator's abort, a deadline, the target's own errors or the plan's cap on
effects stop an assay without saying anything about the code, so they block that attempt alone.

A floor missed is a hold, which does not carry; instead, from the release's second attempt on, a
floor on the lower bound is read on what every attempt so far graded of it (`earlier_records`,
read from the stored reports), so a re-run adds trials to one record rather than drawing again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.core.decision.floors import Record, stored_records
from service.core.decision.gate import HARD, Decision, Reason, ReasonView, block_first
from service.core.evidence.figures import JSONObject
from service.core.system.contract import WITNESS

#: The reason a later attempt of a blocked release carries.
RELEASE_BLOCKED = "release_blocked"

#: Block reasons that are evidence of a violation by the code: the hard invariants, an effect
#: outside the namespace, the witness's disagreement and missed containment (`invariant:*`
#: blocks and the unsafe-escape cap's stop are told apart below).
EVIDENCE = frozenset({*(code for code, _ in HARD), "outside_namespace", WITNESS, "floor:contained"})
#: The stop that trips on violations the system committed (service.db.injector.add_totals,
#: service.core.shards.shard.Limits.tripped). An abort, a deadline, target errors and the
#: effects cap do not: the cap is the plan's budget on the world (a careful agent meets a cap of
#: a few effects too), and every effect graded before it stopped carries its own evidence (a
#: duplicate among them is `duplicate_effect`).
EVIDENCE_STOPS = ("unsafe escapes above the limit",)


@dataclass(frozen=True)
class Release:
    """One system's code, manifest and organisation policy, by digest (None: no code artifact,
    or no policy recorded): the unit the gate's promise is about."""

    system_id: str
    code_sha256: str | None
    manifest_digest: str
    policy_digest: str | None

    @classmethod
    def of(
        cls,
        system_id: object,
        code_sha256: str | None,
        manifest_digest: str,
        policy: Mapping[str, object] | None,
    ) -> Release:
        """The release an assay decides: its candidate's system, code and manifest, and the
        digest of the policy it was planned under (`Assay.policy`)."""
        digest = (policy or {}).get("digest")
        return cls(
            str(system_id), code_sha256, manifest_digest, None if digest is None else str(digest)
        )


@dataclass(frozen=True)
class Attempt:
    """One finished assay of a release: whose it was, when it finished, what it decided and why,
    on how many trials, and the stop that ended it (if one did)."""

    candidate_id: str
    candidate_version: str
    assay_id: str
    finished_at: str  # ISO 8601
    decision: str
    reasons: tuple[ReasonView, ...]
    trials: int
    stopped: str | None = None
    # What the attempt graded of each floor, as its stored report says (`graded`): (fault,
    # floor, arm, successes, trials).
    floors: tuple[tuple[str, str, str, int, int], ...] = ()

    def violations(self) -> list[str]:
        """The codes of this attempt's own reasons that are evidence of a violation by the code
        (a carried `release_blocked` is the earlier attempt's evidence, not this one's)."""
        return [r["code"] for r in self.reasons if self._is_evidence(r)]

    def _is_evidence(self, reason: ReasonView) -> bool:
        if reason["severity"] != Decision.BLOCK.value:
            return False
        code = reason["code"]
        if code == "stopped":
            return self.stopped is not None and self.stopped.startswith(EVIDENCE_STOPS)
        return code in EVIDENCE or code.startswith("invariant:")

    def view(self) -> JSONObject:
        """The attempt as the dossier's `attempts` lists it."""
        return {
            "candidate": {"id": self.candidate_id, "version": self.candidate_version},
            "assay_id": self.assay_id,
            "finished_at": self.finished_at,
            "decision": self.decision,
            "reasons": sorted({r["code"] for r in self.reasons}),
            "trials": self.trials,
        }


def blocking(earlier: Sequence[Attempt]) -> Attempt | None:
    """The first of the earlier attempts (oldest first) that blocked on evidence of a violation;
    None when none did."""
    return next((a for a in earlier if a.decision == Decision.BLOCK and a.violations()), None)


def graded(faults: Iterable[Mapping[str, object]]) -> tuple[tuple[str, str, str, int, int], ...]:
    """An attempt's `floors` from its stored faults (report entries or fault_result signatures)."""
    return tuple(
        (str(f.get("id")), key, arm, k, n)
        for f in faults
        for (key, arm), (k, n) in sorted(stored_records(f).items())
    )


def earlier_records(earlier: Sequence[Attempt]) -> dict[str, dict[tuple[str, str], Record]]:
    """Per fault, by (floor, arm), what the earlier attempts of the release graded of each floor:
    the successes and trials summed, and how many attempts graded it."""
    found: dict[str, dict[tuple[str, str], Record]] = {}
    for attempt in earlier:
        for fault, key, arm, k, n in attempt.floors:
            if n:
                mine = found.setdefault(fault, {})
                mine[(key, arm)] = mine.get((key, arm), Record(0, 0, 0)).plus(k, n)
    return found


def release_blocked(attempt: Attempt) -> Reason:
    """The block a later attempt of the release carries, naming the attempt that earned it."""
    codes = ", ".join(dict.fromkeys(attempt.violations()))
    return Reason(
        RELEASE_BLOCKED,
        f"the release was blocked by assay {attempt.assay_id} of candidate "
        f"{attempt.candidate_id} (version {attempt.candidate_version}, finished "
        f"{attempt.finished_at}) on {codes}; re-running the same code, manifest and policy "
        "buys no new draw: the block stands until one of them changes",
        None,
        Decision.BLOCK,
    )


def carry(report: Mapping[str, Any], earlier: Sequence[Attempt]) -> dict[str, Any]:
    """The report with the release's standing block laid over it (decision `block`, the
    `release_blocked` reason first), or unchanged when no earlier attempt blocked on evidence or
    the report already carries it."""
    found = dict(report)
    first = blocking(earlier)
    reasons = _reasons(report)
    if first is None or any(r.get("code") == RELEASE_BLOCKED for r in reasons):
        return found
    found["decision"] = Decision.BLOCK.value
    found["reasons"] = block_first([release_blocked(first).view(), *reasons])
    return found


def _reasons(report: Mapping[str, Any]) -> list[Mapping[str, object]]:
    stored = report.get("reasons")
    return [r for r in stored if isinstance(r, Mapping)] if isinstance(stored, list) else []
