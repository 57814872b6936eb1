"""Debian's ``rabbitmqadmin`` (the classic Python client, shipped with ``rabbitmq-server``)
against oxiedge's management API: list, declare, purge, delete, close, export."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.conftest import ServerProcess

pytestmark = pytest.mark.skipif(shutil.which("rabbitmqadmin") is None,
                                reason="rabbitmqadmin (Debian: rabbitmq-server) not installed")


def _admin(srv: ServerProcess, *args: str, user: tuple[str, str] = ("admin", "admin-pw"),
           ok: bool = True) -> subprocess.CompletedProcess[str]:
    assert srv.http_port
    res = subprocess.run(["rabbitmqadmin", "-H", "127.0.0.1", "-P", str(srv.http_port),
                          "-u", user[0], "-p", user[1], *args],
                         capture_output=True, text=True, timeout=60)
    if ok:
        assert res.returncode == 0, res.stdout + res.stderr
    return res


def _rows(srv: ServerProcess, what: str) -> list[dict[str, Any]]:
    rows = json.loads(_admin(srv, "-f", "raw_json", "list", what).stdout)
    assert isinstance(rows, list)
    return rows


def test_rabbitmqadmin_manages_oxiedge(users_server: ServerProcess, tmp_path: Path) -> None:
    srv = users_server
    assert "queue declared" in _admin(srv, "declare", "queue", "name=jobs", "durable=true").stdout
    _admin(srv, "declare", "exchange", "name=events", "type=topic", "durable=true")
    _admin(srv, "declare", "binding", "source=events", "destination=jobs",
           "routing_key=job.*")
    assert [q["name"] for q in _rows(srv, "queues")] == ["jobs"]
    assert "events" in [x["name"] for x in _rows(srv, "exchanges")]
    assert {"source": "events", "destination": "jobs", "routing_key": "job.*"}.items() <= \
        next(b for b in _rows(srv, "bindings") if b["source"] == "events").items()
    assert [v["name"] for v in _rows(srv, "vhosts")] == ["/"]
    assert {u["name"] for u in _rows(srv, "users")} == {"admin", "watcher", "mgmt", "plain"}
    assert _rows(srv, "nodes")[0]["running"] is True

    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", srv.amqp_port, credentials=pika.PlainCredentials("admin", "admin-pw")))
    ch = conn.channel()
    ch.confirm_delivery()
    for _ in range(5):
        ch.basic_publish("events", "job.a", b"work")
    assert _rows(srv, "queues")[0]["messages"] == 5
    conns = _rows(srv, "connections")
    assert len(conns) == 1 and conns[0]["user"] == "admin"

    export = tmp_path / "defs.json"
    _admin(srv, "export", str(export))
    defs = json.loads(export.read_text())
    assert [q["name"] for q in defs["queues"]] == ["jobs"]
    assert [x["name"] for x in defs["exchanges"]] == ["events"]
    assert defs["bindings"] == [{"source": "events", "vhost": "/", "destination": "jobs",
                                 "destination_type": "queue", "routing_key": "job.*",
                                 "arguments": {}}]
    assert {u["name"]: u["tags"] for u in defs["users"]}["watcher"] == ["monitoring"]

    _admin(srv, "purge", "queue", "name=jobs")
    assert _rows(srv, "queues")[0]["messages"] == 0
    _admin(srv, "close", "connection", f"name={conns[0]['name']}")
    _admin(srv, "delete", "binding", "source=events", "destination=jobs",
           "destination_type=queue", "properties_key=job.*")
    assert not [b for b in _rows(srv, "bindings") if b["source"] == "events"]
    _admin(srv, "delete", "queue", "name=jobs")
    _admin(srv, "delete", "exchange", "name=events")
    assert _rows(srv, "queues") == []
    _admin(srv, "declare", "user", "name=dana", "password=dana-pw", "tags=monitoring")
    _admin(srv, "declare", "permission", "vhost=/", "user=dana", "configure=^$", "write=.*",
           "read=.*")
    assert {"user": "dana", "configure": "^$"}.items() <= next(
        p for p in _rows(srv, "permissions") if p["user"] == "dana").items()
    assert [q["name"] for q in _rows(srv, "queues")] == []
    assert _admin(srv, "list", "queues", user=("dana", "dana-pw")).returncode == 0
    _admin(srv, "delete", "permission", "vhost=/", "user=dana")
    _admin(srv, "delete", "user", "name=dana")
    assert "dana" not in {u["name"] for u in _rows(srv, "users")}
    # A monitoring user may list but not declare; a wrong password gets nothing.
    assert _admin(srv, "list", "queues", user=("watcher", "watcher-pw")).returncode == 0
    refused = _admin(srv, "declare", "queue", "name=x", user=("watcher", "watcher-pw"),
                     ok=False)
    assert refused.returncode != 0 and "Access refused" in refused.stdout + refused.stderr
    assert _admin(srv, "list", "queues", user=("admin", "nope"), ok=False).returncode != 0
    try:
        conn.close()
    except pika.exceptions.AMQPError:
        pass


def test_definitions_round_trip_and_rabbitmqadmin_import(start_server: Any, tmp_path: Path,
                                                          client_for: Any) -> None:
    from tests.http.conftest import add_user

    first = start_server("--http-port", "0", data=tmp_path / "one")
    c1 = client_for(first)
    for method, path, body in (
            ("PUT", "/api/exchanges/%2F/ev", b'{"type": "topic"}'),
            ("PUT", "/api/queues/%2F/jobs", b'{"arguments": {"x-max-length": 10}}'),
            ("POST", "/api/bindings/%2F/e/ev/q/jobs", b'{"routing_key": "a.*"}')):
        assert c1.request(method, path, None, body).status == 201
    assert c1.request("PUT", "/api/users/boss", None,
                      b'{"password": "boss-pw", "tags": "administrator"}').status == 201
    exported = c1.get("/api/definitions", ("boss", "boss-pw")).body

    data = tmp_path / "two"
    add_user(data, "admin", "admin-pw", "administrator")
    add_user(data, "ops", "ops-pw")
    second = start_server("--http-port", "0", data=data)
    c2 = client_for(second)
    doc = json.loads(exported)
    assert [u["name"] for u in doc["users"]] == ["boss"]
    doc["users"] += [{"name": "ops", "tags": "monitoring"},
                     {"name": "ghost", "tags": "", "password_hash": "a RabbitMQ hash"}]
    doc["permissions"] = [{"user": "ops", "vhost": "/", "configure": "^$", "write": "^$",
                           "read": ".*"}]
    r = c2.request("POST", "/api/definitions", ("admin", "admin-pw"), json.dumps(doc).encode())
    assert r.status == 200, r.body
    assert (r.json()["added_users"], r.json()["skipped_users"]) == (["boss"], ["ghost"])
    assert c2.get("/api/whoami", ("boss", "boss-pw")).json()["tags"] == ["administrator"]
    q = c2.get("/api/queues/%2F/jobs", ("admin", "admin-pw")).json()
    assert q["arguments"] == {"x-max-length": 10} and q["durable"] is True
    assert c2.get("/api/whoami", ("ops", "ops-pw")).json()["tags"] == ["monitoring"]
    again = c2.get("/api/definitions", ("admin", "admin-pw")).json()
    assert again["bindings"] == json.loads(exported)["bindings"]
    # rabbitmqadmin import of the first server's export into a third, empty one
    third = start_server("--http-port", "0", data=tmp_path / "three")
    path = tmp_path / "defs.json"
    path.write_bytes(exported)
    assert subprocess.run(["rabbitmqadmin", "-H", "127.0.0.1", "-P", str(third.http_port),
                           "import", str(path)], capture_output=True, text=True,
                          timeout=60).returncode == 0
    c3 = client_for(third)  # the import added boss: no more anonymous access there
    assert c3.get("/api/queues").status == 401
    assert [x["name"] for x in c3.get("/api/queues", ("boss", "boss-pw")).json()] == ["jobs"]
    bad = c2.request("POST", "/api/definitions", ("admin", "admin-pw"),
                     b'{"queues": [{"name": "q", "vhost": "elsewhere"}]}')
    assert bad.status == 400 and bad.json()["reason"].startswith("queues[0].vhost:")
    assert c2.request("POST", "/api/definitions", ("ops", "ops-pw"), b"{}").status == 401


def test_rabbitmqadmin_publish_and_get(users_server: ServerProcess, tmp_path: Path) -> None:
    srv = users_server
    _admin(srv, "declare", "queue", "name=inbox")
    out = _admin(srv, "publish", "routing_key=inbox", "payload=hello there",
                 'properties={"content_type": "text/plain", "delivery_mode": 2}').stdout
    assert "Message published" in out and "NOT routed" not in out
    assert "NOT routed" in _admin(srv, "publish", "routing_key=nowhere", "payload=x").stdout
    # a payload from stdin goes as base64
    res = subprocess.run(["rabbitmqadmin", "-H", "127.0.0.1", "-P", str(srv.http_port),
                          "-u", "admin", "-p", "admin-pw", "publish", "exchange=amq.default",
                          "routing_key=inbox"], input="from stdin", capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr

    peek = json.loads(_admin(srv, "-f", "raw_json", "get", "queue=inbox", "count=5").stdout)
    assert [(m["payload"], m["payload_encoding"], m["redelivered"]) for m in peek] == \
        [("hello there", "string", False), ("from stdin", "string", False)]
    assert peek[0]["properties"] == {"content_type": "text/plain", "delivery_mode": 2}
    assert peek[0]["message_count"] == 1
    target = tmp_path / "payload.bin"
    _admin(srv, "get", "queue=inbox", "ackmode=ack_requeue_false",
           f"payload_file={target}")
    assert target.read_bytes() == b"hello there"
    taken = json.loads(_admin(srv, "-f", "raw_json", "get", "queue=inbox",
                              "ackmode=reject_requeue_false").stdout)
    assert [m["redelivered"] for m in taken] == [True]
    assert _rows(srv, "queues")[0]["messages"] == 0
    # bad input and missing rights are refused with RabbitMQ's words, not a traceback
    bad = _admin(srv, "get", "queue=inbox", "ackmode=perhaps", ok=False)
    assert bad.returncode != 0 and "ackmode" in bad.stdout + bad.stderr
    gone = _admin(srv, "get", "queue=missing", ok=False)
    assert gone.returncode != 0 and "Not found" in gone.stdout + gone.stderr
    refused = _admin(srv, "publish", "routing_key=inbox", "payload=x",
                     user=("watcher", "watcher-pw"), ok=False)
    assert refused.returncode != 0 and "Access refused" in refused.stdout + refused.stderr
