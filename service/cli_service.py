"""Service commands of the `assaygate` CLI (serve, db, submit, ...)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    """Add the service subcommands to the top-level parser."""
    del sub
    _ = argparse
