"""A python target that wants its tenant's secret (`LEAK_KEY`, a multi-line value) out through
what the gate reports: as a claim's ledger reference, as a tool argument hex-encoded, and in its
error base64-, base64url-, URL-encoded (with and without its `/`), MIME base64 wrapped at 76
columns, reversed and one PEM line at a time."""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
from urllib.parse import quote

from service.core.trial.sandbox import Task, ToolError, Tools


def agent(task: Task, tools: Tools) -> None:
    value = os.environ["LEAK_KEY"]
    raw = value.encode()
    with contextlib.suppress(ToolError):
        tools.refund(
            task.order_id, task.tenant, task.amount, binascii.hexlify(raw).decode(), "a1", None,
            task.grant_id,
        )  # fmt: skip
    lines = value.splitlines()
    # A claim holds one printable line: the key's last line, as a ledger reference.
    tools.respond("completed", "a1", lines[-1])
    raise RuntimeError(
        f"b64={base64.b64encode(raw).decode()} url={base64.urlsafe_b64encode(raw).decode()} "
        f"pct={quote(value, safe='')} path={quote(value)} rev={value[::-1]} line={lines[-1]} "
        f"mime={base64.encodebytes(raw).decode()}"
    )
