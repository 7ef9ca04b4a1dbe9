"""The hot modules of the core, which a production build compiles with mypyc.

Compiled, they behave exactly as the pure-Python source does (a test runs the core's suite against
a compiled build); they only run faster.
"""

from __future__ import annotations

HOT_MODULES: tuple[str, ...] = (
    "service/core/rng.py",
    "service/core/world.py",
    "service/core/oracle.py",
    "service/core/injector.py",
    "service/core/task.py",
    "service/core/sandbox.py",
    "service/core/copperfin.py",
    "service/core/harness.py",
    "service/core/storm.py",
    "service/core/tally.py",
    "service/core/assay.py",
)
