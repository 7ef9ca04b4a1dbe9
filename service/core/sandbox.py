"""Deprecated: the path docs/targets.md named for a target's interface before the core's rooms.

A target written against it (`from service.core.sandbox import ToolTimeout`) still imports, for
one release, with a `DeprecationWarning`: import from `assaygate.target`, the stable interface.
It re-exports the public package only, so it adds no edge between the core's rooms.
"""

from __future__ import annotations

import warnings

from assaygate.target import PreconditionFailed as PreconditionFailed
from assaygate.target import RateLimited as RateLimited
from assaygate.target import RunCrashed as RunCrashed
from assaygate.target import Task as Task
from assaygate.target import ToolError as ToolError
from assaygate.target import ToolMalformed as ToolMalformed
from assaygate.target import ToolRejected as ToolRejected
from assaygate.target import Tools as Tools
from assaygate.target import ToolTimeout as ToolTimeout

warnings.warn(
    "service.core.sandbox is deprecated and will be removed in the next release: "
    "import Task, Tools and the tool errors from assaygate.target",
    DeprecationWarning,
    stacklevel=2,
)
