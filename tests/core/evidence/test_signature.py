"""Wilson and Newcombe intervals against published worked examples."""

from __future__ import annotations

import pytest

from service.core.evidence.signature import newcombe, trials_for_bound, wilson


def test_wilson_interval_matches_newcombe_1998_table_one() -> None:
    # Newcombe (1998), Statistics in Medicine 17:857, Table I: 81/263 -> 0.2553 to 0.3662.
    lo, hi = wilson(81, 263)
    assert lo == pytest.approx(0.2553, abs=1e-4)
    assert hi == pytest.approx(0.3662, abs=1e-4)


def test_wilson_interval_of_zero_successes_still_has_an_upper_bound() -> None:
    lo, hi = wilson(0, 10)
    assert lo == 0.0
    assert hi == pytest.approx(0.2775, abs=1e-4)


def test_newcombe_difference_matches_the_published_example() -> None:
    # Newcombe (1998b), Statistics in Medicine 17:873, example (a): 56/70 - 48/80.
    d, lo, hi = newcombe(56, 70, 48, 80)
    assert d == pytest.approx(0.2)
    assert lo == pytest.approx(0.0524, abs=1e-4)
    assert hi == pytest.approx(0.3339, abs=1e-4)


def test_trials_for_a_zero_violation_bound_reach_it() -> None:
    n = trials_for_bound(0.005)
    assert wilson(0, n)[1] <= 0.005 < wilson(0, n - 1)[1]
