"""Exit codes and the one error the commands raise for bad input (one line, exit code 2).

`EXIT_CODES` is the one table of what each command's exit code means; `build_parser` prints it at
the end of every command's `--help`, so the help and the code cannot disagree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.core.errors import TargetUnsupported
    from service.core.system.manifest import Manifest


class UsageError(Exception):
    """Bad command-line input: one line, exit code 2."""


DECISION_EXIT = {"allow": 0, "block": 1, "hold": 2, "reopened": 2}
EXIT_ERROR = 3
#: `gate --artifact`: allow, on an assurance weaker than `executed` that the organisation's policy
#: accepts (`accept_assurance`). Not 0, so a pipeline deploys on it only by saying so.
EXIT_ACCEPTED = 4
#: `gate`: the gate knows no candidate for what it was asked (an unknown system or version, or a
#: digest no candidate ships): nothing to decide on, and nothing a retry mends, unlike 3.
EXIT_UNKNOWN = 5
#: Commands whose exit code a pipeline reads as a decision: any error there is 3, never 2.
CI_COMMANDS = ("assay", "submit", "gate")

_DECISION = (
    (0, "allow"),
    (1, "block"),
    (2, "hold or reopened"),
    (3, "error: bad input, an unreachable service, a refused request, a failed assay or a timeout"),
)
_DONE = (
    (0, "done"),
    (2, "error: bad input, or the database or service could not be used (one line on stderr)"),
)

#: What each command's exit code means, by command path ("keys create"); the longest path that
#: names a command wins, and a command not listed exits as `_DONE` says.
EXIT_CODES: dict[str, tuple[tuple[int, str], ...]] = {
    **{command: _DECISION for command in CI_COMMANDS},
    # Without --wait nothing is decided yet: 0 says only that the service took the candidate.
    "submit": (
        (
            0,
            "allow with --wait; without --wait, the candidate was accepted (decided later: "
            "`assaygate gate` or the dashboard)",
        ),
        *_DECISION[1:],
    ),
    "gate": (
        *_DECISION,
        (
            EXIT_ACCEPTED,
            "allow with --artifact, on an artifact assurance weaker than executed (declared: "
            "code the gate never ran) that the organisation's policy accepts; the line says so",
        ),
        (
            EXIT_UNKNOWN,
            "the gate knows no candidate for what was asked: an unknown system or version, or "
            "an artifact no candidate ships (submit it first)",
        ),
    ),
    # A request the service refused prints its JSON error and exits 3 (service.cli.common.refused).
    "secrets": (
        _DONE[0],
        (2, "error: bad input, or the service could not be reached (one line on stderr)"),
        (3, "the service refused the request (its JSON error on stdout: a 4xx or 5xx)"),
    ),
    "verify": ((0, "verified"), (1, "not verified (the failed check is printed)"), _DONE[1]),
    "db check": ((0, "the models match the migrations"), (1, "a migration is missing"), _DONE[1]),
    "demo": ((0, "every candidate decided"), (1, "a candidate undecided in time"), _DONE[1]),
    "serve": ((0, "stopped (Ctrl-C or SIGTERM)"), _DONE[1]),
    "webhooks": (
        (0, "done"),
        (2, "bad input, or the service could not be reached (one line on stderr)"),
        (3, "the service refused the request (its JSON error is printed)"),
    ),
}


def exit_codes(command: str) -> tuple[tuple[int, str], ...]:
    words = command.split()
    while words:
        found = EXIT_CODES.get(" ".join(words))
        if found is not None:
            return found
        words.pop()
    return _DONE


def exit_codes_text(command: str) -> str:
    """The `--help` epilogue: one line per exit code."""
    return "exit codes:\n" + "\n".join(f"  {code}  {text}" for code, text in exit_codes(command))


def mcp_start_failed(manifest: Manifest, exc: BaseException) -> TargetUnsupported:
    """An mcp target that could not start (its servers down): one line naming what the manifest
    points at, not the MCP client's task-group traceback."""
    # Imported here: this module is read by every command's `--help`.
    from service.core.errors import TargetUnsupported
    from service.core.system.contract import parse_contract

    servers = ", ".join(
        f"{name} {server.url or ' '.join(server.command or ())}"
        for name, server in sorted(parse_contract(manifest.tools).servers.items())
    )
    return TargetUnsupported(
        f"cannot start the mcp target: {_first_cause(exc)} (servers: {servers}); are the "
        "team's servers running? (docs/mcp.md)",
        field="target",
    )


def _first_cause(exc: BaseException) -> str:
    """The innermost error of a (nested) exception group or chain, as one line."""
    from service.core.errors import causes

    leaf = next(
        (
            e
            for e in causes(exc)
            if not (isinstance(e, BaseExceptionGroup) and e.exceptions) and e.__cause__ is None
        ),
        exc,
    )
    return f"{type(leaf).__name__}: {leaf}".splitlines()[0]
