"""What a team declares: the manifest and its hashes, the tool contract and invariants of an `mcp`
target, the controls, where a target is, what a manifest executes and may reach, and the rules its
text, numbers and secret names follow. The lowest room: it imports only `service.core.errors`."""
