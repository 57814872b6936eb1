"""``oxiedge sessions|retained|status|find _mqtt`` against a live server, and the ingest
bridge fed from the MQTT publish path before the PUBACK."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.conftest import ServerProcess

from .conftest import Client, cli_rows
from .rawclient import RawSession


def test_live_sessions_retained_status(
    start_mqtt: Callable[..., ServerProcess], clients: Callable[..., Client]
) -> None:
    srv = start_mqtt()
    port = srv.mqtt_port
    on = clients(port, "online", clean=True)
    on.connect()
    on.subscribe(("a/#", 1), ("b", 0))
    off = clients(port, "offline", clean=False)
    off.connect()
    off.subscribe(("a/#", 1))
    off.disconnect()
    pub = clients(port, "pub")
    pub.connect()
    pub.publish("a/1", b"12345", qos=1, retain=True)
    pub.publish("a/2", b"x", qos=1)
    assert on.get_n(2)
    got = {r["client"]: r for r in cli_rows(srv, "sessions")}
    base = {"inflight": 0, "dropped": 0}
    assert got["online"] == {"client": "online", "connected": True, "clean": True,
                             "subscriptions": 2, "queued": 0, "expires_in": None,
                             "offline_s": None, **base}
    expires_in = got["offline"].pop("expires_in")  # --mqtt-session-expiry: 1 day
    assert isinstance(got["offline"].pop("offline_s"), int)  # (oxiedge sessions --older-than)
    assert isinstance(expires_in, int) and 86000 < expires_in <= 86400, expires_in
    assert got["offline"] == {"client": "offline", "connected": False, "clean": False,
                              "subscriptions": 1, "queued": 2, **base}  # fmt: skip
    assert cli_rows(srv, "retained") == [{"topic": "a/1", "qos": 1, "bytes": 5}]
    # The broker's own $SYS values (retained, in memory) are listed only when asked for.
    with_sys = {row["topic"] for row in cli_rows(srv, "retained", "--sys")}
    assert "a/1" in with_sys and "$SYS/broker/version" in with_sys
    status = json.loads(srv.cli("status", "--json").stdout)
    mqtt = status["mqtt"]
    assert mqtt["messages_in"] == 2
    assert mqtt["messages_out"] == 2
    assert mqtt["sessions"] == 3 and mqtt["retained"] == 1 and mqtt["queued"] == 2
    assert mqtt["connections"] == 2  # "online" and "pub"
    assert mqtt["queue_limit"] == 10_000_000 and mqtt["memory_queue_limit"] == 4096
    assert mqtt["max_backlog_source"].startswith("0.5 of the data filesystem (")
    assert mqtt["max_backlog_bytes"] > 0 and mqtt["backlog_bytes"] == 2 * 3 + 5 + 1  # a/1, a/2
    docs = cli_rows(srv, "find", "_mqtt", '{"_kind": "msg"}')
    assert [(d["client"], d["seq"], d["topic"], d["payload"]) for d in docs] == [
        ("offline", 0, "a/1", "12345"), ("offline", 1, "a/2", "x")
    ]  # fmt: skip
    subs = cli_rows(srv, "find", "_mqtt", '{"_kind": "sub"}')
    assert [(d["client"], d["filter"], d["qos"]) for d in subs] == [("offline", "a/#", 1)]


def test_ingest_documents_are_durable_when_puback_arrives(
    start_mqtt: Callable[..., ServerProcess],
) -> None:
    srv = start_mqtt("--ingest", "sensors/#:readings")
    assert srv.mqtt_port is not None
    pub = RawSession(srv.mqtt_port)
    pub.connect("sensor")
    pub.publish("sensors/t1", b'{"value": 21.5}', 1, pid=1)
    pub.publish("sensors/t2", b"not json", 2, pid=2)
    pub.publish("other/x", b"{}", 1, pid=3)
    srv.kill()  # right after the acknowledgements
    srv.start()
    docs = cli_rows(srv, "find", "readings")
    assert [(d["_topic"], d.get("value"), d.get("payload")) for d in docs] == [
        ("sensors/t1", 21.5, None), ("sensors/t2", None, "not json")
    ]  # fmt: skip
