"""The older and convenience endpoints AMQPStorm's management client calls, against a real
server: /api/healthchecks/node, POST /api/users/bulk-delete, /api/vhosts/%2F and its
permissions, pages of /api/connections; bad input and missing permission."""

from __future__ import annotations

import json
from typing import Any

import pika

from tests.conftest import ServerProcess as Server

ADMIN = ("admin", "admin-pw")
WATCHER = ("watcher", "watcher-pw")


def test_node_health_vhost_and_its_permissions(users_server: Server, client_for: Any) -> None:
    c = client_for(users_server)
    assert c.get("/api/healthchecks/node", WATCHER).json() == {"status": "ok"}
    node = c.get("/api/nodes", WATCHER).json()[0]["name"]
    assert c.get(f"/api/healthchecks/node/{node}", WATCHER).json() == {"status": "ok"}
    r = c.get("/api/healthchecks/node/rabbit@elsewhere", WATCHER)
    assert r.status == 404 and "rabbit@elsewhere" in r.json()["reason"]
    assert c.get("/api/healthchecks/node").status == 401
    assert c.get("/api/vhosts/%2F", WATCHER).json()["name"] == "/"
    assert c.get("/api/vhosts/other", WATCHER).status == 404
    users_server.cli("permissions", "set", "plain", "^$", ".*", "^q")
    assert c.get("/api/vhosts/%2F/permissions", ADMIN).json() == [
        {"user": "plain", "vhost": "/", "configure": "^$", "write": ".*", "read": "^q"}]
    assert c.get("/api/vhosts/%2F/permissions", WATCHER).status == 401


def test_bulk_delete_users(users_server: Server, client_for: Any) -> None:
    c = client_for(users_server)
    for name in ("a1", "a2"):
        assert c.request("PUT", f"/api/users/{name}", ADMIN,
                         b'{"password": "pw", "tags": ""}').status == 201
    body = json.dumps({"users": ["a1", "a2", "never-was"]}).encode()
    assert c.request("POST", "/api/users/bulk-delete", WATCHER, body).status == 401
    assert c.request("POST", "/api/users/bulk-delete", ADMIN, body).status == 204
    names = {u["name"] for u in c.get("/api/users", ADMIN).json()}
    assert not names & {"a1", "a2"} and "admin" in names
    for bad in (b'{"users": "a1"}', b'{"users": [1]}', b"{}", b"[]"):
        r = c.request("POST", "/api/users/bulk-delete", ADMIN, bad)
        assert r.status == 400, bad
        assert r.json()["reason"].startswith(("users:", "body:"))


def test_connections_come_in_pages(users_server: Server, client_for: Any) -> None:
    assert users_server.amqp_port
    conns = [pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", users_server.amqp_port, credentials=pika.PlainCredentials(*ADMIN)))
        for _ in range(3)]
    c = client_for(users_server)
    page = c.get("/api/connections?page=1&page_size=2", WATCHER).json()
    assert (page["total_count"], page["item_count"], page["page_count"]) == (3, 2, 2)
    assert len(c.get("/api/channels?page=1&page_size=100", WATCHER).json()["items"]) == 0
    assert c.get("/api/connections?page=0", WATCHER).status == 400
    for conn in conns:
        conn.close()
