"""Warehouse agents that differ only in how often they read stock.

once     the careful agent, reading each order's stock once (a later read of the same sku is
         answered from what it read): a fault that fires on a second read cannot reach it
dodger   reads once in its odd-numbered runs and twice in its even ones (a count kept in the
         file it is given): the intervention, its first run of a trial, dodges the fault,
         while its matched baseline, its second, would have met it

python readers.py once|dodger [COUNT_FILE]
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "mcp-warehouse"))

from agents import careful, connect


class ReadsOnce:
    """A client that asks for each sku's stock once and answers later reads from the first."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.stock: dict[str, Any] = {}

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        if name != "get_stock":
            return await self.client.call_tool(name, arguments)
        sku = str(arguments.get("sku"))
        if sku not in self.stock:
            self.stock[sku] = await self.client.call_tool(name, arguments)
        return self.stock[sku]


def runs_so_far(path: Path) -> int:
    n = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(n))
    return n


async def main(name: str, count_file: str | None) -> dict[str, Any]:
    task = json.loads(sys.stdin.read())
    once = name == "once" or (count_file is not None and runs_so_far(Path(count_file)) % 2 == 1)
    async with connect(os.environ["ASSAYGATE_MCP_URL"]) as client:
        return await careful(ReadsOnce(client) if once else client, task)


if __name__ == "__main__":
    claim = asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
    print(json.dumps(claim), flush=True)
