"""Deprecated: the MCP python runner's host moved to `assaygate.mcp_host` (the public package), so
that it imports nothing of `service` and a team package of that name stays the team's.

`python -m service.mcp.host` and `import service.mcp.host` still work for one release, with a
`DeprecationWarning`.
"""

from __future__ import annotations

import warnings

from assaygate.mcp_host import main as main

warnings.warn(
    "service.mcp.host is deprecated: the MCP python runner's host is assaygate.mcp_host",
    DeprecationWarning,
    stacklevel=2,
)

if __name__ == "__main__":
    main()
