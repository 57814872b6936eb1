"""A resource alarm holds MQTT publishers (no PUBACK) while subscribers keep draining."""

from __future__ import annotations

import json
import threading
import time

import paho.mqtt.client as mqtt

from tests.conftest import ServerProcess


def _client(port: int | None, cid: str) -> mqtt.Client:
    assert port is not None
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid)
    c.connect("127.0.0.1", port, keepalive=60)
    c.loop_start()
    return c


def test_publisher_blocked_then_resumes(server: ServerProcess) -> None:
    got: list[bytes] = []
    arrived = threading.Event()
    sub = _client(server.mqtt_port, "alarm-sub")

    def on_message(_c: object, _u: object, msg: mqtt.MQTTMessage) -> None:
        got.append(bytes(msg.payload))
        arrived.set()

    sub.on_message = on_message
    sub.subscribe("alarm/#", qos=1)
    pub = _client(server.mqtt_port, "alarm-pub")
    # Let the subscription settle, then prove the path works.
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        pub.publish("alarm/t", b"before", qos=1).wait_for_publish(5)
        arrived.wait(0.2)
    assert got and got[-1] == b"before"

    status = json.loads(server.cli("limits", "--disk-free-limit", "1000000TB", "--json").stdout)
    assert status["blocked"] is True
    held = pub.publish("alarm/t", b"during", qos=1)
    time.sleep(1.0)
    assert not held.is_published(), "a blocked publisher must not get its PUBACK"
    assert b"during" not in got
    srv_status = json.loads(server.cli("status", "--json").stdout)
    assert srv_status["alarms"]["disk_alarm"] is True and srv_status["mqtt"]["blocked"] >= 1

    server.cli("limits", "--disk-free-limit", "1MB")
    held.wait_for_publish(10)
    assert held.is_published()
    deadline = time.monotonic() + 10
    while b"during" not in got and time.monotonic() < deadline:
        time.sleep(0.02)
    assert b"during" in got
    for c in (pub, sub):
        c.disconnect()
        c.loop_stop()
