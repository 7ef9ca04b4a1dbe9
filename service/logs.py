"""Logging for every process: one stderr handler, one JSON object a line for log shippers or a
readable line at a terminal (`ASSAYGATE_LOG_FORMAT`), the ids a call carries as fields."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from service.settings import Settings


# Attributes a log call may carry through `extra=`; they become top-level JSON keys.
LOG_CONTEXT_KEYS: tuple[str, ...] = (
    "candidate_id",
    "assay_id",
    "shard",
    "system",
    "method",
    "path",
    "status",
    "duration_ms",
    "worker",
    "trials",
    "decision",
    "delivery_id",
    "held",
)


class JsonLineFormatter(logging.Formatter):
    """One JSON object per line, so log shippers need no parsing rules."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in LOG_CONTEXT_KEYS:
            value = record.__dict__.get(key)
            if value is not None:
                line[key] = value if isinstance(value, int | float | bool) else str(value)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """For a person at a terminal: time, level, message, then the ids as key=value."""

    def format(self, record: logging.LogRecord) -> str:
        at = datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        context = " ".join(
            f"{key}={record.__dict__[key]}"
            for key in LOG_CONTEXT_KEYS
            if record.__dict__.get(key) is not None
        )
        line = f"{at} {record.levelname:<7} {record.getMessage()}"
        if context:
            line += f"  ({context})"
        if record.name and not record.name.startswith("assaygate"):
            line += f"  [{record.name}]"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def log_format(settings: Settings, stream: Any = None) -> str:
    """`json` or `text`: `auto` is text on a terminal and JSON for anything that reads logs."""
    if settings.log_format != "auto":
        return settings.log_format
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return "text" if isatty is not None and isatty() else "json"


def configure_logging(settings: Settings) -> None:
    """Route every logger (ours, uvicorn's, Celery's) through one stderr handler."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format(settings, sys.stderr) == "json":
        handler.setFormatter(JsonLineFormatter())
    else:
        handler.setFormatter(TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log_level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "celery", "kombu"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
    # The API logs each request itself, with its ids; uvicorn's access line would duplicate it.
    logging.getLogger("uvicorn.access").disabled = True
