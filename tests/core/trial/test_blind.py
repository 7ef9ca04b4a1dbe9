"""A trial's id is opaque and of one shape in every arm, and keyed per assay."""

from __future__ import annotations

import re
from pathlib import Path

from service.core.faults.catalogue import FaultSpec, full_catalogue
from service.core.system.manifest import parse_manifest_json
from service.core.trial.engine import KEY_BYTES, arm_of, assay_key, trial_id
from service.core.trial.harness import Runtime, run_trial
from service.core.trial.sandbox import Task, Tools

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

SHAPE = re.compile(r"^t[0-9a-f]{16}$")
KEY = bytes(range(KEY_BYTES))


def a_fault() -> FaultSpec:
    return full_catalogue().faults[0]


def every_arm() -> list[str]:
    spec = a_fault()
    return [
        arm_of(spec),
        arm_of(None),
        arm_of(spec, frozenset({"idempotency"})),
        arm_of(spec, frozenset({"idempotency", "readback"})),
        arm_of(spec, naive=True),
    ]


def test_every_arm_of_a_trial_has_an_id_of_the_same_shape_and_none_names_its_arm() -> None:
    ids = [trial_id(KEY, 123456789, arm) for arm in every_arm()]
    assert all(SHAPE.match(i) for i in ids), ids
    assert len(set(ids)) == len(ids)  # distinct, so the team's world can tell trials apart
    for i in ids:
        assert not any(word in i for word in ("baseline", "without", "naive"))


def test_the_id_depends_on_the_trial_and_its_arm_under_the_key_and_on_nothing_else() -> None:
    arm = arm_of(a_fault())
    assert trial_id(KEY, 7, arm) == trial_id(KEY, 7, arm)
    assert trial_id(KEY, 7, arm) != trial_id(KEY, 8, arm)
    # Without the key, the workload key does not give the id away (nor the arm).
    assert trial_id(KEY, 7, arm) != trial_id(bytes(KEY_BYTES), 7, arm)


def test_faults_that_share_a_workload_give_each_of_their_arms_an_id_of_its_own() -> None:
    """Under a shared baseline the faults on one tool run the same workload: every faulted arm's
    id names its fault under the key, so no id repeats and none stands out as the shared run."""
    one, other = full_catalogue().faults[:2]
    arms = [
        arm_of(None),
        *(arm_of(spec) for spec in (one, other)),
        *(arm_of(spec, frozenset({"idempotency"})) for spec in (one, other)),
        *(arm_of(spec, naive=True) for spec in (one, other)),
    ]
    ids = [trial_id(KEY, 42, arm) for arm in arms]
    assert len(set(ids)) == len(ids) and all(SHAPE.match(i) for i in ids)


def test_an_assays_key_comes_from_its_credential_alone_so_a_redelivered_shard_reuses_it() -> None:
    assert assay_key("payload.signature") == assay_key("payload.signature")
    assert assay_key("payload.signature") != assay_key("payload.other")
    assert len(assay_key("c")) == KEY_BYTES


def test_an_engine_targets_task_and_first_ids_are_the_same_in_every_arm_but_its_controls() -> None:
    """The python and http targets' task (`run_id` is `run-1` in every arm) and the ids their
    tools issue are the workload's alone: only a counterfactual's `disabled_controls` differs."""
    manifest = parse_manifest_json((EXAMPLES / "copperfin-typed.json").read_text())
    seen: list[dict[str, object]] = []

    def peek(task: Task, tools: Tools) -> None:
        seen.append({**task.view(), "trace": tools.new_trace(), "request": tools.request_id()})

    rt = Runtime(manifest, full_catalogue(), target=peek)
    spec = a_fault()
    for arm_spec, disabled in [
        (spec, frozenset()),
        (None, frozenset()),
        (spec, frozenset({"idempotency"})),
    ]:
        run_trial(rt, arm_spec, 4242, 99, disabled)
    assert [s.pop("disabled_controls") for s in seen] == [[], [], ["idempotency"]]
    assert seen[0] == seen[1] == seen[2], seen
    assert seen[0]["run_id"] == "run-1"
