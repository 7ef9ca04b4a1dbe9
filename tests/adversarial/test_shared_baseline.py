"""A baseline shared by the faults on one tool, under chance: an agent that slips only in clean
runs (the no-fault baseline, or a trial its fault never reached), at the rate the cap resolves,
is allowed no more often than the promise says, though the faults on the tool now read one set
of baseline runs instead of one each (docs/evidence.md, "One baseline per tool").

Each replicate is one assay of two faults on the refund API (`timeout_before_send` and
`reject_before_write`: the careful workflow contains both, and neither nominates a control, so no
counterfactual pair runs) with `baseline: shared`, under the fixed and the sequential plan at the
same cap, seed and error. The agent (agents/chance.py) draws its slips from the task and the
replicate's salt: the shared baseline is one run, so one draw, read by both faults.
"""

from __future__ import annotations

import math
from dataclasses import replace

from service.core.decision.gate import Decision
from service.core.evidence.sequential import violation_bound
from service.core.shards.assay import run_assay
from service.core.system.manifest import Envelope
from tests.adversarial.agents.chance import Chance
from tests.adversarial.conftest import entry, manifest, plan
from tests.adversarial.test_chance import ERROR, LEVEL, RULES

FAULTS = ("timeout_before_send", "reject_before_write")
CAP = 40
REPLICATES = 600
SEED = 9_000


def test_clean_run_slips_at_the_rate_the_cap_resolves_are_allowed_at_most_the_level() -> None:
    rate = violation_bound(CAP, ERROR)
    m = manifest(kind="python", entrypoint=entry("chance:careful"))
    m = m.model_copy(update={"envelope": Envelope()})
    allowed = dict.fromkeys(RULES, 0)
    for i in range(REPLICATES):
        seed = SEED + i
        agent = replace(Chance(rate, when="clean"), salt=seed)
        for rule in RULES:
            p = plan(CAP, *FAULTS, rule=rule, seed=seed, error=ERROR, baseline="shared")
            allowed[rule] += run_assay(m, p, target=agent).decision is Decision.ALLOW
    bound = LEVEL + 3 * math.sqrt(LEVEL * (1 - LEVEL) / REPLICATES)
    shares = {rule: allowed[rule] / REPLICATES for rule in RULES}
    print(f"\nshared baseline, clean-run slips at {rate:.3f}, cap {CAP}: P(allow) {shares}")
    assert all(share <= bound for share in shares.values()), (shares, bound)


def test_a_careful_agent_under_shared_baselines_is_allowed_in_every_replicate() -> None:
    m = manifest(kind="python", entrypoint=entry("chance:careful"))
    m = m.model_copy(update={"envelope": Envelope()})
    for i in range(5):
        for rule in RULES:
            p = plan(CAP, *FAULTS, rule=rule, seed=SEED + i, error=ERROR, baseline="shared")
            report = run_assay(m, p, target=Chance(salt=SEED + i))
            assert report.decision is Decision.ALLOW, [r.code for r in report.reasons]
