"""``POST /api/exchanges/%2F/X/publish`` and ``POST /api/queues/%2F/Q/get`` against a real
server: RabbitMQ's shapes, the ack modes, encodings and truncation, a real AMQP consumer
seeing what the API published, bad input and missing permissions."""

from __future__ import annotations

import base64
import json
from typing import Any

import pika
import pytest

from tests.conftest import ServerProcess

ADMIN = ("admin", "admin-pw")


def _post(c: Any, path: str, body: dict[str, Any], user: tuple[str, str] | None = ADMIN
          ) -> Any:
    return c.request("POST", path, user, json.dumps(body).encode())


def _get(c: Any, queue: str, **body: Any) -> list[dict[str, Any]]:
    r = _post(c, f"/api/queues/%2F/{queue}/get", {"count": 1, "ackmode": "ack_requeue_true",
                                                  "encoding": "auto", **body})
    assert r.status == 200, r.body
    out = r.json()
    assert isinstance(out, list)
    return out


def test_publish_then_get_in_rabbitmq_shapes(users_server: ServerProcess,
                                             client_for: Any) -> None:
    c = client_for(users_server)
    assert c.request("PUT", "/api/queues/%2F/jobs", ADMIN, b"{}").status == 201
    r = _post(c, "/api/exchanges/%2F/amq.default/publish", {
        "routing_key": "jobs", "payload": "héllo", "payload_encoding": "string",
        "properties": {"delivery_mode": 2, "content_type": "text/plain",
                       "headers": {"k": "v"}, "priority": 3}})
    assert r.status == 200 and r.json() == {"routed": True}
    raw = bytes([0xff, 0x00, 0x80])
    assert _post(c, "/api/exchanges/%2F/amq.default/publish", {
        "routing_key": "jobs", "payload": base64.b64encode(raw).decode(),
        "payload_encoding": "base64", "properties": {}}).json() == {"routed": True}
    r = _post(c, "/api/exchanges/%2F/amq.default/publish", {
        "routing_key": "nowhere", "payload": "x", "payload_encoding": "string",
        "properties": {}})
    assert r.status == 200 and r.json() == {"routed": False}

    # ack_requeue_true: peek, the messages stay (now redelivered)
    first = _get(c, "jobs", count=5)
    assert [m["payload_encoding"] for m in first] == ["string", "base64"]
    assert first[0] == {"payload_bytes": 6, "redelivered": False, "exchange": "",
                        "routing_key": "jobs", "message_count": 1,
                        "properties": {"content_type": "text/plain", "headers": {"k": "v"},
                                       "delivery_mode": 2, "priority": 3},
                        "payload": "héllo", "payload_encoding": "string"}
    assert base64.b64decode(first[1]["payload"]) == raw
    assert first[1]["properties"]["delivery_mode"] == 1  # transient, as RabbitMQ
    again = _get(c, "jobs", count="2", encoding="base64", truncate=2)
    assert [m["redelivered"] for m in again] == [True, True]
    assert again[0]["payload_encoding"] == "base64"
    assert base64.b64decode(again[0]["payload"]) == "héllo".encode()[:2]
    assert again[0]["payload_bytes"] == 6
    # ack_requeue_false takes the head; reject_requeue_true leaves the rest
    assert _get(c, "jobs", ackmode="ack_requeue_false")[0]["payload"] == "héllo"
    assert len(_get(c, "jobs", ackmode="reject_requeue_true")) == 1
    assert c.get("/api/queues/%2F/jobs", ADMIN).json()["messages_ready"] == 1
    assert len(_get(c, "jobs", ackmode="reject_requeue_false")) == 1
    assert _get(c, "jobs") == []

    # what the API publishes is a message like any other: a real consumer gets it
    _post(c, "/api/exchanges/%2F/amq.default/publish", {
        "routing_key": "jobs", "payload": "to pika", "payload_encoding": "string",
        "properties": {}})
    assert users_server.amqp_port
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", users_server.amqp_port, credentials=pika.PlainCredentials(*ADMIN)))
    method, _props, body = conn.channel().basic_get("jobs", auto_ack=True)
    assert method is not None and body == b"to pika"
    conn.close()


def test_publish_to_an_exchange_routes_by_its_bindings(users_server: ServerProcess,
                                                        client_for: Any) -> None:
    c = client_for(users_server)
    c.request("PUT", "/api/exchanges/%2F/ev", ADMIN, b'{"type": "topic"}')
    c.request("PUT", "/api/queues/%2F/a", ADMIN, b"{}")
    c.request("POST", "/api/bindings/%2F/e/ev/q/a", ADMIN, b'{"routing_key": "a.*"}')
    for key, routed in (("a.1", True), ("b.1", False)):
        r = _post(c, "/api/exchanges/%2F/ev/publish", {
            "routing_key": key, "payload": key, "payload_encoding": "string",
            "properties": {}})
        assert r.json() == {"routed": routed}
    got = _get(c, "a", count=10, ackmode="ack_requeue_false")
    assert [(m["exchange"], m["routing_key"], m["payload"]) for m in got] == \
        [("ev", "a.1", "a.1")]


GOOD_PUBLISH = {"routing_key": "q", "payload": "x", "payload_encoding": "string",
                "properties": {}}


@pytest.mark.parametrize("path, body, status, needle", [
    ("/api/exchanges/%2F/amq.default/publish", {**GOOD_PUBLISH, "routing_key": 5}, 400,
     "routing_key"),
    ("/api/exchanges/%2F/amq.default/publish", {"routing_key": "q"}, 400, "payload"),
    ("/api/exchanges/%2F/amq.default/publish", {**GOOD_PUBLISH, "payload_encoding": "hex"},
     400, "payload_encoding"),
    ("/api/exchanges/%2F/amq.default/publish",
     {**GOOD_PUBLISH, "payload": "!!", "payload_encoding": "base64"}, 400, "payload"),
    ("/api/exchanges/%2F/amq.default/publish", {**GOOD_PUBLISH, "properties": []}, 400,
     "properties"),
    ("/api/exchanges/%2F/amq.default/publish",
     {**GOOD_PUBLISH, "properties": {"delivery_mode": 7}}, 400, "delivery_mode"),
    ("/api/exchanges/%2F/amq.default/publish",
     {**GOOD_PUBLISH, "properties": {"colour": "red"}}, 400, "colour"),
    ("/api/exchanges/%2F/amq.default/publish",
     {**GOOD_PUBLISH, "properties": {"priority": "high"}}, 400, "priority"),
    ("/api/exchanges/%2F/nope/publish", GOOD_PUBLISH, 404, "nope"),
    ("/api/exchanges/vh/amq.default/publish", GOOD_PUBLISH, 404, "vhost"),
    ("/api/queues/%2F/q/get", {"count": 1}, 400, "ackmode"),
    ("/api/queues/%2F/q/get", {"count": 1, "ackmode": "maybe"}, 400, "ackmode"),
    ("/api/queues/%2F/q/get", {"count": "many", "ackmode": "ack_requeue_true"}, 400,
     "count"),
    ("/api/queues/%2F/q/get", {"count": 0, "ackmode": "ack_requeue_true"}, 400, "count"),
    ("/api/queues/%2F/q/get", {"count": "\u00b2", "ackmode": "ack_requeue_true"}, 400,
     "count"),
    ("/api/queues/%2F/q/get", {"count": "9" * 5000, "ackmode": "ack_requeue_true"}, 400,
     "count"),
    ("/api/queues/%2F/q/get", {"ackmode": "ack_requeue_true", "encoding": "utf8"}, 400,
     "encoding"),
    ("/api/queues/%2F/q/get", {"ackmode": "ack_requeue_true", "truncate": -1}, 400,
     "truncate"),
    ("/api/queues/%2F/nope/get", {"ackmode": "ack_requeue_true"}, 404, "nope"),
])
def test_bad_publish_and_get(users_server: ServerProcess, client_for: Any, path: str,
                             body: dict[str, Any], status: int, needle: str) -> None:
    c = client_for(users_server)
    c.request("PUT", "/api/queues/%2F/q", ADMIN, b"{}")
    r = _post(c, path, body)
    assert r.status == status, r.body
    assert needle in r.json()["reason"]
    r = c.request("POST", path, ADMIN, b"{nope")
    assert r.status in (400, 404) and "reason" in r.json()


def test_publish_and_get_need_administrator_and_permissions(users_server: ServerProcess,
                                                            client_for: Any) -> None:
    c = client_for(users_server)
    c.request("PUT", "/api/queues/%2F/mine", ADMIN, b"{}")
    publish = "/api/exchanges/%2F/amq.default/publish"
    get = {"ackmode": "ack_requeue_false"}
    for user in ("watcher", "mgmt", "plain"):
        assert _post(c, publish, GOOD_PUBLISH, (user, f"{user}-pw")).status == 401, user
        assert _post(c, "/api/queues/%2F/mine/get", get, (user, f"{user}-pw")).status == 401
    assert _post(c, publish, GOOD_PUBLISH, None).status == 401
    # the administrator's own AMQP permissions hold: write on the exchange, read on the queue
    users_server.cli("permissions", "set", "admin", ".*", "^nothing$", "^nothing$")
    r = _post(c, publish, {**GOOD_PUBLISH, "routing_key": "mine"})
    assert r.status == 401 and "(write)" in r.json()["reason"]
    r = _post(c, "/api/queues/%2F/mine/get", get)
    assert r.status == 401 and "(read)" in r.json()["reason"]
    users_server.cli("permissions", "set", "admin", ".*", ".*", ".*")
    assert _post(c, publish, {**GOOD_PUBLISH, "routing_key": "mine"}).json()["routed"]
    assert len(_post(c, "/api/queues/%2F/mine/get", get).json()) == 1
