"""Deprecated: the python target's host moved to `assaygate.host` (the public package), so that
it imports nothing of `service` and a team package of that name stays the team's.

It imports for one release with a `DeprecationWarning`.
"""

from __future__ import annotations

import warnings

from assaygate.host import EntrypointInvalid as EntrypointInvalid
from assaygate.host import RemoteTools as RemoteTools
from assaygate.host import SandboxRefused as SandboxRefused
from assaygate.host import resolve as resolve

warnings.warn(
    "service.targets.python_host is deprecated: the host is assaygate.host",
    DeprecationWarning,
    stacklevel=2,
)
