"""Exit codes and the one error the commands raise for bad input (one line, exit code 2)."""

from __future__ import annotations


class UsageError(Exception):
    """Bad command-line input: one line, exit code 2."""


DECISION_EXIT = {"allow": 0, "block": 1, "hold": 2, "reopened": 2}
EXIT_ERROR = 3
#: Commands whose exit code a pipeline reads as a decision: any error there is 3, never 2.
CI_COMMANDS = ("assay", "submit", "gate")
