"""``oxiedge publish`` / ``oxiedge get`` against a real server: through the broker's
publish path (routing, the bus to MQTT, durability), peeking and taking, bad input."""

from __future__ import annotations

import json
import threading
import time

import paho.mqtt.client as mqtt

from tests.conftest import ServerProcess


def _rows(res: object) -> list[dict[str, object]]:
    return [json.loads(line) for line in res.stdout.splitlines()]  # type: ignore[attr-defined]


def _refused(server: ServerProcess, *args: str, code: int = 1) -> str:
    res = server.cli(*args, check=False)
    assert res.returncode == code, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr
    return " ".join(res.stderr.split())


def test_publish_get_peek_and_take(server: ServerProcess) -> None:
    server.cli("queue", "declare", "orders")
    out = server.cli("publish", "-k", "orders", "-m", '{"id": 1}', "-p",
                     "content_type=application/json", "--header", "attempt=2").stdout
    assert "to the default exchange with key 'orders': routed" in out
    server.cli("publish", "-k", "orders", "-m", "second")
    first = _rows(server.cli("get", "orders", "--json"))
    assert first == [{"bytes": 9, "exchange": "", "routing_key": "orders",
                      "redelivered": False, "message_count": 1,
                      "properties": {"content_type": "application/json",
                                     "headers": {"attempt": 2}, "delivery_mode": 2},
                      "payload": '{"id": 1}'}]
    again = _rows(server.cli("get", "orders", "--count", "5", "--json"))
    assert [r["payload"] for r in again] == ['{"id": 1}', "second"]
    assert again[0]["redelivered"] is True  # put back, as rabbitmqadmin's ack_requeue_true
    server.kill()  # persistent and committed before the answer
    server.restart()
    assert len(_rows(server.cli("get", "orders", "--count", "5", "--json"))) == 2
    taken = _rows(server.cli("get", "orders", "--count", "5", "--ack", "--json"))
    assert len(taken) == 2
    assert _rows(server.cli("get", "orders", "--json")) == []
    server.restart()
    assert _rows(server.cli("get", "orders", "--json")) == []  # the take was durable

    assert "NOT routed" in server.cli("publish", "-k", "nobody", "-m", "x").stdout
    assert "no exchange 'ghost'" in _refused(server, "publish", "-e", "ghost", "-m", "x")
    assert "no queue 'ghost'" in _refused(server, "get", "ghost")
    assert "unknown message properties ['colour']" in _refused(
        server, "publish", "-k", "orders", "-m", "x", "-p", "colour=red", code=2)
    assert "one of -m" in _refused(server, "publish", "-m", "x", "-s", code=2)


def test_publish_to_amq_topic_reaches_mqtt(server: ServerProcess) -> None:
    got: list[tuple[str, bytes]] = []
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="listener")
    subscribed = threading.Event()
    sub.on_subscribe = lambda *a: subscribed.set()
    sub.on_message = lambda _c, _u, m: got.append((m.topic, m.payload))
    assert server.mqtt_port is not None
    sub.connect("127.0.0.1", server.mqtt_port)
    sub.loop_start()
    sub.subscribe("sensors/#", qos=1)
    assert subscribed.wait(10)
    out = server.cli("publish", "-e", "amq.topic", "-k", "sensors.t1", "-m", "21.5").stdout
    assert "routed" in out
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    assert got == [("sensors/t1", b"21.5")]
    sub.disconnect()
    sub.loop_stop()
