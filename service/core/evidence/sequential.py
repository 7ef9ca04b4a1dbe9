"""Anytime-valid bounds on a binomial rate: they hold at every number of runs at once.

A fixed plan reads a Wilson interval once, after the last trial. A sequential plan looks after
every run and stops when the decision cannot change, so its bounds must stay valid however often
they are read (Ville's inequality on a nonnegative supermartingale):

- `confidence_sequence`: the beta-binomial mixture (Robbins 1970; Howard, Ramdas, McAuliffe and
  Sekhon 2021, "Time-uniform, nonparametric, nonasymptotic confidence sequences", §3): the set of
  rates p whose mixture likelihood ratio has not reached 1/error.
- `zero_event_bound`: for a rate that has shown no event, the betting test that stakes everything
  on "no event" (wealth (1 - eps)^-n under any rate >= eps). It rejects rate >= eps after
  ln(1/error) / -ln(1 - eps) clean runs. Read one-sided at `error`; the gate reads it at
  `error / 2`, one side of the fixed plan's two-sided interval: ln(40)/eps = 3.69/eps runs at a
  5 % plan error, against Wilson's 3.84/eps (both one-sided 2.5 %).
- `violation_bound`: what any plan claims of a rate after n clean runs: the exact bound at
  `error / 2` (service/core/evidence/promise.py); for zero events it is the betting test's.

Why hand-written: `confseq` (a C++/Boost extension, last released 2023) and `savvi` need numpy and
scipy, which the pure core does not import (the import-linter contract in pyproject.toml);
`expectation` is not installable from this machine's registries. The two bounds used here are a
few lines of `math.lgamma` and bisection.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from service.core.evidence.promise import clean_bound, hard_error, runs_to_resolve

# Jeffreys' prior: the mixture's Beta(1/2, 1/2) weights rates near 0 and 1 (where gate floors sit)
# more than a uniform prior would.
_A = 0.5
_B = 0.5
_ITERATIONS = 60


def _log_mixture(k: int, n: int, p: float) -> float:
    """log of the mixture likelihood ratio against the rate `p` after `k` events in `n` runs."""
    log_marginal = (
        math.lgamma(_A + k)
        + math.lgamma(_B + n - k)
        - math.lgamma(_A + _B + n)
        - (math.lgamma(_A) + math.lgamma(_B) - math.lgamma(_A + _B))
    )
    log_null = (k * math.log(p) if k else 0.0) + ((n - k) * math.log1p(-p) if n - k else 0.0)
    return log_marginal - log_null


def confidence_sequence(k: int, n: int, error: float) -> tuple[float, float]:
    """The rates not yet rejected at `error` after `k` events in `n` runs: (low, high).

    The mixture's log ratio is convex in p with its minimum at k/n, so the set is an interval
    around k/n; each end is found by bisection."""
    if n == 0:
        return 0.0, 1.0
    threshold = math.log(1.0 / error)
    centre = k / n

    def outside(p: float) -> bool:
        return _log_mixture(k, n, p) >= threshold

    # Each end by bisection between a rate outside the set and k/n (inside).
    low = _edge(outside, 1e-12, centre) if k > 0 and outside(1e-12) else 0.0
    high = _edge(outside, 1.0 - 1e-12, centre) if k < n and outside(1.0 - 1e-12) else 1.0
    return low, high


def _edge(outside: Callable[[float], bool], out: float, inside: float) -> float:
    """The boundary between a rate `out` outside the set and a rate `inside` it."""
    for _ in range(_ITERATIONS):
        mid = (out + inside) / 2
        if outside(mid):
            out = mid
        else:
            inside = mid
    return inside


def zero_event_bound(n: int, error: float) -> float:
    """The smallest rate eps that `n` runs without an event reject at `error`: 1 - error^(1/n)."""
    if n == 0:
        return 1.0
    return 1.0 - math.exp(math.log(error) / n)


def runs_to_bound(max_rate: float, error: float) -> int:
    """Clean runs the betting test needs before a rate at or above `max_rate` is rejected."""
    return max(1, math.ceil(math.log(error) / math.log1p(-max_rate)))


def violation_bound(n: int, error: float) -> float:
    """The bound every plan reads on a rate after `n` runs without an event: Clopper-Pearson's
    exact one-sided bound at `error / 2` (one side of the plan's two-sided error). Any violation
    blocks, so a record of clean runs needs no correction for looking after every run
    (service/core/evidence/promise.py)."""
    return clean_bound(n, hard_error(error))


def clean_runs_for(max_rate: float, error: float) -> int:
    """Clean runs before `violation_bound` falls to `max_rate`."""
    return runs_to_resolve(max_rate, hard_error(error))
