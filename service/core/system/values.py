"""What numbers in a manifest or a plan mean, the same in Python and in JSON Schema.

A whole number is an integer as JSON Schema counts them — `3` and `3.0` are both 3 — but never a
boolean or a string: `Annotated[int, Field(strict=True, ...bounds), INTEGRAL]` (the bounds in
the same `Field`, so that they reach the published schema). `Number`: any number, never a
boolean or a string. `Envelope`: the rates a manifest asks of its system (floors, tolerances).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from service.core.system.contract import StrictModel


def _integral(value: object) -> object:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


INTEGRAL = BeforeValidator(_integral)
Number = Annotated[float, Field(strict=True)]


Rate = Annotated[Number, Field(ge=0.0, le=1.0)]


# A trial is contained exactly when it has no unsafe escape, a hard invariant any one of which
# blocks: so containment below 1 always blocks, and its floor is really a tolerance.
POINT_CONTAINED = 0.99  # what an unset containment floor reads as on the point estimate
SERVICE_FLOORS: tuple[str, ...] = ("recovered", "verified", "useful_service")


class Floors(StrictModel):
    # None: no tolerance beyond the hard invariant's (the promise's p0). Set under
    # `lower_bound`, it is a declared unsafe-escape tolerance of 1 - contained, read with the
    # exact bound like `max_violation_rate` (docs/evidence.md, "What a floor promises").
    contained: Rate | None = None
    recovered: Rate = 0.80
    verified: Rate = 0.80
    useful_service: Rate = 0.80

    def value(self, key: str) -> float:
        found = getattr(self, key)
        return POINT_CONTAINED if found is None else float(found)


class Envelope(StrictModel):
    floors: Floors = Floors()
    # "lower_bound" (the default): floors compare the Wilson 95 % lower bound, so a rate below
    # the floor passes in at most 2.5 % of assays (a perfect record clears 0.80 after 16 trials;
    # fewer hold, naming them). "point": the point estimate, a stated and looser choice that
    # carries no error control. Stored manifests carry their `floor_on` explicitly, so a row
    # written under the old default keeps meaning (and hashing) "point".
    floor_on: Literal["point", "lower_bound"] = "lower_bound"
    # The highest hard-invariant violation rate each fault may have, established at 95 %.
    max_violation_rate: Annotated[Number, Field(gt=0.0, lt=1.0)] | None = None
    # "required": a control earns credit only by its own counterfactual pair, and a nominated
    # control without one holds. "reported": pairs are run and reported but do not gate; the
    # fault's evidence is valid only when the sensitivity pair (a naive agent derived from the
    # tool contract) shows the predicted violation. Applied alike to declared and undeclared
    # controls, so declaring less never helps.
    attribution: Literal["required", "reported"] = "required"

    def floored(self) -> tuple[str, ...]:
        """The floors the gate compares on a fault's own trials: on the lower bound containment
        is the escape tolerance instead (`escape_tolerance`), never a Wilson floor."""
        if self.floor_on == "lower_bound":
            return SERVICE_FLOORS
        return ("contained", *SERVICE_FLOORS)

    def escape_tolerance(self) -> float | None:
        """The unsafe-escape rate a containment floor declares (on the lower bound), or None."""
        if self.floor_on != "lower_bound" or self.floors.contained is None:
            return None
        return 1.0 - float(self.floors.contained)
