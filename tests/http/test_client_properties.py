"""``client_properties`` in ``/api/connections``: what a real pika client sent in start-ok,
kept bounded (amqp/client_properties.py) however large or nested the table is."""

from __future__ import annotations

import json
from typing import Any

import pika

from tests.conftest import ServerProcess

ADMIN = ("admin", "admin-pw")


def _amqp(srv: ServerProcess, props: dict[str, Any]) -> pika.BlockingConnection:
    assert srv.amqp_port
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", srv.amqp_port, credentials=pika.PlainCredentials(*ADMIN),
        client_properties=props))


def test_pika_properties_and_connection_name(users_server: ServerProcess,
                                             client_for: Any) -> None:
    c = client_for(users_server)
    conn = _amqp(users_server, {"connection_name": "orders-worker-1"})
    try:
        rows = c.get("/api/connections", ADMIN).json()
        assert len(rows) == 1
        row = rows[0]
        props = row["client_properties"]
        assert props["connection_name"] == "orders-worker-1"
        assert row["user_provided_name"] == "orders-worker-1"
        assert props["product"] == "Pika Python Client Library"
        assert props["version"] == pika.__version__
        assert props["platform"].startswith("Python ")
        assert props["capabilities"]["consumer_cancel_notify"] is True
        assert props["capabilities"]["connection.blocked"] is True
        one = c.get(f"/api/connections/{row['name']}", ADMIN).json()
        assert one["client_properties"] == props
    finally:
        conn.close()


def test_hostile_table_stays_bounded(users_server: ServerProcess, client_for: Any) -> None:
    c = client_for(users_server)
    hostile: dict[str, Any] = {
        "connection_name": "é" * 5000,  # 2-byte characters: the cut must not split one
        "product": "p" * 20000,
        "information": {"nested": {"deeper": "x" * 1000}},  # not a string: dropped
        "copyright": ["a", "b"],
        "capabilities": {f"cap-{i}": True for i in range(300)} | {
            "nested": {"table": True}, "number": 7},
    }
    hostile |= {f"extra-{i}": "y" * 100 for i in range(100)}  # not one of the kept keys
    conn = _amqp(users_server, hostile)
    try:
        ch = conn.channel()  # the connection works as any other
        ch.queue_declare("after-hostile")
        row = c.get("/api/connections", ADMIN).json()[0]
        props = row["client_properties"]
        assert set(props) <= {"connection_name", "product", "version", "platform",
                              "information", "copyright", "capabilities"}
        assert props["connection_name"] == "é" * 128
        assert props["product"] == "p" * 256
        assert "information" not in props and "copyright" not in props
        caps = props["capabilities"]
        assert len(caps) <= 16 and all(v is True for v in caps.values())
        assert "nested" not in caps and "number" not in caps
        assert len(json.dumps(props).encode()) < 3 * 1024
        assert not any(k.startswith("extra-") for k in props)
    finally:
        conn.close()
