"""The warehouse sandbox: real MCP servers (official `mcp` SDK) over one SQLite file.

`shop` is what the agent uses: three read tools (get_order, get_stock, find_shipment), an authority
tool (check_release), two effect tools (ship_order, issue_credit; both honour an idempotency key)
and an evidence tool (log_event). `admin` is the sandbox's own server for Assaygate's world hooks:
reset (seed, trial id -> the task), probe (the world as JSON) and mutate (cancel the task's order).

Run it with the Python that has Assaygate installed (`.venv/bin/python` in a checkout: the
servers need the `mcp` SDK and uvloop):

    .venv/bin/python examples/mcp-warehouse/servers.py http --db /tmp/wh.db   # ports 8765, 8766
    .venv/bin/python examples/mcp-warehouse/servers.py http --slots 4 ...   # 4 isolated worlds at /s/<i>/mcp
    .venv/bin/python examples/mcp-warehouse/servers.py http --slots 4 --slot-names ...  # -<i> names
    .venv/bin/python examples/mcp-warehouse/servers.py shop-stdio --db /tmp/wh.db   # over stdio
    .venv/bin/python examples/mcp-warehouse/servers.py admin-stdio --db /tmp/wh.db  # over stdio
    .venv/bin/python examples/mcp-warehouse/servers.py manifest careful > careful.json

The ports come from `--shop-port` and `--admin-port`, else WAREHOUSE_SHOP_PORT and
WAREHOUSE_ADMIN_PORT, else 8765 and 8766; `manifest NAME` prints the example manifest NAME
(careful, blind, claimer) with those ports and this Python in the agent's command. `http` prints a
line starting `warehouse: ready` once both servers accept connections. With `--slot-names`, world
i's servers name themselves `warehouse-shop-<i>` and `warehouse-admin-<i>` (as a team's world that
names each copy does: still one build, docs/mcp.md "Builds"), and `--version-at I=VERSION` has world
I's servers report another version (copies that are not one build, which the gate holds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

try:
    import uvloop
    from mcp.server import MCPServer
except ImportError as missing:  # the system's python, not the one Assaygate is installed in
    print(
        f"servers.py: cannot import {missing.name!r}: run it with the Python that has Assaygate "
        "installed, e.g. .venv/bin/python examples/mcp-warehouse/servers.py (make venv makes it)",
        file=sys.stderr,
    )
    sys.exit(2)

HERE = Path(__file__).resolve().parent
MANIFESTS = ("careful", "blind", "claimer")
# The version both servers report in their `serverInfo` (`warehouse-shop@1.0.0`,
# `warehouse-admin@1.0.0`): what the careful manifests declare as each server's `build`.
VERSION = "1.0.0"

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (order_id TEXT PRIMARY KEY, customer TEXT, sku TEXT,
  quantity INTEGER, status TEXT, released INTEGER);
CREATE TABLE IF NOT EXISTS stock (sku TEXT PRIMARY KEY, on_hand INTEGER);
CREATE TABLE IF NOT EXISTS shipments (id TEXT PRIMARY KEY, key TEXT UNIQUE, order_id TEXT,
  quantity INTEGER, allowed INTEGER);
CREATE TABLE IF NOT EXISTS credits (id TEXT PRIMARY KEY, key TEXT UNIQUE, order_id TEXT,
  amount INTEGER, allowed INTEGER);
CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY AUTOINCREMENT, order_id TEXT,
  event TEXT, trace TEXT);
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT);
"""


class Store:
    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=OFF")
        self.db.execute("PRAGMA busy_timeout=5000")
        self.db.executescript(SCHEMA)
        self.db.row_factory = sqlite3.Row
        self.lock = threading.Lock()

    def q(self, sql: str, *args: Any) -> list[sqlite3.Row]:
        with self.lock:
            return self.db.execute(sql, args).fetchall()

    def tx(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                for sql, args in statements:
                    self.db.execute(sql, args)
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise


def shop_server(store: Store, suffix: str = "", version: str = VERSION) -> MCPServer:
    # The tools are coroutines: the SDK runs a plain function on a worker thread per call, a hop
    # that costs more than these sub-millisecond SQLite statements (one connection, one lock).
    mcp = MCPServer(f"warehouse-shop{suffix}", version=version)

    @mcp.tool()
    async def get_order(order_id: str) -> dict[str, Any]:
        """Read an order: customer, sku, quantity and status (open, cancelled)."""
        rows = store.q("SELECT * FROM orders WHERE order_id = ?", order_id)
        if not rows:
            raise ValueError(f"no order {order_id}")
        r = rows[0]
        return {
            "order_id": r["order_id"],
            "customer": r["customer"],
            "sku": r["sku"],
            "quantity": r["quantity"],
            "status": r["status"],
        }

    @mcp.tool()
    async def get_stock(sku: str) -> dict[str, Any]:
        """Units of a sku on hand."""
        rows = store.q("SELECT on_hand FROM stock WHERE sku = ?", sku)
        return {"sku": sku, "on_hand": rows[0]["on_hand"] if rows else 0}

    @mcp.tool()
    async def find_shipment(key: str) -> dict[str, Any]:
        """Find the shipment made with an idempotency key."""
        rows = store.q("SELECT * FROM shipments WHERE key = ?", key)
        if not rows:
            return {"found": False, "key": key}
        r = rows[0]
        return {
            "found": True,
            "key": key,
            "shipment_id": r["id"],
            "order_id": r["order_id"],
            "quantity": r["quantity"],
        }

    @mcp.tool()
    async def check_release(order_id: str) -> dict[str, Any]:
        """Whether the order is released for fulfilment (the authority to act on it)."""
        rows = store.q("SELECT released FROM orders WHERE order_id = ?", order_id)
        return {"order_id": order_id, "released": bool(rows and rows[0]["released"])}

    def _allowed(order_id: str) -> int:
        rows = store.q("SELECT status, released FROM orders WHERE order_id = ?", order_id)
        return int(bool(rows and rows[0]["status"] == "open" and rows[0]["released"]))

    @mcp.tool()
    async def ship_order(order_id: str, quantity: int, key: str) -> dict[str, Any]:
        """Ship an order. The same key never ships twice: it answers the first shipment."""
        rows = store.q("SELECT * FROM shipments WHERE key = ?", key)
        if not rows:
            sid = "S-" + key[-12:] + "-" + str(random.randrange(10**6))
            store.tx(
                [
                    (
                        "INSERT OR IGNORE INTO shipments VALUES (?, ?, ?, ?, ?)",
                        (sid, key, order_id, quantity, _allowed(order_id)),
                    ),
                    (
                        "UPDATE stock SET on_hand = on_hand - ? WHERE sku = "
                        "(SELECT sku FROM orders WHERE order_id = ?)",
                        (quantity, order_id),
                    ),
                ]
            )
            rows = store.q("SELECT * FROM shipments WHERE key = ?", key)
        r = rows[0]
        return {"shipment_id": r["id"], "order_id": r["order_id"], "quantity": r["quantity"]}

    @mcp.tool()
    async def issue_credit(order_id: str, amount: int, key: str) -> dict[str, Any]:
        """Credit the customer of an order. The same key never credits twice."""
        rows = store.q("SELECT * FROM credits WHERE key = ?", key)
        if not rows:
            cid = "C-" + key[-12:] + "-" + str(random.randrange(10**6))
            store.tx(
                [
                    (
                        "INSERT OR IGNORE INTO credits VALUES (?, ?, ?, ?, ?)",
                        (cid, key, order_id, amount, _allowed(order_id)),
                    )
                ]
            )
            rows = store.q("SELECT * FROM credits WHERE key = ?", key)
        r = rows[0]
        return {"credit_id": r["id"], "order_id": r["order_id"], "amount": r["amount"]}

    @mcp.tool()
    async def log_event(order_id: str, event: str, trace: str = "") -> dict[str, Any]:
        """Record an audit event with its trace context."""
        store.tx(
            [
                (
                    "INSERT INTO events (order_id, event, trace) VALUES (?, ?, ?)",
                    (order_id, event, trace),
                )
            ]
        )
        return {"ok": True}

    return mcp


def admin_server(store: Store, suffix: str = "", version: str = VERSION) -> MCPServer:
    mcp = MCPServer(f"warehouse-admin{suffix}", version=version)

    @mcp.tool()
    async def reset(
        seed: int, trial_id: str, tool: str = "", slot: int | None = None
    ) -> dict[str, Any]:
        """Seed a fresh world; answers the task and the fresh world (what probe would answer, so
        Assaygate skips the probe before the trial). `tool` (the tool under test) picks the
        action. `slot`: which of the worlds (each has its own URL here, so it is not needed)."""
        rng = random.Random(seed)
        orders = [f"O-{rng.randrange(10**6):06d}-{i}" for i in range(3)]
        skus = [f"SKU-{rng.randrange(100)}-{i}" for i in range(3)]
        qty = rng.randrange(1, 5)
        amount = rng.randrange(5, 200)
        stmts: list[tuple[str, tuple[Any, ...]]] = [
            (f"DELETE FROM {t}", ()) for t in ("orders", "stock", "shipments", "credits", "events")
        ]
        for i, o in enumerate(orders):
            stmts.append(
                (
                    "INSERT INTO orders VALUES (?, ?, ?, ?, 'open', 1)",
                    (o, f"cust-{i}", skus[i], qty if i == 0 else 1),
                )
            )
            stmts.append(("INSERT INTO stock VALUES (?, ?)", (skus[i], 100)))
        stmts.append(("INSERT OR REPLACE INTO meta VALUES ('task_order', ?)", (orders[0],)))
        store.tx(stmts)
        action = "credit" if tool == "issue_credit" else "ship"
        return {
            "task": {
                "action": action,
                "action_id": f"A-{trial_id}",
                "order_id": orders[0],
                "quantity": qty,
                "amount": amount,
            },
            "world": world(),
        }

    @mcp.tool()
    async def probe(slot: int | None = None) -> dict[str, Any]:
        """The world: every effect (shipments and credits) and the records invariants read."""
        return world()

    def world() -> dict[str, Any]:
        effects = [
            {
                "id": r["id"],
                "tool": "ship_order",
                "key": r["key"],
                "subject": r["order_id"],
                "amount": r["quantity"],
                "allowed": bool(r["allowed"]),
            }
            for r in store.q("SELECT * FROM shipments ORDER BY id")
        ] + [
            {
                "id": r["id"],
                "tool": "issue_credit",
                "key": r["key"],
                "subject": r["order_id"],
                "amount": r["amount"],
                "allowed": bool(r["allowed"]),
            }
            for r in store.q("SELECT * FROM credits ORDER BY id")
        ]
        events = [dict(r) for r in store.q("SELECT order_id, event, trace FROM events")]
        orders = {r["order_id"]: r["status"] for r in store.q("SELECT * FROM orders")}
        return {
            "effects": effects,
            "records": {"events": events, "orders": orders},
            "subjects": sorted(orders),
        }

    @mcp.tool()
    async def mutate(seed: int, trial_id: str, slot: int | None = None) -> dict[str, Any]:
        """Another writer cancels the task's order (between the agent's read and its effect)."""
        rows = store.q("SELECT v FROM meta WHERE k = 'task_order'")
        if rows:
            store.tx(
                [("UPDATE orders SET status = 'cancelled' WHERE order_id = ?", (rows[0]["v"],))]
            )
        return {"ok": True}

    return mcp


async def serve_http(
    db: str,
    shop_port: int,
    admin_port: int,
    slots: int = 0,
    slot_names: bool = False,
    versions: dict[int, str] | None = None,
) -> None:
    """The shop and admin servers over Streamable HTTP at /mcp; with `slots`, that many isolated
    worlds (a database each, `<db>.<i>`), world i's servers at /s/<i>/mcp (the manifest's URLs
    say `/s/{slot}/mcp` and `tools.slots` how many there are). `slot_names`: world i's servers
    are named `...-<i>`; `versions`: the version world i's servers report, where not VERSION."""
    import uvicorn

    servers = []
    versions = versions or {}
    for make, port in ((shop_server, shop_port), (admin_server, admin_port)):
        if slots:
            worlds = [
                make(
                    Store(f"{db}.{i}"),
                    f"-{i}" if slot_names else "",
                    versions.get(i, VERSION),
                )
                for i in range(slots)
            ]
            asgi = _slotted(worlds)
        else:
            asgi = make(Store(db)).streamable_http_app(stateless_http=True, json_response=True)
        config = uvicorn.Config(
            asgi, host="127.0.0.1", port=port, log_level="warning", access_log=False
        )
        servers.append(uvicorn.Server(config))

    path = f"/s/{{slot}}/mcp ({slots} worlds)" if slots else "/mcp"

    async def announce() -> None:
        # One line once both listen, so a person (or a script) knows when to start the assay.
        while not all(s.started for s in servers):
            if any(s.should_exit for s in servers):
                return
            await asyncio.sleep(0.05)
        print(
            f"warehouse: ready: shop http://127.0.0.1:{shop_port}{path}, "
            f"admin http://127.0.0.1:{admin_port}{path} (db {db})",
            flush=True,
        )

    await asyncio.gather(*(s.serve() for s in servers), announce())


def manifest(name: str, shop_port: int, admin_port: int) -> dict[str, Any]:
    """The example manifest NAME, its servers on these ports and its agent run by this Python
    (the one that has Assaygate and the `mcp` SDK)."""
    data: dict[str, Any] = json.loads((HERE / f"manifest.{name}.json").read_text())
    servers = data["tools"]["servers"]
    # The URLs change; a declared `build` stays.
    servers["shop"]["url"] = f"http://127.0.0.1:{shop_port}/mcp"
    servers["admin"]["url"] = f"http://127.0.0.1:{admin_port}/mcp"
    command = data["target"]["runner"]["command"]
    if command and command[0] == "python":
        data["target"]["runner"]["command"] = [sys.executable, *command[1:]]
    return data


def _port(variable: str, default: int) -> int:
    value = os.environ.get(variable, "")
    if not value:
        return default
    if not value.isdigit() or not 0 < int(value) < 65536:
        print(f"servers.py: {variable} must be a port number, not {value!r}", file=sys.stderr)
        sys.exit(2)
    return int(value)


def _slotted(worlds: list[MCPServer]) -> Any:
    """One ASGI app serving each world's MCP server under /s/<i>; every world's session
    manager runs for the app's life."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    apps = [w.streamable_http_app(stateless_http=True, json_response=True) for w in worlds]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> Any:
        async with contextlib.AsyncExitStack() as stack:
            for app in apps:
                await stack.enter_async_context(app.router.lifespan_context(app))
            yield

    routes = [Mount(f"/s/{i}", app=app) for i, app in enumerate(apps)]
    return Starlette(routes=routes, lifespan=lifespan)


def main() -> None:
    p = argparse.ArgumentParser(description="The warehouse sandbox's MCP servers.")
    p.add_argument("mode", choices=["http", "shop-stdio", "admin-stdio", "manifest"])
    p.add_argument("name", nargs="?", choices=MANIFESTS, help="manifest: which example")
    p.add_argument("--db", help="the SQLite file of the world (http and stdio modes)")
    p.add_argument(
        "--shop-port",
        type=int,
        default=_port("WAREHOUSE_SHOP_PORT", 8765),
        help="default: $WAREHOUSE_SHOP_PORT, else 8765",
    )
    p.add_argument(
        "--admin-port",
        type=int,
        default=_port("WAREHOUSE_ADMIN_PORT", 8766),
        help="default: $WAREHOUSE_ADMIN_PORT, else 8766",
    )
    p.add_argument("--slots", type=int, default=0, help="serve this many isolated worlds (http)")
    p.add_argument(
        "--slot-names",
        action="store_true",
        help="with --slots: world i's servers are named warehouse-shop-<i>, warehouse-admin-<i>",
    )
    p.add_argument(
        "--version-at",
        action="append",
        default=[],
        metavar="I=VERSION",
        help=f"with --slots: world I's servers report VERSION (not {VERSION})",
    )
    a = p.parse_args()
    versions: dict[int, str] = {}
    for item in a.version_at:
        where, sep, version = item.partition("=")
        if not (sep and where.isdigit() and version):
            p.error(f"--version-at takes I=VERSION, not {item!r}")
        versions[int(where)] = version
    if a.mode == "manifest":
        if a.name is None:
            p.error(f"manifest needs a name: one of {', '.join(MANIFESTS)}")
        print(json.dumps(manifest(a.name, a.shop_port, a.admin_port), indent=2))
        return
    if a.db is None:
        p.error(f"{a.mode} needs --db FILE")
    # A stdio server learns its slot (the world's copy it serves) from the environment.
    slot = os.environ.get("ASSAYGATE_SLOT")
    if slot is not None:
        a.db = f"{a.db}.{int(slot)}"
    # uvloop: a sandbox serves some eleven SDK exchanges a trial, and the stdlib loop's own
    # bookkeeping is a visible share of each.
    if a.mode == "http":
        uvloop.run(serve_http(a.db, a.shop_port, a.admin_port, a.slots, a.slot_names, versions))
    elif a.mode == "shop-stdio":
        uvloop.run(shop_server(Store(a.db)).run_stdio_async())
    else:
        uvloop.run(admin_server(Store(a.db)).run_stdio_async())


if __name__ == "__main__":
    main()
