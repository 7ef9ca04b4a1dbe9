"""Deterministic random streams.

`LCG` reproduces the paper's generator bit for bit (fault selection in paper mode) and can jump
ahead, so a shard starting at trial i draws exactly what a sequential run would. `Stream` is the
separate per-trial workload stream: SplitMix64 keyed by (seed, stream, index), so trials differ and
any trial can be re-created alone for replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, TypeVar

if TYPE_CHECKING:
    # mypyc's native 64-bit int (a machine word when compiled; a plain int at run time).
    from mypy_extensions import i64

T = TypeVar("T")

_A: Final = 1664525
_C: Final = 1013904223
_M32: Final = 0xFFFFFFFF
_M64: Final = 0xFFFFFFFFFFFFFFFF


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


def _native() -> bool:
    """Whether mypyc compiled this module: its functions are then built-ins, with no code."""
    return not hasattr(_native, "__code__")


# Compiled, the 64-bit arithmetic runs on 32-bit halves held in machine words: a 64-bit product
# is a 128-bit Python int, and mypyc handles ints past 62 bits through slow generic calls (the
# workload stream and the trial keys were over a quarter of a compiled trial). Interpreted, the
# plain big-int form is the faster one. Both compute the same bits (tests/core/trial/test_rng.py).
_NATIVE: Final = _native()
_GOLDEN: Final = 0x9E3779B97F4A7C15
_G_HI: Final = 0x9E3779B9
_G_LO: Final = 0x7F4A7C15
_C1_HI: Final = 0xBF58476D
_C1_LO: Final = 0x1CE4E5B9
_C2_HI: Final = 0x94D049BB
_C2_LO: Final = 0x133111EB


def _mix_wide(z: int) -> int:
    """SplitMix64's finaliser on a Python int: the specification `_mix_words` follows."""
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _M64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _M64
    return z ^ (z >> 31)


def _mul_words(h: i64, lo: i64, ch: i64, cl: i64) -> tuple[i64, i64]:
    """(h, lo) * (ch, cl) mod 2**64, in 32-bit halves; 16-bit pieces keep products below 2**49."""
    l0 = lo & 0xFFFF
    l1 = lo >> 16
    b = l1 * cl
    s = l0 * cl + ((b & 0xFFFF) << 16)
    hi = (s >> 32) + (b >> 16)
    hi += (h & 0xFFFF) * cl + ((((h >> 16) * cl) & 0xFFFF) << 16)
    hi += l0 * ch + (((l1 * ch) & 0xFFFF) << 16)
    return hi & _M32, s & _M32


def _mix_halves(h: i64, lo: i64) -> tuple[i64, i64]:
    """`_mix_wide` of h * 2**32 + lo (each below 2**32), in machine words: its two halves."""
    lo ^= ((h << 2) & _M32) | (lo >> 30)
    h ^= h >> 30
    h, lo = _mul_words(h, lo, _C1_HI, _C1_LO)
    lo ^= ((h << 5) & _M32) | (lo >> 27)
    h ^= h >> 27
    h, lo = _mul_words(h, lo, _C2_HI, _C2_LO)
    lo ^= ((h << 1) & _M32) | (lo >> 31)
    h ^= h >> 31
    return h, lo


def _mix_words(h: i64, lo: i64) -> int:
    """`_mix_wide` of h * 2**32 + lo (each below 2**32), computed in machine words."""
    h, lo = _mix_halves(h, lo)
    return (int(h) << 32) | int(lo)


def _mix(z: int) -> int:
    if _NATIVE:
        return _mix_words(z >> 32, z & _M32)
    return _mix_wide(z)


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


def shared_root(seed: int, group: str) -> int:
    """The workload stream of the faults that share a baseline on `group` (their tool): trial k
    of each, and the baseline run they share, draw workload `derive(root, k)`."""
    return stream_key(seed, "wb", group)


def derive(key: int, index: int) -> int:
    """The key of item `index` under a stream key: one mixing round, for hot loops."""
    if _NATIVE:
        n = (index + 1) & _M64
        h, lo = _mul_words(n >> 32, n & _M32, _G_HI, _G_LO)
        return _mix_words(((key >> 32) & _M32) ^ h, (key & _M32) ^ lo)
    return _mix_wide((key ^ ((index + 1) * _GOLDEN)) & _M64)


class Stream:
    """SplitMix64: tiny, fast, and independent per key. Its state is kept in 32-bit halves, so
    the compiled core steps it in machine words."""

    __slots__ = ("hi", "lo")

    def __init__(self, key: int) -> None:
        # The key's low 64 bits, in halves.
        self.hi: i64 = (key >> 32) & _M32
        self.lo: i64 = key & _M32

    def _step(self) -> tuple[i64, i64]:
        """Advance the state by the golden step; its new halves."""
        lo = self.lo + _G_LO
        hi = (self.hi + _G_HI + (lo >> 32)) & _M32
        lo &= _M32
        self.hi = hi
        self.lo = lo
        return hi, lo

    def next64(self) -> int:
        h, lo = self._step()
        if _NATIVE:
            return _mix_words(h, lo)
        return _mix_wide((h << 32) | lo)

    def next_divmod(self, m: int) -> tuple[int, int]:
        """`divmod(self.next64(), m)` for 4 <= m < 2**22: compiled, without a 64-bit int."""
        h, lo = self._step()
        if _NATIVE:
            h, lo = _mix_halves(h, lo)
            r = (h % m << 32) | lo
            return (h // m << 32) + r // m, r % m
        return divmod(_mix_wide((h << 32) | lo), m)

    def random(self) -> float:
        return (self.next64() >> 11) / 9007199254740992.0

    def randint(self, lo: int, hi: int) -> int:
        """Uniform integer in [lo, hi]."""
        return lo + self.next64() % (hi - lo + 1)
