"""The management API's writes and connection views against a real server and real AMQP
clients: declare, delete, purge, bind, unbind, list and close connections."""

from __future__ import annotations

import json
import time
from typing import Any

import pika
import pytest

from tests.conftest import ServerProcess

ADMIN = ("admin", "admin-pw")


def _amqp(srv: ServerProcess, user: tuple[str, str] = ADMIN) -> pika.BlockingConnection:
    assert srv.amqp_port
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", srv.amqp_port, credentials=pika.PlainCredentials(*user)))


def test_queue_declare_purge_delete(users_server: ServerProcess, client_for: Any) -> None:
    c = client_for(users_server)
    body = json.dumps({"durable": True, "auto_delete": False, "arguments": {}}).encode()
    assert c.request("PUT", "/api/queues/%2F/work", ADMIN, body).status == 201
    assert c.request("PUT", "/api/queues/%2F/work", ADMIN, body).status == 204  # existed
    conn = _amqp(users_server)
    ch = conn.channel()
    ch.confirm_delivery()
    for _ in range(3):
        ch.basic_publish("", "work", b"x")
    assert c.get("/api/queues/%2F/work", ADMIN).json()["messages_ready"] == 3
    assert c.request("DELETE", "/api/queues/%2F/work?if-empty=true", ADMIN).status == 400
    assert c.request("DELETE", "/api/queues/%2F/work/contents", ADMIN).status == 204
    assert c.get("/api/queues/%2F/work", ADMIN).json()["messages_ready"] == 0
    assert c.request("DELETE", "/api/queues/%2F/work", ADMIN).status == 204
    r = c.request("DELETE", "/api/queues/%2F/work", ADMIN)
    assert r.status == 404 and "no queue 'work'" in r.json()["reason"]
    conn.close()


@pytest.mark.parametrize("method, path, body, status, needle", [
    ("PUT", "/api/queues/%2F/q", b"{nope", 400, "body:"),
    ("PUT", "/api/queues/%2F/q", b'{"durable": "yes"}', 400, "'durable'"),
    ("PUT", "/api/queues/%2F/q", b'{"arguments": {"x-max-length": "ten"}}', 400, ""),
    ("PUT", "/api/exchanges/%2F/x", b'{"type": "nonsense"}', 400, ""),
    ("PUT", "/api/exchanges/%2F/amq.mine", b"{}", 403, "amq."),
    ("DELETE", "/api/exchanges/%2F/x?if-unused=perhaps", b"", 400, "if-unused:"),
    ("DELETE", "/api/exchanges/%2F/nope", b"", 404, "nope"),
    ("POST", "/api/bindings/%2F/e/nope/q/nope", b"{}", 404, ""),
    ("DELETE", "/api/connections/1.2.3.4:5", b"", 404, ""),
    ("PUT", "/api/queues/vhost2/q", b"{}", 404, "vhost"),
])
def test_bad_writes(users_server: ServerProcess, client_for: Any, method: str, path: str,
                    body: bytes, status: int, needle: str) -> None:
    r = client_for(users_server).request(method, path, ADMIN, body)
    assert r.status == status, r.body
    error = r.json()
    assert set(error) == {"error", "reason"} and needle in error["reason"]


def test_writes_need_administrator_and_permissions(users_server: ServerProcess,
                                                   client_for: Any) -> None:
    c = client_for(users_server)
    for user in ("watcher", "mgmt", "plain"):
        r = c.request("PUT", "/api/queues/%2F/q", (user, f"{user}-pw"), b"{}")
        assert r.status == 401, user
    assert c.request("PUT", "/api/queues/%2F/q", None, b"{}").status == 401
    # An administrator is still held to its own permissions, as in RabbitMQ.
    users_server.cli("permissions", "set", "admin", "^mine", ".*", ".*")
    r = c.request("PUT", "/api/queues/%2F/theirs", ADMIN, b"{}")
    assert r.status == 401
    assert r.json()["reason"].startswith("access to queue 'theirs' in vhost '/' refused")
    assert c.request("PUT", "/api/queues/%2F/mine-1", ADMIN, b"{}").status == 201


def test_exchanges_and_bindings(users_server: ServerProcess, client_for: Any) -> None:
    c = client_for(users_server)
    assert c.request("PUT", "/api/exchanges/%2F/ev", ADMIN,
                     b'{"type": "topic", "durable": true}').status == 201
    assert c.request("PUT", "/api/queues/%2F/sink", ADMIN, b"{}").status == 201
    r = c.request("POST", "/api/bindings/%2F/e/ev/q/sink", ADMIN, b'{"routing_key": "a.#"}')
    assert r.status == 201
    assert r.headers["location"] == "/api/bindings/%2F/e/ev/q/sink/a.%23"
    between = c.get("/api/bindings/%2F/e/ev/q/sink", ADMIN).json()
    assert [b["routing_key"] for b in between] == ["a.#"]
    assert c.request("PUT", "/api/exchanges/%2F/ev2", ADMIN, b'{"type": "fanout"}').status \
        == 201
    assert c.request("POST", "/api/bindings/%2F/e/ev/e/ev2", ADMIN, b"{}").status == 201
    assert c.request("DELETE", "/api/bindings/%2F/e/ev/e/ev2/~", ADMIN).status == 204
    assert c.request("DELETE", r.headers["location"], ADMIN).status == 204
    assert c.request("DELETE", r.headers["location"], ADMIN).status == 404
    assert c.get("/api/bindings/%2F/e/ev/q/sink", ADMIN).json() == []
    assert c.request("DELETE", "/api/exchanges/%2F/ev", ADMIN).status == 204
    assert c.get("/api/exchanges/%2F/ev", ADMIN).status == 404


def test_connections_channels_consumers_and_close(users_server: ServerProcess,
                                                  client_for: Any) -> None:
    c = client_for(users_server)
    conn = _amqp(users_server, ("plain", "plain-pw"))
    ch = conn.channel()
    ch.queue_declare("watched")
    ch.basic_consume("watched", lambda *a: None, consumer_tag="tag-1")
    rows = c.get("/api/connections", ADMIN).json()
    assert len(rows) == 1
    row = rows[0]
    assert (row["user"], row["state"], row["vhost"], row["channels"]) == \
        ("plain", "running", "/", 1)
    name = row["name"]
    assert c.get(f"/api/connections/{name}", ADMIN).json()["peer_host"] == "127.0.0.1"
    chans = c.get("/api/channels", ADMIN).json()
    assert chans[0]["connection_details"]["name"] == name and chans[0]["consumer_count"] == 1
    cons = c.get("/api/consumers/%2F", ("watcher", "watcher-pw")).json()
    assert cons[0]["consumer_tag"] == "tag-1" and cons[0]["queue"]["name"] == "watched"
    assert c.request("DELETE", f"/api/connections/{name}", ("watcher", "watcher-pw")).status \
        == 401
    r = c.request("DELETE", f"/api/connections/{name}", ADMIN,
                  headers={"X-Reason": "maintenance"})
    assert r.status == 204
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        for _ in range(50):
            conn.process_data_events(0.1)
    assert closed.value.reply_code == 320 and "maintenance" in closed.value.reply_text
    deadline = time.monotonic() + 10
    while c.get("/api/connections", ADMIN).json() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert c.get("/api/connections", ADMIN).json() == []


def test_users_and_permissions_through_the_api(users_server: ServerProcess,
                                               client_for: Any) -> None:
    c = client_for(users_server)
    assert c.request("PUT", "/api/users/carol", ADMIN,
                     b'{"password": "carol-pw", "tags": "monitoring"}').status == 201
    assert c.get("/api/whoami", ("carol", "carol-pw")).json() == {
        "name": "carol", "tags": ["monitoring"]}
    assert c.request("PUT", "/api/users/carol", ("watcher", "watcher-pw"),
                     b'{"password": "x"}').status == 401
    # a new password applies at once; the old one fails (the per-connection cache too)
    assert c.request("PUT", "/api/users/carol", ADMIN,
                     b'{"password": "new-pw", "tags": ""}').status == 204
    assert c.get("/api/whoami", ("carol", "carol-pw")).json()["reason"] == "Login failed"
    # the new password logs in; without a tag carol may not use the API
    assert c.get("/api/whoami", ("carol", "new-pw")).json()["reason"] == "Not management user"
    # permissions: AMQP clients are held to them at once
    perms = b'{"configure": "^carol-", "write": ".*", "read": ".*"}'
    assert c.request("PUT", "/api/permissions/%2F/carol", ADMIN, perms).status == 201
    conn = _amqp(users_server, ("carol", "new-pw"))
    ch = conn.channel()
    ch.queue_declare("carol-q")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        ch.queue_declare("other-q")
    assert refused.value.reply_code == 403
    conn.close()
    assert c.get("/api/permissions/%2F/carol", ADMIN).json()["configure"] == "^carol-"
    assert c.request("PUT", "/api/topic-permissions/%2F/carol", ADMIN,
                     b'{"exchange": "amq.topic", "write": "^carol\\\\.", "read": ".*"}'
                     ).status == 204
    assert c.get("/api/topic-permissions/%2F/carol", ADMIN).json()[0]["exchange"] == \
        "amq.topic"
    assert c.request("DELETE", "/api/topic-permissions/%2F/carol", ADMIN).status == 204
    assert c.request("DELETE", "/api/permissions/%2F/carol", ADMIN).status == 204
    assert c.request("DELETE", "/api/permissions/%2F/carol", ADMIN).status == 404
    # a stored hash from elsewhere (another oxiedge's definitions export) is taken as it is
    hashed = c.get("/api/definitions", ADMIN).json()["users"]
    watcher_hash = next(u["password_hash"] for u in hashed if u["name"] == "watcher")
    body = json.dumps({"password_hash": watcher_hash, "tags": "monitoring"}).encode()
    assert c.request("PUT", "/api/users/twin", ADMIN, body).status == 201
    assert c.get("/api/whoami", ("twin", "watcher-pw")).status == 200
    bad = c.request("PUT", "/api/users/twin", ADMIN, b'{"password_hash": "abc"}')
    assert bad.status == 400 and bad.json()["reason"].startswith("password_hash:")
    assert c.request("DELETE", "/api/users/carol", ADMIN).status == 204
    assert c.get("/api/whoami", ("carol", "new-pw")).json()["reason"] == "Login failed"
    assert c.request("DELETE", "/api/users/carol", ADMIN).status == 404
    assert "carol" not in users_server.cli("user", "list").stdout
