"""Python targets that game the counterfactual pairs, or that contain a fault by a mechanism other
than the control the catalogue nominates.

- `ignores_disabled`: the reference typed-repair workflow with `task.disabled_controls` thrown away,
  so a pair that "switches a control off" runs the same code.
- `without_bind`: the reference typed-repair workflow with the identity-binding check deleted.
- `leased`: a safe workflow that honours `disabled_controls` for the controls it declares, but whose
  forked second executor stands down because of a run lease kept in the checkpoint store: the lease,
  not idempotency or the version precondition, contains `fork_run`.
- `dodges_counterfactual`: the typed-repair workflow, except that a run told to switch any control
  off never reaches the payment boundary (so the armed fault never fires in a counterfactual pair).
- `raises_when_disabled`: the typed-repair workflow, except that a run told to switch any control
  off raises at once.
- `readback_only`: the typed-repair workflow that truly lacks an idempotency key and a version
  precondition: a lost reply is contained by reading the ledger back, and only by that.
"""

from __future__ import annotations

from service.core.trial.sandbox import Task, ToolError, Tools
from tests.adversarial.agents.careful import Denied, Step, action_id_of, authorise, prove
from tests.adversarial.agents.reference import typed_repair as _typed_repair
from tests.adversarial.agents.reference import workflow

without_bind = workflow("typed-repair", lambda m: m["controls"].update(bind_identity=False))
readback_only = workflow(
    "typed-repair",
    lambda m: m["controls"].update(idempotency=False, state_precondition=False),
)


def ignores_disabled(task: Task, tools: Tools) -> None:
    task.disabled_controls = frozenset()
    _typed_repair(task, tools)


def dodges_counterfactual(task: Task, tools: Tools) -> None:
    if task.disabled_controls:
        aid = action_id_of(task)
        tools.record("hold", aid, None, None, "maintenance window")
        tools.respond("held", aid, None)
        return
    _typed_repair(task, tools)


def raises_when_disabled(task: Task, tools: Tools) -> None:
    if task.disabled_controls:
        raise RuntimeError("this build cannot run with a control switched off")
    _typed_repair(task, tools)


LEASE = "refunding"


def leased(task: Task, tools: Tools) -> None:
    off = task.disabled_controls
    s = Step(task, tools, action_id_of(task))
    try:
        authorise(s)
    except Denied:
        return
    held = tools.checkpoint_load(task.run_id)
    if held is not None and held.get("stage") == LEASE:
        # Another executor holds this run's lease: stand down without acting.
        tools.record("hold", s.action_id, s.trace, None, "another executor holds the lease")
        tools.respond("held", s.action_id, None)
        return
    tools.checkpoint_save(task.run_id, LEASE, {})
    version = tools.orders_read(task.order_id)
    assert version is not None
    a = s.action
    for _ in range(6):
        key = s.action_id if "idempotency" not in off else tools.request_id()
        expected = version["version"] if "state_precondition" not in off else None
        try:
            tools.refund(
                a["subject"],
                a["tenant"],
                a["amount"],
                key,
                s.action_id,
                s.trace,
                a["grant_id"],
                expected,
            )
            break
        except ToolError:
            if tools.lookup(s.action_id):
                break
            tools.sleep(1_000)
    found = tools.lookup(s.action_id)
    if not found:
        tools.record("failure", s.action_id, s.trace, None, "no ledger entry")
        tools.respond("failed", s.action_id, None)
        return
    prove(s, found[0])
    tools.respond("completed", s.action_id, found[0]["id"])
