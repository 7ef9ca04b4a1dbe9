"""What numbers in a manifest or a plan mean, the same in Python and in JSON Schema.

A whole number is an integer as JSON Schema counts them — `3` and `3.0` are both 3 — but never a
boolean or a string: `Annotated[int, Field(strict=True, ...bounds), INTEGRAL]` (the bounds in
the same `Field`, so that they reach the published schema). `Number`: any number, never a
boolean or a string.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field


def _integral(value: object) -> object:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


INTEGRAL = BeforeValidator(_integral)
Number = Annotated[float, Field(strict=True)]
