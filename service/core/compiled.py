"""The hot modules of the core, which a production build compiles with mypyc.

Compiled, they behave exactly as the pure-Python source does (a test runs the core's suite against
a compiled build); they only run faster.
"""

from __future__ import annotations

HOT_MODULES: tuple[str, ...] = (
    "service/core/trial/rng.py",
    "service/core/trial/world.py",
    "service/core/trial/oracle.py",
    "service/core/trial/record.py",
    "service/core/faults/injector.py",
    "service/core/trial/task.py",
    "service/core/trial/port.py",
    "service/core/trial/sandbox.py",
    "service/core/trial/copperfin.py",
    "service/core/trial/harness.py",
    "service/core/trial/storm.py",
    "service/core/evidence/tally.py",
    "service/core/shards/arms.py",
    "service/core/shards/assay.py",
    "service/core/shards/slotted.py",
    "service/core/shards/counting.py",
    "service/core/shards/scheduler.py",
)
