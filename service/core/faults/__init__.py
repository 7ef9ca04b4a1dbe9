"""What can go wrong: the disturbance registry, the versioned catalogues and the one an `mcp`
tool contract implies, the plan that picks faults, and the injector that arms them and leaves
receipts. Above `system`."""
