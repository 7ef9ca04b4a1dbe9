"""The sandbox posture, from a shard to the signed dossier: stored with the shard that ran tenant
code, merged into the distinct postures the assay ran under, carried by the report and the
predicate only when code ran (an old shard, and an assay of no code, read as before)."""

from __future__ import annotations

import json
from typing import Any

from service.core.decision.report import AssayReport
from service.core.evidence.tally import ShardResult, Tally, layers
from service.core.faults.plan import AssayPlan
from service.core.shards.assay import run_assay
from service.core.signing.dossier import CandidateRef, predicate_from_report
from service.core.system.manifest import Manifest

FULL: dict[str, Any] = {
    "namespaces": ["net", "pid", "ipc", "uts", "cgroup", "mount"],
    "seccomp": "refuses namespaces, mount, ptrace, bpf, keyctl, modules (EPERM)",
    "cgroup": {"version": "v2", "memory_mb": 2048, "pids": 256},
    "uid": "per sandbox from 200000-265535",
    "relay_tmpfs_mb": 16,
}
WEAK = {**FULL, "cgroup": None, "missing": {"cgroup": "no cgroup2 mount; no cgroup v1 memory"}}


def test_a_shards_posture_survives_storage_and_an_old_shard_without_one_still_reads() -> None:
    stored = json.loads(json.dumps(ShardResult(0, {"f": Tally()}, 1, sandbox=FULL).to_dict()))
    assert stored["sandbox"] == FULL
    assert ShardResult.from_dict(stored).sandbox == FULL
    del stored["sandbox"]
    assert ShardResult.from_dict(stored).sandbox is None
    assert "sandbox" not in ShardResult(0, {}, 0).to_dict()


def test_the_assay_keeps_each_distinct_posture_once_whatever_order_its_shards_came_in() -> None:
    shards = [ShardResult(i, {}, 1, sandbox=s) for i, s in enumerate([FULL, WEAK, FULL, None])]
    assert layers(shards) == layers(reversed(shards))
    assert sorted(map(json.dumps, layers(shards))) == sorted(map(json.dumps, [FULL, WEAK]))
    assert layers([ShardResult(0, {}, 1)]) == ()


def test_the_report_and_the_dossier_carry_the_posture_only_when_code_ran(
    typed_repair: Manifest,
) -> None:
    report = run_assay(typed_repair, AssayPlan(catalogue="paper", trials=20, seed=3))
    ref = CandidateRef("c1", "copperfin", "1.0")
    args: dict[str, Any] = {"version": 1, "previous": None, "issued_at": "x", "triggers": {}}
    assert "sandbox" not in report.to_dict()
    assert "sandbox" not in predicate_from_report(report, ref, **args)
    ran = AssayReport.from_dict({**report.to_dict(), "sandbox": [WEAK]})
    assert ran.sandbox == (WEAK,)
    assert AssayReport.from_dict(ran.to_dict()) == ran
    assert predicate_from_report(ran, ref, **args)["sandbox"] == [WEAK]
