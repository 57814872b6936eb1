"""Helpers for the bridge tests: paho and pika clients against a real ``oxiedge serve``."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pika
import pytest

from oxiedge.store import Store
from tests.conftest import ServerProcess

TIMEOUT = 10.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A store on a fresh data dir, closed after the test."""
    s = Store.open(tmp_path / "db")
    yield s
    s.close()


class Mqtt:
    """A paho client (v2 callback API): received messages in a queue, PUBACKs tracked."""

    def __init__(self, port: int, client_id: str = "", clean: bool = True) -> None:
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self.acked: set[int] = set()  # mids whose PUBACK arrived
        self._connected = threading.Event()
        self._acks = threading.Condition()
        self._subacks: queue.Queue[list[int]] = queue.Queue()
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                             clean_session=clean)
        self.c.max_inflight_messages_set(50)
        self.c.max_queued_messages_set(0)
        self.c.on_message = lambda _c, _u, m: self.messages.put(m)
        self.c.on_connect = lambda *_a: self._connected.set()
        self.c.on_publish = self._on_publish
        self.c.on_subscribe = lambda _c, _u, _mid, codes, _p: self._subacks.put(
            [int(c.value) for c in codes])
        self.c.connect("127.0.0.1", port, keepalive=30)
        self.c.loop_start()
        assert self._connected.wait(TIMEOUT), "no CONNACK"

    def _on_publish(self, _c: Any, _u: Any, mid: int, _rc: Any, _p: Any) -> None:
        with self._acks:
            self.acked.add(mid)
            self._acks.notify_all()

    def subscribe(self, topic: str, qos: int) -> list[int]:
        self.c.subscribe(topic, qos)
        return self._subacks.get(timeout=TIMEOUT)

    def publish(self, topic: str, payload: bytes | str, qos: int = 1, retain: bool = False
                ) -> int:
        info = self.c.publish(topic, payload, qos, retain)
        assert info.rc == mqtt.MQTT_ERR_SUCCESS, info.rc
        return int(info.mid)

    def _wait_for_acks(self, done: Callable[[], bool], timeout: float) -> bool:
        """Block until ``done()`` holds for the PUBACKs seen so far; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._acks:
            while not done():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._acks.wait(left)
        return True

    def wait_acked(self, mids: list[int], timeout: float = TIMEOUT) -> None:
        wanted = set(mids)
        assert self._wait_for_acks(lambda: wanted <= self.acked, timeout), \
            f"{len(wanted - self.acked)} publishes not acknowledged"

    def wait_ack_count(self, count: int, timeout: float = 20.0) -> None:
        """Block until ``count`` PUBACKs arrived (or the timeout passed)."""
        self._wait_for_acks(lambda: len(self.acked) >= count, timeout)

    def get(self, timeout: float = TIMEOUT) -> mqtt.MQTTMessage:
        return self.messages.get(timeout=timeout)

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def amqp(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", port, socket_timeout=5, blocked_connection_timeout=10,
        connection_attempts=1))


def consume(ch: Any, queue_name: str, n: int, timeout: float = TIMEOUT,
            idle: float | None = None) -> list[Any]:
    """Up to ``n`` deliveries ``(method, properties, body)`` from ``queue_name`` (acked);
    stops early after ``idle`` seconds without a delivery when given."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    for method, props, body in ch.consume(queue_name, inactivity_timeout=idle or 1.0):
        if method is not None:
            got.append((method, props, body))
            ch.basic_ack(method.delivery_tag)
            if len(got) == n:
                break
        elif idle is not None or time.monotonic() > deadline:
            break
    ch.cancel()
    return got


def find(server: ServerProcess, collection: str, *args: str) -> list[dict[str, Any]]:
    res = server.cli("find", collection, *args, "--json")
    return [json.loads(line) for line in res.stdout.splitlines()]


def status(server: ServerProcess) -> dict[str, Any]:
    return dict(json.loads(server.cli("status", "--json").stdout))


def eventually(check: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    """Poll a CLI-visible condition (the CLI is the only event a test can see there)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def publish_until_killed(server: ServerProcess, topic: str, n: int) -> dict[int, int]:
    """Publish ``n`` QoS 1 readings as fast as PUBACKs allow; SIGKILL the server halfway
    through; return ``{mid: seq}`` of the readings that were acknowledged."""
    client = Mqtt(server.mqtt_port)
    sent: dict[int, int] = {}
    killer = threading.Thread(target=lambda: (client.wait_ack_count(n // 2), server.kill()))
    killer.start()
    try:
        for seq in range(n):
            try:
                sent[client.publish(topic, json.dumps({"seq": seq}), 1)] = seq
            except AssertionError:
                break  # the connection is gone
            if server.proc is not None and server.proc.poll() is not None:
                break
    finally:
        killer.join(30)
        client.close()
    acked = {mid: seq for mid, seq in sent.items() if mid in client.acked}
    assert len(acked) >= n // 2
    return acked

