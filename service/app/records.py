"""What the edges may name of storage: the stored rows a use case or read model returns, their
enums, the time helpers that read their columns, and the errors that mean the database did not
answer.

They are defined in `service.db` (the tables and the queries need them first) and named again
here so that routes, pages, tasks and commands reach storage only through `service.app` (an
import-linter contract in `pyproject.toml`). Nothing here queries or writes.
"""

from __future__ import annotations

from service.db.apikey import DEFAULT_TENANT, KeyRow, Principal
from service.db.assay import AssayInputs
from service.db.hotreads import HotReads, SystemEpoch, Unavailable, on_this_loop
from service.db.models import (
    Assay,
    AssayStatus,
    Dossier,
    Event,
    Hold,
    HoldStatus,
    KeyRole,
    PersonKind,
    ShardStatus,
    System,
    as_utc,
    as_utc_or_none,
    utcnow,
)
from service.db.queries import CandidateRow, LiveProgress
from service.db.session import DATABASE_ERRORS

__all__ = [
    "DATABASE_ERRORS",
    "DEFAULT_TENANT",
    "Assay",
    "AssayInputs",
    "AssayStatus",
    "CandidateRow",
    "Dossier",
    "Event",
    "Hold",
    "HoldStatus",
    "HotReads",
    "KeyRole",
    "KeyRow",
    "LiveProgress",
    "PersonKind",
    "Principal",
    "ShardStatus",
    "System",
    "SystemEpoch",
    "Unavailable",
    "as_utc",
    "as_utc_or_none",
    "on_this_loop",
    "utcnow",
]
