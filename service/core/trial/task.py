"""What a target is handed besides the tools: its task, the typed tool errors it can observe, and
the record of one boundary crossing that the disturbance handlers change.

Split from `sandbox.py`, which re-exports these names; compiled with it (a hot module).
"""

from __future__ import annotations

from typing import Any

# The task and the typed tool errors are the public package's own classes (assaygate.target,
# standard library only), so a target's `except ToolTimeout` catches what any sandbox raises,
# whichever of the documented paths it imported them from.
from assaygate.target import PreconditionFailed as PreconditionFailed
from assaygate.target import RateLimited as RateLimited
from assaygate.target import RunCrashed as RunCrashed
from assaygate.target import Task as Task
from assaygate.target import ToolError as ToolError
from assaygate.target import ToolMalformed as ToolMalformed
from assaygate.target import ToolRejected as ToolRejected
from assaygate.target import ToolTimeout as ToolTimeout
from service.core.faults.injector import Armed

Trace = list[dict[str, Any]]


class Call:
    """One boundary crossing, as the disturbance handlers see and change it."""

    __slots__ = ("after", "args", "error", "reply")

    def __init__(self, args: dict[str, Any]) -> None:
        self.args = args
        # A reply the disturbance substitutes for the world's answer (read boundaries).
        self.reply: Any = None
        # A disturbance that applies after the effect commits (lost, cut off or partial replies).
        self.after: Armed | None = None
        # The error the disturbance fails the call with, raised by the tool method itself: a
        # compiled exception builds a traceback entry (a code object and a frame) in every
        # native frame it crosses, so it is raised where the target meets it, not in a handler.
        self.error: BaseException | None = None
