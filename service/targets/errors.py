"""Failures of the system under test itself, as opposed to the faults Assaygate injects.

The harness records any exception a target raises as a per-trial target error, never a pass, so
these exist to make that record say what went wrong: unreachable, too slow, a server error, or a
reply that breaks the protocol.
"""

from __future__ import annotations


class TargetFailed(Exception):
    """The target could not run this trial; the trial is evidence of nothing but that."""


class TargetUnreachable(TargetFailed):
    """The connection to the agent was refused or dropped."""


class TargetTimeout(TargetFailed):
    """The agent did not answer the task within the adapter's wall-clock budget."""


class TargetServerError(TargetFailed):
    """The agent answered the task with a status other than 200."""


class TargetProtocolError(TargetFailed):
    """The agent's reply, claim or tool requests break the HTTP target protocol."""


class TargetRaised(TargetFailed):
    """The python target's callable raised an exception; the message names its type and text."""
