"""A worker's health, for an orchestrator's probes: `python -m worker.health live|ready`.

With `ASSAYGATE_WORKER_HEALTH_FILE` set, a worker writes its state there (JSON: `state`, `at`,
`every`): `connecting` from its start and after a lost broker connection (Celery retries for
ever), `consuming` beaten every `ASSAYGATE_WORKER_HEALTH_INTERVAL_S` from the consumer's own
event loop (worker.app), and `stopping` once it shuts down (finishing the shard in hand). The
beat comes from the loop that takes tasks, so a loop that stops turning stops beating; the pool
(prefork, the default) runs shards in child processes, so a long shard does not delay it.

- **live**: connecting or stopping, or consuming with a beat younger than three intervals.
  Waiting on the broker is not the pod's fault: a restart would not bring Redis back, and would
  kill the shard a child is still finishing and storing in the database.
- **ready**: consuming, with a beat as fresh.

This module is what a probe imports: nothing of Celery, so a probe costs a Python start and one
small file read.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass

from service.settings import Settings, SettingsInvalid, get_settings

CONNECTING, CONSUMING, STOPPING = "connecting", "consuming", "stopping"
STATES = (CONNECTING, CONSUMING, STOPPING)
# Beats a consuming worker may miss before it is neither live nor ready.
MISSED_BEATS = 3


def write(settings: Settings, state: str) -> None:
    """Record `state` now; atomic, so a probe never reads half a file."""
    path = settings.worker_health_file
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"state": state, "at": time.time(), "every": settings.worker_health_interval_s}
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(record))
    os.replace(temporary, path)


@dataclass(frozen=True)
class WorkerHealth:
    live: bool
    ready: bool
    said: str


def judge(settings: Settings, now: float | None = None) -> WorkerHealth:
    """What the health file says of the worker, at `now`."""
    path = settings.worker_health_file
    if path is None:
        return WorkerHealth(
            False, False, "ASSAYGATE_WORKER_HEALTH_FILE is not set: nothing is written"
        )
    try:
        record = json.loads(path.read_text())
        state, at, every = str(record["state"]), float(record["at"]), float(record["every"])
    except FileNotFoundError:
        return WorkerHealth(False, False, f"no {path}: the worker has not started")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return WorkerHealth(False, False, f"{path} is unreadable: {exc}")
    if state not in STATES:
        return WorkerHealth(False, False, f"{path} names an unknown state {state!r}")
    age = (time.time() if now is None else now) - at
    if state != CONSUMING:
        return WorkerHealth(True, False, f"{state} for {age:.1f} s")
    limit = MISSED_BEATS * every
    if age > limit:
        said = f"consuming, but its event loop last beat {age:.1f} s ago (stale after {limit:g} s)"
        return WorkerHealth(False, False, said)
    return WorkerHealth(True, True, f"consuming, beat {age:.1f} s ago")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in (["live"], ["ready"]):
        print("usage: python -m worker.health live|ready", file=sys.stderr)
        return 2
    try:
        settings = get_settings()
    except SettingsInvalid as exc:
        print(f"worker.health: error: {exc}", file=sys.stderr)
        return 2
    verdict = judge(settings)
    passed = verdict.live if args == ["live"] else verdict.ready
    print(f"{args[0] if passed else 'not ' + args[0]}: {verdict.said}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
