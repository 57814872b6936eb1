"""`oxiedge queues|exchanges|bindings|status` against a live server."""

from __future__ import annotations

import json
from typing import Any

import pika

from tests.amqp.conftest import cli_rows, params, wait_until


def test_live_listings(server: Any) -> None:
    c = pika.BlockingConnection(params(server.amqp_port))
    ch = c.channel()
    ch.queue_declare("orders", durable=True)
    ch.exchange_declare("shop", "topic", durable=True)
    ch.queue_bind("orders", "shop", "order.*")
    for _ in range(3):
        ch.basic_publish("shop", "order.new", b"o")
    ch.basic_qos(prefetch_count=1)
    # consume-ok is sent by the handler that also dispatches: the server state is settled
    ch.basic_consume("orders", lambda *a: None)

    queues = {r["name"]: r for r in cli_rows(server, "queues")}
    q = queues["orders"]
    assert (q["durable"], q["ready"], q["unacked"], q["consumers"], q["dropped"]) == \
        (True, 2, 1, 1, 0)
    exchanges = {r["name"]: r for r in cli_rows(server, "exchanges")}
    assert {"", "amq.direct", "amq.fanout", "amq.topic", "shop"} <= set(exchanges)
    assert exchanges["shop"]["type"] == "topic" and exchanges["shop"]["durable"]
    binds = cli_rows(server, "bindings")
    assert {"exchange": "shop", "queue": "orders", "routing_key": "order.*",
            "durable": True} in binds
    status = server.cli("status", "--json").stdout
    assert "amqp" in status and "published" in status
    table = server.cli("queues").stdout
    assert "orders" in table
    c.close()


def test_unacked_bounded_without_prefetch(start_server: Any) -> None:
    srv = start_server("--amqp-queue-limit", "5")
    c = pika.BlockingConnection(params(srv.amqp_port))
    ch = c.channel()
    ch.queue_declare("nolimit")
    got: list[bytes] = []
    ch.basic_consume("nolimit", lambda c_, m, p, b: got.append(b))  # no qos, never acks
    for i in range(8):
        ch.basic_publish("", "nolimit", b"%d" % i)
    ch.queue_declare("nolimit", passive=True)  # round trip: all 8 publishes handled
    wait_until(c, lambda: len(got) == 5)
    q = next(r for r in cli_rows(srv, "queues") if r["name"] == "nolimit")
    assert (q["ready"], q["unacked"], q["dropped"]) == (3, 5, 0)
    c.close()


def test_status_counters_move(server: Any) -> None:
    def amqp_status() -> dict[str, Any]:
        doc = json.loads(server.cli("status", "--json").stdout)
        return doc["amqp"] if "amqp" in doc else {k[5:]: v for k, v in doc.items()
                                                  if k.startswith("amqp.")}

    before = amqp_status()
    c = pika.BlockingConnection(params(server.amqp_port))
    ch = c.channel()
    ch.queue_declare("counted")
    ch.basic_publish("", "counted", b"1")
    ch.basic_publish("amq.direct", "nowhere", b"2")
    m, _p, _b = ch.basic_get("counted")
    ch.basic_ack(m.delivery_tag)
    ch.queue_declare("counted", passive=True)
    after = amqp_status()
    c.close()
    assert after["published"] - before["published"] == 2
    assert after["unroutable"] - before["unroutable"] == 1
    assert after["delivered"] - before["delivered"] == 1
    assert after["acked"] - before["acked"] == 1
