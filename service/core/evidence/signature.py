"""Signature statistics: Wilson score intervals and the Newcombe interval for a difference.

Written out here because the core may import only the standard library and its few pinned
dependencies; both are textbook formulas (Wilson 1927; Newcombe 1998, method 10) and the tests
pin them against published worked examples.
"""

from __future__ import annotations

import math

Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for k successes in n trials (n = 0 gives [0, 1])."""
    if n <= 0:
        return (0.0, 1.0)
    p = k / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    hi = 1.0 if k == n else min(1.0, centre + half)
    return (lo, hi)


def wilson_upper(k: int, n: int) -> float:
    return wilson(k, n)[1]


def newcombe(k1: int, n1: int, k2: int, n2: int, z: float = Z95) -> tuple[float, float, float]:
    """p1 - p2 with Newcombe's hybrid score interval built from the two Wilson intervals."""
    p1 = k1 / n1 if n1 else 0.0
    p2 = k2 / n2 if n2 else 0.0
    l1, u1 = wilson(k1, n1, z)
    l2, u2 = wilson(k2, n2, z)
    d = p1 - p2
    lo = d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    hi = d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return (d, max(-1.0, lo), min(1.0, hi))


def trials_for_bound(max_rate: float, confidence: float = 0.95) -> int:
    """Zero-violation trials needed before the Wilson upper bound falls to max_rate."""
    z = Z95 if abs(confidence - 0.95) < 1e-12 else _z(confidence)
    # With k = 0 the Wilson upper bound is z^2 / (n + z^2).
    return max(1, math.ceil(z * z * (1.0 - max_rate) / max_rate))


def _z(confidence: float) -> float:
    # Two-sided normal quantile by bisection on erf: the core keeps its dependencies few.
    target = confidence
    lo, hi = 0.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if math.erf(mid / math.sqrt(2)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
