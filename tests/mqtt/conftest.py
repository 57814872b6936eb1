"""Fixtures for the MQTT tests: a real ``oxiedge serve`` subprocess and paho clients.

``mqtt_server`` starts the server on a free loopback port (``--mqtt-port 0``, the port is
parsed from the ``MQTT listening on`` line) with AMQP off. Uses the project-wide
``start_server`` fixture from ``tests/conftest.py`` when it exists.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest

ROOT = Path(__file__).resolve().parents[2]
_LISTEN = re.compile(r"^MQTT listening on 127\.0\.0\.1:(\d+)")
START_TIMEOUT = 30.0


class Server:
    """A running ``oxiedge serve`` process (MQTT only)."""

    def __init__(self, data: Path, args: list[str], env: dict[str, str] | None = None) -> None:
        self.data = data
        self.args = args
        self.env = env
        self.proc: subprocess.Popen[str] | None = None
        self.log_lines: list[str] = []
        self.mqtt_port = 0
        self._ready = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> Server:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        env.update(self.env or {})
        cmd = [sys.executable, "-m", "oxiedge", "serve", "--data", str(self.data),
               "--mqtt-port", str(self.mqtt_port), "--amqp-port", "off", *self.args]  # fmt: skip
        self._ready = threading.Event()
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT
        )
        threading.Thread(target=self._pump, args=(self.proc,), daemon=True).start()
        if not self._ready.wait(START_TIMEOUT) or self.proc.poll() is not None:
            self.proc.kill()
            raise RuntimeError("server did not become ready:\n" + "\n".join(self.log_lines))
        return self

    def _pump(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            with self._lock:
                self.log_lines.append(line)
            m = _LISTEN.match(line)
            if m:
                self.mqtt_port = int(m.group(1))
            if line.startswith("oxiedge ready"):
                self._ready.set()
        self._ready.set()

    def lines(self) -> list[str]:
        with self._lock:
            return list(self.log_lines)

    def kill(self) -> None:
        """SIGKILL (what a power cut looks like to the process)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                raise
        return self.proc.returncode if self.proc is not None else 0

    def restart(self, keep_port: bool = True) -> Server:
        self.kill()
        self.log_lines.clear()
        if not keep_port:
            self.mqtt_port = 0
        return self.start()


@pytest.fixture
def start_mqtt(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """``start_mqtt(*args, env=None, data=None)`` -> a ready ``Server``; all are killed
    at the end of the test."""
    started: list[Server] = []

    def start(*args: str, env: dict[str, str] | None = None, data: Path | None = None) -> Server:
        srv = Server(data or tmp_path / f"data{len(started)}", list(args), env).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.kill()


@pytest.fixture
def mqtt_server(start_mqtt: Callable[..., Server]) -> Server:
    return start_mqtt()


# ----------------------------------------------------------------- paho helpers

TIMEOUT = 10.0
# paho's v2 API reports MQTT 3.1.1 CONNACK codes as MQTT 5 reason codes; map them back.
_V3_CODES = {0: 0, 132: 1, 133: 2, 136: 3, 134: 4, 135: 5}


class Client:
    """A paho client (v2 callback API) with its received messages in a queue."""

    def __init__(self, port: int, client_id: str = "", clean: bool = True, **kw: Any) -> None:
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
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
            sock.close()


@pytest.fixture
def clients() -> Iterator[Callable[..., Client]]:
    made: list[Client] = []

    def make(port: int, client_id: str = "", clean: bool = True, **kw: Any) -> Client:
        c = Client(port, client_id, clean, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        try:
            c.c.loop_stop()
            c.c.disconnect()
        except Exception:
            pass
