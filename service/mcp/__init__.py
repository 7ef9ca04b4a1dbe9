"""The MCP engine: a team's own agent assayed through Assaygate's MCP proxy.

`proxy` serves the agent (Streamable HTTP at a per-trial URL, or stdio through `assaygate
mcp-proxy`) and forwards to the team's sandbox servers, applying faults by the tool's role from the
contract; `hooks` resets and probes the team's world; `cel` compiles and evaluates the invariants;
`runners` start the agent for a trial; `naive` is the contract-derived naive agent of the
sensitivity pair; `engine` runs and grades whole trials for the core's harness.
"""
