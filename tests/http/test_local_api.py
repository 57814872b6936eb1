"""``/api/mqtt/...`` and ``/api/oxiedge/...`` against a real server with paho clients:
sessions, subscriptions, retained messages, kick, delete, clear; ingest routes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.conftest import ServerProcess
from tests.mqtt.conftest import clients  # noqa: F401 - the paho fixture

ADMIN = ("admin", "admin-pw")
WATCHER = ("watcher", "watcher-pw")


def test_mqtt_sessions_subscriptions_retained(users_server: ServerProcess,
                                              client_for: Any,
                                              clients: Callable[..., Any]) -> None:  # noqa: F811
    c = client_for(users_server)
    sub = clients(users_server.mqtt_port, "dev/1", clean=False)
    sub.connect(auth=ADMIN)
    sub.subscribe(("plant/+/temp", 1))
    pub = clients(users_server.mqtt_port, "pub")
    pub.connect(auth=ADMIN)
    pub.publish("plant/a/temp", b"21", qos=1, retain=True)
    pub.publish("plant/b/temp", b"22", qos=1, retain=True)
    sessions = {s["client"]: s for s in c.get("/api/mqtt/sessions", WATCHER).json()}
    assert sessions["dev/1"]["connected"] is True and sessions["dev/1"]["subscriptions"] == 1
    assert c.get("/api/mqtt/sessions/dev%2F1", WATCHER).json()["client"] == "dev/1"
    assert c.get("/api/mqtt/sessions/nobody", WATCHER).status == 404
    subs = c.get("/api/mqtt/subscriptions", WATCHER).json()
    assert {"client": "dev/1", "filter": "plant/+/temp", "qos": 1}.items() <= subs[0].items()
    topics = [r["topic"] for r in c.get("/api/mqtt/retained", WATCHER).json()]
    assert topics == ["plant/a/temp", "plant/b/temp"]
    # writes: administrator only
    assert c.request("DELETE", "/api/mqtt/clients/dev%2F1", WATCHER).status == 401
    assert c.request("DELETE", "/api/mqtt/clients/dev%2F1", ADMIN).status == 204
    assert sub.disconnected.wait(10)
    deadline = time.monotonic() + 10
    while c.get("/api/mqtt/sessions/dev%2F1", ADMIN).json()["connected"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert c.request("DELETE", "/api/mqtt/sessions/dev%2F1", ADMIN).status == 204
    assert c.get("/api/mqtt/sessions/dev%2F1", ADMIN).status == 404
    r = c.request("DELETE", "/api/mqtt/sessions/dev%2F1", ADMIN)
    assert r.status == 404 and "no MQTT session" in r.json()["reason"]
    r = c.request("DELETE", "/api/mqtt/retained?topic=plant/a/temp", ADMIN)
    assert r.status == 200 and r.json()["cleared"] == 1
    assert [x["topic"] for x in c.get("/api/mqtt/retained", ADMIN).json()] == ["plant/b/temp"]
    r = c.request("DELETE", "/api/mqtt/retained", ADMIN)
    assert r.status == 400 and r.json()["reason"].startswith("topic:")
    assert c.request("DELETE", "/api/mqtt/retained?all=maybe", ADMIN).status == 400
    assert c.request("DELETE", "/api/mqtt/retained?all=true", ADMIN).json()["cleared"] == 1
    assert c.get("/api/mqtt/sessions?older_than=x", ADMIN).status == 400
    assert c.get("/api/mqtt/sessions?offline=true", ADMIN).status == 200


def test_oxiedge_ingest_and_uplinks(start_server: Any, client_for: Any) -> None:
    srv = start_server("--http-port", "0", "--ingest", "plant/+/temp:readings")
    c = client_for(srv)
    routes = c.get("/api/oxiedge/ingest").json()
    assert any("readings" in str(r) for r in routes)
    assert c.get("/api/oxiedge/uplinks").json() == []
    assert c.get("/api/oxiedge/uplinks/status").status == 200
