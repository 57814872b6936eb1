"""The MQTT verbs (``oxiedge sessions|subscriptions|session delete|client kick|retained
clear``) against a real server: good input, bad input, a missing object, and what a restart
keeps."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import paho.mqtt.client as mqtt

from tests.conftest import ServerProcess


def _rows(res: object) -> list[dict[str, object]]:
    """The JSON rows of a listing (without the broker's own $SYS retained values)."""
    rows = [json.loads(line) for line in res.stdout.splitlines()]  # type: ignore[attr-defined]
    return [r for r in rows if not str(r.get("topic", "")).startswith("$SYS/")]


def _refused(server: ServerProcess, *args: str, code: int = 1) -> str:
    res = server.cli(*args, check=False)
    assert res.returncode == code, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    return " ".join(res.stderr.split())


def _client(server: ServerProcess, client_id: str, clean: bool = True,
            will: str | None = None) -> mqtt.Client:
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean)
    if will is not None:
        c.will_set(will, b"gone", qos=1)
    connected = threading.Event()
    c.on_connect = lambda *a: connected.set()
    assert server.mqtt_port is not None
    c.connect("127.0.0.1", server.mqtt_port, keepalive=60)
    c.loop_start()
    assert connected.wait(10)
    return c


def _until(check: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_offline_sessions_subscriptions_and_session_delete(server: ServerProcess) -> None:
    dev = _client(server, "dev1", clean=False)
    dev.subscribe("cmd/#", qos=1)
    _until(lambda: _rows(server.cli("subscriptions", "--json")) != [])
    assert _rows(server.cli("subscriptions", "--json")) == [
        {"client": "dev1", "filter": "cmd/#", "qos": 1, "connected": True}]
    assert _rows(server.cli("sessions", "--offline", "--json")) == []
    dev.disconnect()
    dev.loop_stop()
    pub = _client(server, "pub")
    for i in range(3):
        pub.publish("cmd/reboot", f"{i}".encode(), qos=1).wait_for_publish(10)
    pub.disconnect()
    pub.loop_stop()
    _until(lambda: [r["client"] for r in _rows(server.cli("sessions", "--offline", "--json"))]
           == ["dev1"])
    (row,) = _rows(server.cli("sessions", "--offline", "--json"))
    assert row["queued"] == 3 and row["connected"] is False and isinstance(row["offline_s"], int)
    assert _rows(server.cli("sessions", "--offline", "--older-than", "7d", "--json")) == []
    assert "invalid duration" in _refused(server, "sessions", "--older-than", "soon", code=2)

    res = json.loads(server.cli("session", "delete", "dev1", "--json").stdout)
    assert res == {"client": "dev1", "messages": 3, "subscriptions": 1, "was_connected": False}
    assert "no MQTT session of client 'dev1'" in _refused(server, "session", "delete", "dev1")
    server.restart()  # the deletion was durable
    assert _rows(server.cli("sessions", "--json")) == []
    assert _rows(server.cli("subscriptions", "--json")) == []


def test_kick_and_delete_a_connected_client(server: ServerProcess) -> None:
    watcher = _client(server, "watcher")
    wills: list[bytes] = []
    watcher.on_message = lambda _c, _u, msg: wills.append(msg.payload)
    watcher.subscribe("wills/#", qos=1)
    _until(lambda: any(r["client"] == "watcher"
                       for r in _rows(server.cli("subscriptions", "--json"))))
    dev = _client(server, "dev2", clean=False, will="wills/dev2")
    gone = threading.Event()
    dev.on_disconnect = lambda *a: gone.set()
    assert "client 'dev2' disconnected" in server.cli("client", "kick", "dev2").stdout
    assert gone.wait(10)
    dev.loop_stop()
    _until(lambda: wills == [b"gone"])  # it did not say goodbye: its will goes out
    (row,) = [r for r in _rows(server.cli("sessions", "--json")) if r["client"] == "dev2"]
    assert row["connected"] is False  # the persistent session stays
    assert "is not connected" in _refused(server, "client", "kick", "dev2")
    assert "no MQTT session of client 'ghost'" in _refused(server, "client", "kick", "ghost")

    again = _client(server, "dev3")
    gone3 = threading.Event()
    again.on_disconnect = lambda *a: gone3.set()
    res = json.loads(server.cli("session", "delete", "dev3", "--json").stdout)
    assert res["was_connected"] is True
    assert gone3.wait(10)
    again.loop_stop()
    assert "dev3" not in [r["client"] for r in _rows(server.cli("sessions", "--json"))]
    watcher.disconnect()
    watcher.loop_stop()


def test_retained_clear(server: ServerProcess) -> None:
    pub = _client(server, "pub")
    for topic in ("site/a", "site/b", "site/c"):
        pub.publish(topic, b"v", qos=1, retain=True).wait_for_publish(10)
    pub.disconnect()
    pub.loop_stop()
    assert [r["topic"] for r in _rows(server.cli("retained", "--json"))] == [
        "site/a", "site/b", "site/c"]
    assert "1 retained message(s) cleared" in server.cli("retained", "clear", "site/a").stdout
    assert "no retained message on topic 'site/a'" in _refused(server, "retained", "clear",
                                                               "site/a")
    assert "not a topic name" in _refused(server, "retained", "clear", "site/+", code=2)
    assert "give a TOPIC or --all" in _refused(server, "retained", "clear", code=2)
    server.restart()
    assert [r["topic"] for r in _rows(server.cli("retained", "--json"))] == ["site/b", "site/c"]
    res = json.loads(server.cli("retained", "clear", "--all", "--json").stdout)
    assert res == {"cleared": 2, "topics": ["site/b", "site/c"]}
    server.restart()
    assert _rows(server.cli("retained", "--json")) == []
    server.stop()
    assert _rows(server.cli("retained", "--json")) == []  # the listing reads the data dir
    assert "no server is running" in _refused(server, "client", "kick", "dev")
