"""Storage quotas per assay: how much of an assay's sampled trials, report and dossier is stored,
cut before anything is written, and the cut said.

What a target hands back (claims, tool arguments and replies, errors) is kept in each fault's
sampled trials; a target that answers with megabytes would otherwise be stored several times
over (the shard's result, the report, the per-fault rows, the signed dossier). So, in this
order, each time one of them is about to be written:

1. every string of a sampled trial longer than `Quota.string_chars` keeps its first characters
   and says how many it lost (`…[cut: N more characters]`);
2. each fault's sampled trials keep, in order, what fits in the fault's share of the samples
   budget — its first violation first (or else its first sample), shortened by dropping the
   tail of its longest lists (its claims, calls, ledger entries) when it alone is over — and
   the rest are dropped, counted;
3. if the whole is still over its cap, every long string of the faults is shortened further.

What is never cut: a count, a rate, an interval, a decision, a reason, a fault, a key — the
evidence the gate decided on. The cut is stated where it happened (`cut`, only when something
was: a report or dossier that lost nothing reads as it always did). Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

MIB = 1024 * 1024
#: How a shortened string ends: the characters it lost, so no reader takes it for whole.
MARK = "…[cut: {n} more characters]"
_MARKED = re.compile(r"…\[cut: (\d+) more characters\]\Z")
#: The shortest a string is ever cut to, however far over its cap the whole is.
FLOOR_CHARS = 64


@dataclass(frozen=True)
class Quota:
    """What one assay may store (bytes of compact JSON, as the database keeps it)."""

    report_bytes: int = 4 * MIB
    samples_bytes: int = 2 * MIB
    dossier_bytes: int = 4 * MIB
    string_chars: int = 4096
    #: Each event's data (an error, reasons, a note): strings are cut to fit.
    event_bytes: int = 64 * 1024


@dataclass
class Cut:
    """What was cut: strings shortened and the characters they lost, sampled trials dropped,
    and entries dropped from a sampled trial's lists."""

    strings: int = 0
    characters: int = 0
    samples: int = 0
    entries: int = 0

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def add(self, other: Cut | Mapping[str, Any] | None) -> Cut:
        if other is None:
            return self
        for f in fields(self):
            got = getattr(other, f.name, 0) if isinstance(other, Cut) else other.get(f.name, 0)
            setattr(self, f.name, getattr(self, f.name) + (int(got) if got else 0))
        return self

    def view(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def size(value: Any) -> int:
    """The bytes `value` takes as the database's JSON (compact, ASCII-escaped)."""
    return len(json.dumps(value, separators=(",", ":"), default=str))


def shorten(value: Any, chars: int, cut: Cut) -> Any:
    """`value` (a new object) with every string (keys too) longer than `chars` cut to it."""
    if isinstance(value, str):
        if len(value) <= chars:
            return value
        # Cut again (a report's string in the dossier): the mark counts what the first cut lost.
        marked = _MARKED.search(value)
        before = int(marked.group(1)) if marked else 0
        text = value[: marked.start()] if marked else value
        if len(text) <= chars:
            return value
        cut.strings += 0 if marked else 1
        cut.characters += len(text) - chars
        return text[:chars] + MARK.format(n=before + len(text) - chars)
    if isinstance(value, Mapping):
        return {shorten(k, chars, cut): shorten(v, chars, cut) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [shorten(v, chars, cut) for v in value]
    return value


def _thinned(sample: Any, budget: int, chars: int, cut: Cut) -> Any:
    """One sampled trial within `budget`: the tail of its longest list dropped, halving, until
    it fits, then its strings shortened (its numbers, the trial's among them, are kept)."""
    if not isinstance(sample, dict):
        return sample
    out = dict(sample)
    while size(out) > budget:
        lists = [(len(v), k) for k, v in out.items() if isinstance(v, list) and v]
        if not lists:
            break
        n, key = max(lists)
        keep = n // 2
        cut.entries += n - keep
        out[key] = out[key][:keep]
    # What is left over is its long strings: shortened further, never below `FLOOR_CHARS`.
    return within({"sample": out}, "sample", budget, chars, cut)["sample"]


def fit_samples(
    samples: Iterable[Any], budget: int, chars: int, cut: Cut, first: Any = None
) -> tuple[list[Any], Any]:
    """The sampled trials (and the first violation, kept first) that fit in `budget`, in order;
    the rest are dropped and counted."""
    left = budget
    kept_first = None
    if first is not None:
        kept_first = _thinned(first, left, chars, cut)
        left -= size(kept_first)
    kept: list[Any] = []
    for sample in samples:
        if sample == first and kept_first is not None:
            kept.append(kept_first)  # the same trial, stored once as it was cut
            continue
        if not kept and kept_first is None and size(sample) > left:
            # The fault's first sample is thinned rather than lost: one trial is still shown.
            thinned = Cut()
            sample = _thinned(sample, left, chars, thinned)
            if size(sample) <= left:
                cut.add(thinned)
        used = size(sample)
        if used <= left:
            kept.append(sample)
            left -= used
        else:
            cut.samples += 1
    return kept, kept_first


def cut_faults(
    faults: list[dict[str, Any]], quota: Quota, budget: int, cut: Cut, first: str | None = None
) -> list[dict[str, Any]]:
    """Each fault's `samples` (and its `first` violation's key, if it has one) within an equal
    share of `budget`, strings shortened first; every other key as it was."""
    share = budget // max(1, len(faults))
    out = []
    for fault in faults:
        fault = dict(fault)
        samples = shorten(list(fault.get("samples") or []), quota.string_chars, cut)
        violation = fault.get(first) if first else None
        if violation is not None:
            violation = shorten(violation, quota.string_chars, cut)
        samples, violation = fit_samples(samples, share, quota.string_chars, cut, violation)
        fault["samples"] = samples
        if first and first in fault:
            fault[first] = violation
        out.append(fault)
    return out


def within(document: dict[str, Any], key: str, cap: int, chars: int, cut: Cut) -> dict[str, Any]:
    """`document` with the long strings under `key` shortened, a quarter at a time down to
    `FLOOR_CHARS`, until the whole takes at most `cap` bytes (counts are never touched: what
    they take is all that is left over the cap)."""
    while size(document) > cap and chars > FLOOR_CHARS:
        chars = max(FLOOR_CHARS, chars // 4)
        document = {**document, key: shorten(document[key], chars, cut)}
    return document


def cut_report(report: dict[str, Any], quota: Quota, before: Cut | None = None) -> dict[str, Any]:
    """The merged report as it may be stored: its faults' samples within `samples_bytes`, the
    whole within `report_bytes`; `cut` says what this and the shards' stores (`before`) cut."""
    cut = Cut().add(before)
    faults = cut_faults(
        list(report.get("faults") or []), quota, quota.samples_bytes, cut, first="first_violation"
    )
    out = within(
        {**report, "faults": faults}, "faults", quota.report_bytes, quota.string_chars, cut
    )
    if cut:
        out["cut"] = cut.view()
    return out


def cut_shard(payload: dict[str, Any], quota: Quota, shards: int) -> dict[str, Any]:
    """A shard's result as it may be stored: its sampled trials within the shard's share of
    `samples_bytes` (never less than 64 KiB), with `cut` when something was."""
    cut = Cut()
    tallies = payload.get("tallies") or {}
    ids = sorted(tallies)
    budget = max(quota.samples_bytes // max(1, shards), 64 * 1024)
    faults = cut_faults([tallies[i] for i in ids], quota, budget, cut, first="first_violation")
    out = {**payload, "tallies": dict(zip(ids, faults, strict=True))}
    if cut:
        out["cut"] = cut.view()
    return out


def cut_dossier(
    predicate: dict[str, Any], quota: Quota, before: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A dossier predicate as it may be signed: its runs' samples within `samples_bytes`, the
    whole within `dossier_bytes`; `cut` (with what the report's stores cut, `before`) only when
    anything was."""
    cut = Cut().add(before)
    runs = cut_faults(list(predicate.get("runs") or []), quota, quota.samples_bytes, cut)
    out = within({**predicate, "runs": runs}, "runs", quota.dossier_bytes, quota.string_chars, cut)
    if cut:
        out["cut"] = cut.view()
    return out


def cut_event(data: dict[str, Any], quota: Quota) -> dict[str, Any]:
    """An event's data within `event_bytes`: long strings shortened, and `cut` when they were."""
    if size(data) <= quota.event_bytes:
        return data
    cut = Cut()
    out = within({"data": data}, "data", quota.event_bytes, quota.event_bytes, cut)["data"]
    return {**out, "cut": cut.view()} if cut else out
