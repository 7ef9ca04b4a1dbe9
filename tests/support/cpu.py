"""CPU seconds per test file, for finding what makes the suite slow on a busy machine.

Wall time on a shared 2-core box measures the other load as much as the tests; the CPU a test
process and the children it reaped burnt (user + sys, `resource.getrusage`) does not. Opt in with
`ASSAYGATE_TEST_CPU_REPORT=path`: each test process (every xdist worker, and the controller) appends
one JSON line per test file to `path` when it ends; `python -m tests.support.cpu path` sums them.

What it cannot see: a process the tests started and never reaped (its CPU is nobody's child), and
the servers the tests talk to (PostgreSQL, Redis). Module and session fixtures are torn down in
their last test's teardown, so their workers' CPU counts for the file that used them last.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Generator
from pathlib import Path

import pytest

SESSION = "<session: start-up, collection, what no test's protocol covered>"


def _cpu(children: bool = True) -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    if not children:
        return own.ru_utime + own.ru_stime
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


class CpuReport:
    """A pytest plugin: per test file, the CPU seconds and wall seconds its tests' protocols took
    (setup, call and teardown) in this process."""

    def __init__(self, path: Path, *, children: bool) -> None:
        self.path = path
        self.children = children
        self.files: dict[str, list[float]] = {}
        self.tests: dict[str, list[float]] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        cpu, wall = _cpu(), time.monotonic()
        yield
        took = [_cpu() - cpu, time.monotonic() - wall, 1.0]
        for key, table in ((item.nodeid.split("::", 1)[0], self.files), (item.nodeid, self.tests)):
            entry = table.setdefault(key, [0.0, 0.0, 0.0])
            for i, value in enumerate(took):
                entry[i] += value

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self) -> None:
        # The last hook a process runs: everything up to here is the process's own CPU.
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        rest = _cpu(self.children) - sum(cpu for cpu, _, _ in self.files.values())
        rows = [
            {"file": name, "cpu_s": cpu, "wall_s": wall, "tests": int(n), "worker": worker}
            for name, (cpu, wall, n) in self.files.items()
        ]
        rows.append({"file": SESSION, "cpu_s": rest, "wall_s": 0.0, "tests": 0, "worker": worker})
        rows += [
            {"test": name, "cpu_s": cpu, "wall_s": wall, "worker": worker}
            for name, (cpu, wall, _) in self.tests.items()
        ]
        with self.path.open("a") as out:
            out.write("".join(json.dumps(row) + "\n" for row in rows))


def configure(config: pytest.Config) -> None:
    path = os.environ.get("ASSAYGATE_TEST_CPU_REPORT", "")
    if path and not config.pluginmanager.has_plugin("assaygate-cpu-report"):
        # An xdist controller's children are its workers, which report their own CPU.
        controller = not hasattr(config, "workerinput") and bool(
            config.getoption("numprocesses", None)
        )
        report = CpuReport(Path(path).resolve(), children=not controller)
        config.pluginmanager.register(report, "assaygate-cpu-report")


# `pytest -p tests.support.cpu` loads it without the suite's conftest (its own test does).
pytest_configure = configure


def summary(path: Path, tests: int = 0) -> str:
    """Per file, heaviest first; with `tests`, the heaviest tests too."""
    totals: dict[str, list[float]] = {}
    each: list[tuple[float, float, str]] = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if "test" in row:
            each.append((row["cpu_s"], row["wall_s"], row["test"]))
            continue
        entry = totals.setdefault(row["file"], [0.0, 0.0, 0.0])
        entry[0] += row["cpu_s"]
        entry[1] += row["wall_s"]
        entry[2] += row["tests"]
    lines = [f"{'cpu s':>8} {'wall s':>8} {'tests':>5}  file"]
    for name, (cpu, wall, n) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"{cpu:8.1f} {wall:8.1f} {int(n):5d}  {name}")
    if tests:
        lines.append(f"{'cpu s':>8} {'wall s':>8}        test")
        lines += [f"{c:8.1f} {w:8.1f}        {name}" for c, w, name in sorted(each)[::-1][:tests]]
    cpu = sum(entry[0] for entry in totals.values())
    wall = sum(entry[1] for entry in totals.values())
    lines.append(f"{cpu:8.1f} {wall:8.1f}        all files, every process (CPU in CPU-seconds)")
    return "\n".join(lines)


def costs(path: Path, at_least: float = 5.0) -> dict[str, float]:
    """Wall seconds per test file (every process's share summed), for files of `at_least`
    seconds: what `tests/file_costs.json` holds for ordering the suite (tests/conftest.py)."""
    totals: dict[str, float] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if str(row.get("file", "")).startswith("tests/"):
            totals[row["file"]] = totals.get(row["file"], 0.0) + row["wall_s"]
    heavy = sorted(((-wall, name) for name, wall in totals.items() if wall >= at_least))
    return {name: round(-wall, 1) for wall, name in heavy}


if __name__ == "__main__":
    # python -m tests.support.cpu PATH [N]: the files, and the N heaviest tests.
    # python -m tests.support.cpu PATH --costs OUT: write the files' wall seconds to OUT.
    if len(sys.argv) == 4 and sys.argv[2] == "--costs":
        Path(sys.argv[3]).write_text(json.dumps(costs(Path(sys.argv[1])), indent=1) + "\n")
    else:
        print(summary(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0))
