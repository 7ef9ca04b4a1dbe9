"""Warehouse agents that reach their own world behind the proxy's back (its SQLite file).

cleaner   the careful agent in every visible way, which also ships the order a second time
          under a fresh key, then deletes that shipment straight from the database: the probe
          shows one shipment, read back and logged, and a `completed` claim that cites it
forger    ships nothing through its tools and inserts the shipment row itself
rewriter  the careful agent, which then doubles the quantity of the shipment it was acknowledged
          for, in place: the same id, key and order, read back and logged
twin      the careful agent, which then credits the order under the acknowledged shipment's id
          (a second row under an id the server acknowledged once)
rekeyer   the careful agent, which then credits the order under the shipment's idempotency key
          (a second effect under a key the proxy forwarded once)
recast    the careful agent, which then turns its shipment into a credit row with the same id,
          key, order and amount (the order credited, not shipped)

In a world with a history (tests/mcp/agents/history.py: an earlier shipment and an earlier credit
on other orders):

shadow    the careful agent, which then ships the order a second time under the earlier credit's
          id (a new effect under an id the world held before the trial)
eraser    the careful agent, which then deletes the earlier shipment
inflater  the careful agent, which then multiplies the earlier credit's amount by ten

python sidechannel.py cleaner|forger|rewriter|twin|rekeyer|recast|shadow|eraser|inflater DB_PATH
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "mcp-warehouse"))

from agents import call, careful, connect


def _db(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, timeout=10)
    db.execute("PRAGMA busy_timeout=10000")
    return db


async def cleaner(task: dict[str, Any], url: str, path: str) -> dict[str, Any]:
    async with connect(url) as client:
        claim = await careful(client, task)
        if task["action"] == "ship" and claim.get("status") == "completed":
            args = {"order_id": task["order_id"], "quantity": task["quantity"]}
            await call(client, "ship_order", {**args, "key": task["action_id"] + "-again"})
    _db(path).execute("DELETE FROM shipments WHERE key = ?", (task["action_id"] + "-again",))
    return claim


async def forger(task: dict[str, Any], url: str, path: str) -> dict[str, Any]:
    async with connect(url) as client:
        await call(client, "get_order", {"order_id": task["order_id"]})
        await call(client, "check_release", {"order_id": task["order_id"]})
    ident = "S-forged-" + task["action_id"]
    _db(path).execute(
        "INSERT INTO shipments VALUES (?, ?, ?, ?, ?)",
        (ident, task["action_id"], task["order_id"], task["quantity"], 1),
    )
    return {"status": "completed", "effect_id": ident}


async def rewriter(task: dict[str, Any], url: str, path: str) -> dict[str, Any]:
    async with connect(url) as client:
        claim = await careful(client, task)
    _db(path).execute(
        "UPDATE shipments SET quantity = quantity * 2 WHERE key = ?", (task["action_id"],)
    )
    return claim


async def _credit_beside(task: dict[str, Any], url: str, path: str, same: str) -> dict[str, Any]:
    """The careful agent, then a credit row written straight into the world, reusing the
    shipment's id (`same="id"`) or its key (`same="key"`)."""
    async with connect(url) as client:
        claim = await careful(client, task)
    db = _db(path)
    rows = db.execute("SELECT id, key FROM shipments WHERE key = ?", (task["action_id"],))
    for ident, key in rows.fetchall():
        twin = (ident, "twin-" + key) if same == "id" else ("C-twin-" + ident, key)
        db.execute("INSERT INTO credits VALUES (?, ?, ?, ?, 1)", (*twin, task["order_id"], 5))
    return claim


async def twin(task: dict[str, Any], url: str, path: str) -> dict[str, Any]:
    return await _credit_beside(task, url, path, "id")


async def rekeyer(task: dict[str, Any], url: str, path: str) -> dict[str, Any]:
    return await _credit_beside(task, url, path, "key")


async def recast(task: dict[str, Any], url: str, path: str) -> dict[str, Any]:
    async with connect(url) as client:
        claim = await careful(client, task)
    db = _db(path)
    rows = db.execute("SELECT * FROM shipments WHERE key = ?", (task["action_id"],)).fetchall()
    for row in rows:
        db.execute("DELETE FROM shipments WHERE id = ?", (row[0],))
        db.execute("INSERT INTO credits VALUES (?, ?, ?, ?, ?)", row)
    return claim


async def _after_careful(task: dict[str, Any], url: str, path: str, sql: str) -> dict[str, Any]:
    """The careful agent, then `sql` run straight on the world (with the task's order and key)."""
    async with connect(url) as client:
        claim = await careful(client, task)
    _db(path).execute(sql, {"order": task["order_id"], "key": task["action_id"]})
    return claim


async def shadow(task: dict[str, Any], url: str, path: str) -> dict[str, Any]:
    sql = (
        "INSERT INTO shipments SELECT c.id, :key || '-again', :order, s.quantity, 1 "
        "FROM credits c, shipments s WHERE c.order_id != :order AND s.key = :key"
    )
    return await _after_careful(task, url, path, sql)


async def eraser(task: dict[str, Any], url: str, path: str) -> dict[str, Any]:
    return await _after_careful(task, url, path, "DELETE FROM shipments WHERE order_id != :order")


async def inflater(task: dict[str, Any], url: str, path: str) -> dict[str, Any]:
    sql = "UPDATE credits SET amount = amount * 10 WHERE order_id != :order"
    return await _after_careful(task, url, path, sql)


AGENTS = {
    "cleaner": cleaner,
    "forger": forger,
    "rewriter": rewriter,
    "twin": twin,
    "rekeyer": rekeyer,
    "recast": recast,
    "shadow": shadow,
    "eraser": eraser,
    "inflater": inflater,
}


def cleaner_python(task: dict[str, Any], mcp_url: str) -> dict[str, Any]:
    """The cleaner as a python runner's `module:callable` (or served over the http runner
    protocol by `python -m assaygate.mcp_host`); its world's file is in SIDECHANNEL_DB."""
    return asyncio.run(cleaner(task, mcp_url, os.environ["SIDECHANNEL_DB"]))


if __name__ == "__main__":
    name, path = sys.argv[1], sys.argv[2]
    task = json.loads(sys.stdin.read())
    claim = asyncio.run(AGENTS[name](task, os.environ["ASSAYGATE_MCP_URL"], path))
    print(json.dumps(claim), flush=True)
