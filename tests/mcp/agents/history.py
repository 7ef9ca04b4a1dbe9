"""The warehouse's admin server for a world with a history: its reset seeds the example's fresh
world, then an earlier shipment and an earlier credit on the other two orders, so the world before
each trial already holds effects the agent must leave alone (the example's reset leaves none).
It answers only the task: Assaygate probes the world before the trial itself.

python history.py --db DB   (a stdio admin server over the example's SQLite world)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import uvloop
from mcp.server import MCPServer

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "mcp-warehouse"))

from servers import Store, admin_server

# The earlier effects' ids, keys and amounts (the trial's seed makes each world's its own).
EARLIER_SHIPMENT = "S-earlier-{seed}"
EARLIER_CREDIT = "C-earlier-{seed}"
EARLIER_AMOUNT = 7


def historic_admin(store: Store) -> MCPServer:
    fresh = admin_server(store)
    mcp = admin_server(store)
    mcp.remove_tool("reset")

    @mcp.tool()
    async def reset(
        seed: int, trial_id: str, tool: str = "", slot: int | None = None
    ) -> dict[str, Any]:
        """Seed a fresh world with an earlier shipment and an earlier credit; answers the task."""
        result = await fresh.call_tool("reset", {"seed": seed, "trial_id": trial_id, "tool": tool})
        task: dict[str, Any] = result.structured_content["task"]  # type: ignore[union-attr,index]
        others = store.q(
            "SELECT order_id FROM orders WHERE order_id != ? ORDER BY order_id", task["order_id"]
        )
        shipment, credit = EARLIER_SHIPMENT.format(seed=seed), EARLIER_CREDIT.format(seed=seed)
        store.tx(
            [
                (
                    "INSERT INTO shipments VALUES (?, ?, ?, ?, 1)",
                    (shipment, "K-" + shipment, others[0]["order_id"], 1),
                ),
                (
                    "INSERT INTO credits VALUES (?, ?, ?, ?, 1)",
                    (credit, "K-" + credit, others[1]["order_id"], EARLIER_AMOUNT),
                ),
            ]
        )
        return {"task": task}

    return mcp


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    a = p.parse_args()
    uvloop.run(historic_admin(Store(a.db)).run_stdio_async())
