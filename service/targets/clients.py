"""Deprecated: the namespaced tool clients moved to `assaygate.target` (the stable interface).

This path imports for one more release with a `DeprecationWarning` (docs/targets.md, "The stable
interface").
"""

from __future__ import annotations

import warnings

from assaygate.target import Capabilities as Capabilities
from assaygate.target import Evidence as Evidence
from assaygate.target import Orders as Orders
from assaygate.target import Payments as Payments
from assaygate.target import Policy as Policy
from assaygate.target import ToolClients as ToolClients

warnings.warn(
    "service.targets.clients is deprecated: import ToolClients from assaygate.target",
    DeprecationWarning,
    stacklevel=2,
)
