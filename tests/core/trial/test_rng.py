from __future__ import annotations

from service.core.trial.rng import LCG


def test_lcg_jump_ahead_lands_where_sequential_draws_do() -> None:
    seq = LCG(188)
    for _ in range(12345):
        seq.random()
    jumped = LCG(188)
    jumped.skip(12345)
    assert jumped.state == seq.state


def test_lcg_reproduces_the_papers_first_draws() -> None:
    rng = LCG(188)
    # state' = (1664525 * 188 + 1013904223) mod 2^32
    assert rng.random() == ((1664525 * 188 + 1013904223) % 2**32) / 2**32
