"""Deterministic random streams.

`LCG` reproduces the paper's generator bit for bit (fault selection in paper mode) and can jump
ahead, so a shard starting at trial i draws exactly what a sequential run would. `Stream` is the
separate per-trial workload stream: SplitMix64 keyed by (seed, stream, index), so trials differ and
any trial can be re-created alone for replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

_A = 1664525
_C = 1013904223
_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF


class LCG:
    __slots__ = ("state",)

    def __init__(self, seed: int) -> None:
        self.state = seed & _M32

    def random(self) -> float:
        self.state = (_A * self.state + _C) & _M32
        return self.state / 4294967296.0

    def choice(self, values: Sequence[T]) -> T:
        if not values:
            raise IndexError("cannot choose from an empty sequence")
        return values[min(len(values) - 1, int(self.random() * len(values)))]

    def skip(self, n: int) -> None:
        """Advance n draws in O(log n) by composing the affine step."""
        mul, add = 1, 0
        a, c = _A, _C
        while n > 0:
            if n & 1:
                mul, add = (a * mul) & _M32, (a * add + c) & _M32
            a, c = (a * a) & _M32, (a * c + c) & _M32
            n >>= 1
        self.state = (mul * self.state + add) & _M32


def _mix(z: int) -> int:
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _M64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _M64
    return z ^ (z >> 31)


def stream_key(*parts: int | str) -> int:
    """A 64-bit key from ints and strings, stable across processes (no hash randomisation)."""
    acc = 0x9E3779B97F4A7C15
    for part in parts:
        if isinstance(part, str):
            for byte in part.encode():
                acc = _mix(acc ^ byte)
        else:
            acc = _mix(acc ^ (part & _M64))
        acc = _mix(acc + 0x9E3779B97F4A7C15 & _M64)
    return acc


def derive(key: int, index: int) -> int:
    """The key of item `index` under a stream key: one mixing round, for hot loops."""
    return _mix((key ^ ((index + 1) * 0x9E3779B97F4A7C15)) & _M64)


class Stream:
    """SplitMix64: tiny, fast, and independent per key."""

    __slots__ = ("state",)

    def __init__(self, key: int) -> None:
        self.state = key & _M64

    def next64(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _M64
        return _mix(self.state)

    def random(self) -> float:
        return (self.next64() >> 11) / 9007199254740992.0

    def randint(self, lo: int, hi: int) -> int:
        """Uniform integer in [lo, hi]."""
        return lo + self.next64() % (hi - lo + 1)
