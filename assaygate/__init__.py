"""Assaygate's public interface for the code it assays: the stable import surface.

- `assaygate.target`: what a `python` target's callable is handed (`Task`, `Tools`), the typed
  tool errors it can catch, and the claim helpers (`ToolClients`, the claim statuses).
- `assaygate.mcp`: what an MCP runner's agent needs (its proxy URL, claims, the `lines` loop).
- `assaygate.host`, `assaygate.mcp_host` (with `assaygate.frameworks`): the processes that serve
  a python target's callable and an MCP python/LangGraph/OpenAI Agents runner's agent; nobody
  imports them, they are here so that they import nothing of the service.

Standard library only, and nothing runs at import: a target's process imports this package and
none of the service (no web framework, no database driver), so a team's own package may be named
`service` or `worker`. Paths outside this package are Assaygate's internals and may move; names
here are deprecated for a release before they are removed (docs/targets.md, "The stable interface").
"""

from __future__ import annotations
