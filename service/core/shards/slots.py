"""Slots: trials run at once in isolated worlds, tallied as if they had run one after another.

A slot is one isolated copy of the world a target runs trials in (docs/mcp.md, "Slots"). Trials
finish in whatever order their agents take, but a tally is folded in trial order (`InOrder`), so
the counts, samples, first violations and stop conditions of a run are the same at any
concurrency.
Pure: no threads are started here; the assay's executor path drives these.
"""

from __future__ import annotations

from typing import Generic, TypeVar

R = TypeVar("R")

__all__ = ["InOrder", "slots_of"]


def slots_of(offered: int | None, concurrency: int) -> int:
    """How many slots run at once: what was asked (`concurrency`, at least 1), but never more
    than the world offers (`offered`: None or 1 for a world without slots, which runs serially)."""
    if offered is None or offered < 1:
        offered = 1
    return max(1, min(offered, concurrency))


class InOrder(Generic[R]):
    """Results handed in by trial number in any order, released in trial order.

    `put(k, result)` stores a result; `ready()` returns the results that are next in line (from
    `start` on, without a gap), in order, and forgets them."""

    def __init__(self, start: int = 0) -> None:
        self.next = start
        self._held: dict[int, R] = {}

    def put(self, k: int, result: R) -> None:
        if k < self.next or k in self._held:
            raise ValueError(f"trial {k} was already released or held")
        self._held[k] = result

    def ready(self) -> list[tuple[int, R]]:
        out: list[tuple[int, R]] = []
        while self.next in self._held:
            out.append((self.next, self._held.pop(self.next)))
            self.next += 1
        return out

    def pending(self) -> int:
        """Results held back behind a trial still running."""
        return len(self._held)
