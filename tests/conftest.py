"""Shared by every test directory; heavy fixtures (databases, workers) live in the directory
conftests that need them."""

from __future__ import annotations

import functools
import json
import math
import os
import warnings
from pathlib import Path

import pytest

#: The directories whose conftest starts services for all of their files (a database, Celery
#: workers, an API, a built wheel), as package-scoped fixtures. Each runs as one unit: its files
#: together on one test process, so its services start once and end with its last file, instead
#: of every test process starting its own and keeping them to the end of the run (four test
#: processes then held more than PostgreSQL's default 100 connections between them). One that
#: costs more than `UNIT_S` runs as several units of about that many seconds, each starting its
#: own services: as one, the API tests ran alone at the end of a run on a busy machine.
SERVICE_DIRECTORIES = (
    "tests/api",
    "tests/app",
    "tests/browser",
    "tests/db",
    "tests/deploy",
    "tests/web",
    "tests/worker",
)


#: Files whose tests share nothing (no module fixture) and cost more than any other file: each
#: test is a unit of its own, so several test processes run them at once instead of one running
#: them all at the end of the run.
SPLIT_FILES = ("tests/mcp/test_careful_examples.py",)


UNIT_S = 200.0


@functools.cache
def file_costs() -> dict[str, float]:
    """Wall seconds per test file from a measured run (tests/file_costs.json, written by `python
    -m tests.support.cpu REPORT --costs tests/file_costs.json`); files it does not list cost 0."""
    costs = Path(__file__).with_name("file_costs.json")
    loaded: dict[str, float] = json.loads(costs.read_text()) if costs.exists() else {}
    return loaded


@functools.cache
def service_units() -> dict[str, str]:
    """Each service directory's test files and their unit: the directory, or `directory#k` when
    it costs more than `UNIT_S`, its files dealt longest first to the lightest of its units. Read
    from the folders, not from what was collected, so every process (the xdist controller
    included) deals them alike."""
    cost = file_costs()
    root = Path(__file__).resolve().parents[1]
    units: dict[str, str] = {}
    for folder in SERVICE_DIRECTORIES:
        names = [p.relative_to(root).as_posix() for p in (root / folder).rglob("test_*.py")]
        names.sort(key=lambda name: (-cost.get(name, 0.0), name))
        count = max(1, math.ceil(sum(cost.get(name, 0.0) for name in names) / UNIT_S))
        loads = [0.0] * count
        for name in names:
            lightest = loads.index(min(loads))
            loads[lightest] += cost.get(name, 0.0)
            units[name] = folder if count == 1 else f"{folder}#{lightest + 1}"
    return units


def unit(nodeid: str) -> str:
    """What runs together on one test process: a service directory's unit, a split file's
    test, else a file."""
    path = nodeid.split("::", 1)[0]
    if path in SPLIT_FILES:
        return nodeid
    found = service_units().get(path)
    if found is not None:
        return found
    return next((d for d in SERVICE_DIRECTORIES if path.startswith(f"{d}/")), path)


class ByUnit:
    """`--dist loadfile`, with a service directory as one unit (`unit`). Registered only where
    xdist is loaded: its hook is unknown to pytest without it."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: object) -> object:
        if config.getvalue("dist") != "loadfile":
            return None
        from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

        class UnitScheduling(LoadFileScheduling):  # type: ignore[misc]
            def _split_scope(self, nodeid: str) -> str:
                return unit(nodeid)

        return UnitScheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.has_plugin("xdist"):
        config.pluginmanager.register(ByUnit(), "assaygate-by-unit")
    # A compiled core built from older sources would test yesterday's code: drop it (the tests then
    # run the pure-Python source; `make venv` compiles the current one).
    from service.compile import clean, state

    if state() == "stale":
        clean()
        warnings.warn(
            "the compiled core was stale and is removed: testing the pure-Python core "
            "(`make venv` recompiles)",
            stacklevel=1,
        )
    # ASSAYGATE_TEST_CPU_REPORT=path: CPU seconds per test file (tests/support/cpu.py); read
    # only when asked, so a suite run from elsewhere (tests/test_order.py's) needs no package.
    if os.environ.get("ASSAYGATE_TEST_CPU_REPORT"):
        from tests.support import cpu

        cpu.configure(config)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # ASSAYGATE_TEST_ORDER=reverse runs the test files in reverse order (each file's tests in
    # their own order, but a split file's, which are units of their own): a test that passes only
    # because another file ran first shows up. Use it with `-p no:randomly` where that plugin is
    # installed.
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    # The units longest first, and a unit's files longest first (tests/file_costs.json: wall
    # seconds from a measured run, written by `python -m tests.support.cpu REPORT --costs
    # tests/file_costs.json`; a split file's tests share its cost); those it does not list after
    # them in their own order. Each xdist worker takes the next unit as it frees up
    # (`--no-loadscope-reorder`), so the long ones start early and the short ones fill the gaps
    # at the end, instead of a long one running alone at the end while the other workers idle.
    cost = file_costs()
    units: dict[str, list[tuple[float, list[pytest.Item]]]] = {}
    for name, tests in files.items():
        if name in SPLIT_FILES:
            share = cost.get(name, 0.0) / len(tests)
            pieces = [(share, [test]) for test in tests]
        else:
            pieces = [(cost.get(name, 0.0), tests)]
        for piece in pieces:
            units.setdefault(unit(piece[1][0].nodeid), []).append(piece)
    for members in units.values():
        members.sort(key=lambda piece: -piece[0])
    ordered = sorted(units.values(), key=lambda members: -sum(piece[0] for piece in members))
    pieces = [piece for members in ordered for piece in members]
    if os.environ.get("ASSAYGATE_TEST_ORDER", "") == "reverse":
        pieces.reverse()
    items[:] = [item for _, tests in pieces for item in tests]
    # Integration tests start processes and wait on them; a hang must fail, not stall CI. The
    # bound guards against a hang, not slowness: a busy 2-core machine runs them several times
    # slower than a quiet one.
    for item in items:
        if item.get_closest_marker("integration") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(600))
