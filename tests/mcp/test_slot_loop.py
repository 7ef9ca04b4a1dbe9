"""A slot's event loop, once stopped, refuses a coroutine at once: it neither waits out the
timeout on a loop nobody runs nor leaves the coroutine un-awaited (Python's "coroutine was never
awaited" warning, seen when an engine's slots were closed twice under load)."""

from __future__ import annotations

import time
import warnings

import pytest

from service.mcp.slot import Loop


async def answer() -> int:
    return 42


def test_a_running_loop_runs_a_coroutine() -> None:
    loop = Loop()
    try:
        assert loop.run(answer(), 5) == 42
    finally:
        loop.stop()


def test_a_stopped_loop_refuses_a_coroutine_at_once_and_closes_it() -> None:
    loop = Loop()
    loop.stop()
    coro = answer()
    started = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeError, match="stopped"):
            loop.run(coro, 15)
    assert time.monotonic() - started < 5
    # Closed, not left pending: awaiting it again is refused.
    assert coro.cr_frame is None


def test_stopping_a_loop_twice_is_harmless() -> None:
    loop = Loop()
    loop.stop()
    loop.stop()
    assert loop.stopped
