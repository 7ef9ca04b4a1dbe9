"""How `submit --wait` shows an assay's progress: a line on stderr without a terminal
(`ProgressLines`), a progress bar on one (`ShardProgress`)."""

from __future__ import annotations

import sys
import time
from typing import Any

import httpx


def activity_text(p: dict[str, Any]) -> str:
    """What the busy slots wait for, shortly (`agent 2, reset 1`); empty when none is busy."""
    waiting = p.get("waiting") or {}
    return ", ".join(f"{k} {v}" for k, v in sorted(waiting.items()))


def progress_text(p: dict[str, Any]) -> str:
    """An assay's progress in a line: shards and trials, the team's agent runs (and the gate's
    own, `+ 3 by the gate`), and what busy slots wait for (`3 slots busy: agent 2, reset 1`)."""
    text = (
        f"{p.get('shards_done', 0)}/{p.get('shard_count', '?')} shards, "
        f"{p.get('trials_done', 0)}/{p.get('trials_planned', '?')} trials"
    )
    if p.get("runs_done"):
        text += f", {p['runs_done']} runs"
        if p.get("gate_runs_done"):
            text += f" (+ {p['gate_runs_done']} by the gate)"
    busy = int(p.get("slots_busy") or 0)
    if busy:
        what = activity_text(p)
        text += f", {busy} slot{'s' if busy != 1 else ''} busy" + (f": {what}" if what else "")
    return text


class ProgressLines:
    """Without a terminal, `submit --wait` prints a progress line on stderr when the progress
    moved, at most every `every_s` (and whenever a shard finished): a CI log shows where a slow
    assay is. stdout keeps only the result."""

    def __init__(self, every_s: float = 10.0) -> None:
        self.every_s = every_s
        self._last_text = ""
        self._last_at = -1e9
        self._shards = -1

    def __call__(self, candidate: dict[str, Any]) -> None:
        p = candidate.get("progress") or {}
        text = progress_text(p)
        shards = int(p.get("shards_done") or 0)
        now = time.monotonic()
        if text == self._last_text or (
            now - self._last_at < self.every_s and shards == self._shards
        ):
            return
        self._last_text, self._last_at, self._shards = text, now, shards
        print(
            f"assaygate: assay {candidate.get('status', '')}: {text}", file=sys.stderr, flush=True
        )


class ShardProgress:
    """A progress bar on stderr while `submit --wait` waits on a terminal: the assay's shards
    done, and each fault's. Polls `GET /v1/assays/{id}` at most once a second."""

    def __init__(self, client: httpx.Client, assay_id: str) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self._client = client
        self._assay = assay_id
        self._last = 0.0
        self._bar = Progress(
            TextColumn("{task.description:<28}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("shards"),
            console=Console(stderr=True),
            transient=True,
        )
        self._overall = self._bar.add_task("assay", total=None)
        self._faults: dict[str, Any] = {}

    def __enter__(self) -> ShardProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def __call__(self, candidate: dict[str, Any]) -> None:
        p = candidate.get("progress") or {}
        self._bar.update(
            self._overall,
            completed=p.get("shards_done", 0),
            total=p.get("shard_count") or None,
            description=f"assay {candidate.get('status', '')} {activity_text(p)}".rstrip(),
        )
        if time.monotonic() - self._last < 1.0:
            return
        self._last = time.monotonic()
        response = self._client.get(f"/v1/assays/{self._assay}")
        if response.status_code != 200:
            return
        for fault in response.json().get("faults", []):
            name = str(fault.get("id") or "all faults")
            fp = fault.get("progress") or {}
            if name not in self._faults:
                self._faults[name] = self._bar.add_task(f"  {name}", total=fp.get("shard_count"))
            self._bar.update(
                self._faults[name],
                completed=fp.get("shards_done", 0),
                total=fp.get("shard_count") or None,
            )


def say_deprecated(client: httpx.Client, candidate_id: str) -> None:
    """What the worker that ran the candidate's code saw and nobody read: each deprecated
    `assaygate` path the code imports (`target.deprecated` events), as a local assay prints it."""
    params: dict[str, str | int] = {
        "candidate_id": candidate_id,
        "kind": "target.deprecated",
        "limit": 20,
    }
    found = client.get("/v1/events", params=params)
    if found.status_code != 200:
        return
    events = found.json().get("items") or []
    for line in dict.fromkeys(w for e in events for w in (e.get("data") or {}).get("warnings", [])):
        print(
            f"assaygate: note: the candidate's code uses a deprecated path: {line}", file=sys.stderr
        )
