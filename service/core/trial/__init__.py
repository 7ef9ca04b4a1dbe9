"""One trial: the deterministic streams, the sandbox world and its tools, the storm, the target
seam and the built-in Copperfin target, the oracle that grades from the world alone, the record a
trial leaves, the engine seam and the harness that runs it. Above `faults`."""
