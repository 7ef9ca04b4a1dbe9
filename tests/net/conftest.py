"""The warehouse example's real MCP servers, for the engine's egress tests."""

from tests.mcp.conftest import sandbox

__all__ = ["sandbox"]
