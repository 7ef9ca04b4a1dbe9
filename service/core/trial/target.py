"""The target interface: what a system under test is handed, and what it is.

The harness calls a target as `Target(task, tools)` with the sandbox's `Tools`; the adapters for
`python` and `http` targets are such callables. What a system under test may use is `ToolPort`:
it reads, acts, records evidence and releases its claim only through these methods. A `python`
target's child process gets a stand-in with the same methods that crosses the HTTP target
protocol. The reference workflow is written against `ToolPort`, not `Tools`, so it runs unchanged
(compiled or not) on either side.
"""

from __future__ import annotations

from collections.abc import Callable

from assaygate.target import Tools as PublicTools
from service.core.trial.sandbox import Task, Tools

# The same protocol the public package documents for target authors (`assaygate.target.Tools`):
# one list of methods, so the reference workflow and a team's target are held to the same port.
ToolPort = PublicTools


Target = Callable[[Task, Tools], None]
