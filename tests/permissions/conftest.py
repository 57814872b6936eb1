"""Helpers: users and rules written into a data dir before ``oxiedge serve`` starts, and
paho / pika clients that log in as those users."""

from __future__ import annotations

import json
import queue
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pika
import pika.exceptions
import pytest

from oxiedge.access.rules import validate
from oxiedge.auth import hash_password, write_user_file
from tests.conftest import ServerProcess

TIMEOUT = 10.0
PASSWORD = "pw-of-"  # + user name
Start = Callable[..., ServerProcess]


def prepare(data: Path, users: list[str], rules: dict[str, Any]) -> None:
    """Users (password ``pw-of-NAME``, a cheap hash: a test is not a brute-force target) and
    a permissions document, as `oxiedge user add` / `oxiedge acl|permissions` would leave."""
    data.mkdir(parents=True, exist_ok=True)
    write_user_file(data / "passwd", {u: hash_password(PASSWORD + u, 1000) for u in users})
    (data / "permissions.json").write_text(json.dumps(validate(rules)))


def rules(users: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"users": users or {}, **extra}


@pytest.fixture
def serve_with(start_server: Start, tmp_path: Path) -> Callable[..., ServerProcess]:
    def start(users: list[str], doc: dict[str, Any]) -> ServerProcess:
        prepare(tmp_path / "data", users, doc)
        return start_server()
    return start


class Client:
    """A paho client logged in as ``user``; received messages in a queue."""

    def __init__(self, port: int, user: str | None, client_id: str = "",
                 will: tuple[str, bytes] | None = None, password: str | None = None,
                 refused: bool = False, clean: bool = True) -> None:
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self._subacks: queue.Queue[list[int]] = queue.Queue()
        self._acks: queue.Queue[int] = queue.Queue()
        self._connected = threading.Event()
        self.rc: Any = None
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                             clean_session=clean)
        if user is not None:
            self.c.username_pw_set(user, PASSWORD + user if password is None else password)
        if will is not None:
            self.c.will_set(will[0], will[1], 1)
        self.c.on_message = lambda _c, _u, m: self.messages.put(m)
        self.c.on_connect = self._on_connect
        self.c.on_publish = lambda _c, _u, mid, _rc, _p: self._acks.put(mid)
        self.c.on_subscribe = lambda _c, _u, _mid, codes, _p: self._subacks.put(
            [int(c.value) for c in codes])
        self.c.connect("127.0.0.1", port, keepalive=30)
        self.c.loop_start()
        assert self._connected.wait(TIMEOUT), "no CONNACK"
        if refused:
            self.c.loop_stop()
            assert self.rc.is_failure, "CONNECT accepted"
            return
        assert not self.rc.is_failure, f"CONNECT refused: {self.rc}"

    def _on_connect(self, _c: Any, _u: Any, _f: Any, rc: Any, _p: Any) -> None:
        self.rc = rc
        self._connected.set()

    def subscribe(self, *filters: str, qos: int = 1) -> list[int]:
        self.c.subscribe([(f, qos) for f in filters])
        return self._subacks.get(timeout=TIMEOUT)

    def publish(self, topic: str, payload: bytes | str, qos: int = 1,
                retain: bool = False) -> None:
        """Publish and wait for the broker's acknowledgement (QoS 1: PUBACK, 2: PUBCOMP)."""
        info = self.c.publish(topic, payload, qos, retain)
        if qos:
            assert self._acks.get(timeout=TIMEOUT) == info.mid

    def topics(self, wait: float = 0.7) -> list[tuple[str, bytes, bool]]:
        """What arrived within ``wait`` seconds of the last message: (topic, payload, retain)."""
        got = []
        while True:
            try:
                m = self.messages.get(timeout=wait)
            except queue.Empty:
                return got
            got.append((m.topic, m.payload, bool(m.retain)))

    def drop(self) -> None:
        """Lose the connection without DISCONNECT (the will goes out, if allowed)."""
        self.c.loop_stop()
        sock = self.c.socket()
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def amqp(port: int, user: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", port, credentials=pika.PlainCredentials(user, PASSWORD + user),
        socket_timeout=5, blocked_connection_timeout=10, connection_attempts=1))


def refused(conn: pika.BlockingConnection, action: Callable[[Any], Any]) -> str:
    """Run ``action(channel)`` on a fresh channel; it must end in channel error 403."""
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        action(ch)
        ch.queue_declare("amq.gen-none", passive=True)  # a round trip: an async error shows
    assert info.value.reply_code == 403, info.value
    return str(info.value.reply_text)


def allowed(conn: pika.BlockingConnection, action: Callable[[Any], Any]) -> Any:
    ch = conn.channel()
    result = action(ch)
    ch.close()
    return result
