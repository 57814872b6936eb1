"""`oxiedge queues|exchanges|bindings|status` against a live server."""

from __future__ import annotations

import json
from typing import Any

import pika

from tests.amqp.conftest import params


def rows(srv: Any, *cmd: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in srv.cli(*cmd, "--json").stdout.splitlines() if line]


def test_live_listings(server: Any) -> None:
    c = pika.BlockingConnection(params(server.amqp_port))
    ch = c.channel()
    ch.queue_declare("orders", durable=True)
    ch.exchange_declare("shop", "topic", durable=True)
    ch.queue_bind("orders", "shop", "order.*")
    for _ in range(3):
        ch.basic_publish("shop", "order.new", b"o")
    ch.basic_qos(prefetch_count=1)
    ch.basic_consume("orders", lambda *a: None)
    c.process_data_events(time_limit=0.3)

    queues = {r["name"]: r for r in rows(server, "queues")}
    q = queues["orders"]
    assert (q["durable"], q["ready"], q["unacked"], q["consumers"], q["dropped"]) == \
        (True, 2, 1, 1, 0)
    exchanges = {r["name"]: r for r in rows(server, "exchanges")}
    assert {"", "amq.direct", "amq.fanout", "amq.topic", "shop"} <= set(exchanges)
    assert exchanges["shop"]["type"] == "topic" and exchanges["shop"]["durable"]
    binds = rows(server, "bindings")
    assert {"exchange": "shop", "queue": "orders", "routing_key": "order.*",
            "durable": True} in binds
    status = server.cli("status", "--json").stdout
    assert "amqp" in status and "published" in status
    table = server.cli("queues").stdout
    assert "orders" in table
    c.close()
