"""Fixtures for the MQTT tests: a real ``oxiedge serve`` (MQTT only), paho clients, and
a real RocksDB store for the broker-core tests (``store``).

Built on the project-wide ``start_server`` fixture (``tests/conftest.py``).
"""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest

from oxiedge.store import Store
from tests.conftest import ServerProcess

ROOT = Path(__file__).resolve().parents[2]


def wait_for(pred: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll ``pred`` until it holds; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A real store, no committer task (commit with ``commit_blocking``)."""
    s = Store.open(tmp_path / "db")
    yield s
    s.close()


def cli_rows(srv: ServerProcess, *args: str) -> list[dict[str, Any]]:
    """``oxiedge ARGS --json``: one row a line (live through the admin socket, or offline)."""
    out = srv.cli(*args, "--json")
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


@pytest.fixture
def start_mqtt(start_server: Callable[..., ServerProcess]) -> Callable[..., ServerProcess]:
    """``start_mqtt(*args, env=None, data=None)`` -> a ready server with MQTT on a free
    port and AMQP off (the project-wide ``start_server`` fixture kills it afterwards)."""

    def start(*args: str, env: dict[str, str] | None = None, data: Path | None = None
              ) -> ServerProcess:  # fmt: skip
        return start_server("--amqp-port", "off", *args, env=env, data=data)

    return start


@pytest.fixture
def mqtt_server(start_mqtt: Callable[..., ServerProcess]) -> ServerProcess:
    return start_mqtt()


@pytest.fixture(scope="module")
def shared_mqtt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for a whole module, for tests that use their own client ids and topics
    and leave no retained messages behind."""
    srv = ServerProcess(tmp_path_factory.mktemp("shared"), ("--amqp-port", "off"), None)
    srv.start()
    yield srv
    srv.kill()


# ----------------------------------------------------------------- paho helpers

TIMEOUT = 10.0
# paho's v2 API reports MQTT 3.1.1 CONNACK codes as MQTT 5 reason codes; map them back.
_V3_CODES = {0: 0, 132: 1, 133: 2, 136: 3, 134: 4, 135: 5}


class Client:
    """A paho client (v2 callback API) with its received messages in a queue."""

    def __init__(self, port: int | None, client_id: str = "", clean: bool = True, **kw: Any
                 ) -> None:  # fmt: skip
        assert port is not None, "server has no MQTT port"
        self.port = port
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self.connack: queue.Queue[tuple[int, bool]] = queue.Queue()
        self.disconnected = threading.Event()
        self.c = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean, **kw
        )
        self.c.on_message = lambda _c, _u, m: self.messages.put(m)
        self.c.on_connect = lambda _c, _u, flags, rc, _p: self.connack.put(
            (_V3_CODES.get(rc.value, rc.value), bool(flags.session_present))
        )
        self.c.on_disconnect = lambda *_a: self.disconnected.set()

    def connect(self, keepalive: int = 60, expect_rc: int = 0,
                will: tuple[str, bytes, int, bool] | None = None,
                auth: tuple[str, str] | None = None) -> bool:  # fmt: skip
        """Connect and wait for CONNACK; returns session_present."""
        if will is not None:
            self.c.will_set(*will)
        if auth is not None:
            self.c.username_pw_set(*auth)
        self.c.connect("127.0.0.1", self.port, keepalive=keepalive)
        self.c.loop_start()
        rc, present = self.connack.get(timeout=TIMEOUT)
        assert rc == expect_rc, f"CONNACK {rc} != {expect_rc}"
        return present

    def subscribe(self, *filters: tuple[str, int]) -> list[int]:
        done = threading.Event()
        codes: list[int] = []

        def on_sub(_c: Any, _u: Any, _mid: int, rcs: list[Any], _p: Any) -> None:
            codes.extend(rc.value if hasattr(rc, "value") else int(rc) for rc in rcs)
            done.set()

        self.c.on_subscribe = on_sub
        rc, _mid = self.c.subscribe(list(filters))
        assert rc == 0
        assert done.wait(TIMEOUT), "no SUBACK"
        return codes

    def publish(self, topic: str, payload: bytes | str, qos: int = 0, retain: bool = False
                ) -> None:  # fmt: skip
        info = self.c.publish(topic, payload, qos=qos, retain=retain)
        info.wait_for_publish(TIMEOUT)
        assert info.is_published(), "publish not acknowledged"

    def get(self, timeout: float = TIMEOUT) -> mqtt.MQTTMessage:
        return self.messages.get(timeout=timeout)

    def get_n(self, n: int, timeout: float = TIMEOUT) -> list[mqtt.MQTTMessage]:
        deadline = time.monotonic() + timeout
        return [self.messages.get(timeout=max(0.01, deadline - time.monotonic()))
                for _ in range(n)]  # fmt: skip

    def assert_nothing(self, wait: float = 0.3) -> None:
        """Nothing arrives within ``wait`` (only for asserting an absence)."""
        with pytest.raises(queue.Empty):
            m = self.messages.get(timeout=wait)
            pytest.fail(f"unexpected message {m.topic} {m.payload!r}")

    def disconnect(self) -> None:
        self.c.disconnect()
        self.disconnected.wait(TIMEOUT)
        self.c.loop_stop()

    def drop(self) -> None:
        """Close the socket without DISCONNECT (abnormal end)."""
        self.c.loop_stop()
        sock = self.c.socket()
        if isinstance(sock, socket.socket):
            sock.shutdown(socket.SHUT_RDWR)
            sock.close()


@pytest.fixture
def clients() -> Iterator[Callable[..., Client]]:
    made: list[Client] = []

    def make(port: int | None, client_id: str = "", clean: bool = True, **kw: Any) -> Client:
        c = Client(port, client_id, clean, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        try:
            c.c.disconnect()
            c.c.loop_stop()
        except Exception:
            pass


@pytest.fixture
def v5() -> Iterator[Any]:
    """``v5(port, client_id="")``: a paho MQTT 5 client (tests/mqtt/paho5.py), closed at
    teardown."""
    from .paho5 import Client5

    made: list[Client5] = []

    def make(port: int | None, client_id: str = "") -> Client5:
        c = Client5(port, client_id)
        made.append(c)
        return c

    yield make
    for c in made:
        try:
            c.close()
        except Exception:
            pass
