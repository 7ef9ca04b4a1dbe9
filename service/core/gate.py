"""Deprecated: the path docs/dossier.md named for `block_first` before the core's rooms.

It imports for one release with a `DeprecationWarning`; the rule lives in
`service.core.decision.gate`. Outside the rooms (pyproject.toml's `exhaustive_ignores`), and
nothing in the core imports it.
"""

from __future__ import annotations

import warnings

from service.core.decision.gate import block_first as block_first

warnings.warn(
    "service.core.gate is deprecated and will be removed in the next release: "
    "block_first lives in service.core.decision.gate",
    DeprecationWarning,
    stacklevel=2,
)
