"""A careful warehouse agent that reports usage a budget cannot count.

negative  the run's usage with a negative cost (an agent that "refunds" itself budget)
string    the run's usage with tokens as a string

python usage.py negative|string   (the task on stdin, the proxy in ASSAYGATE_MCP_URL)
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "mcp-warehouse"))

from agents import careful, connect, metered

BAD: dict[str, dict[str, Any]] = {
    "negative": {"tokens": 40, "cost": -0.5},
    "string": {"tokens": "40", "cost": 0.001},
}


async def main(name: str) -> None:
    task = json.loads(sys.stdin.read())
    async with connect(os.environ["ASSAYGATE_MCP_URL"]) as client:
        claim = await metered(careful, client, task)
    claim["usage"] = BAD[name]
    print(json.dumps(claim), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
