"""SIGKILL the real server while MQTT 5 wills wait out their Will Delay Interval: a will
whose time came while the broker was down is sent after the restart, one whose session was
resumed before the crash is not, and one whose session ended first goes at that end."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable

from oxiedge.mqtt.encode5 import encode5
from oxiedge.mqtt.packets5 import Connect5, Will5
from oxiedge.mqtt.properties import Properties
from oxiedge.mqtt.wills import decode_will, encode_will
from tests.conftest import ServerProcess
from tests.mqtt.paho5 import Client5, props

Start = Callable[..., ServerProcess]
KEEP = props(1, SessionExpiryInterval=3600)


def test_will_record_round_trip() -> None:
    will = Will5("w/a", b"\x00gone", 2, True,
                 Properties(will_delay_interval=30, content_type="text/plain",
                            message_expiry_interval=60, user_properties=(("k", "v"),)))
    at, back = decode_will(encode_will(1_800_000_000.25, will))
    assert at == 1_800_000_000.25
    assert back == Will5("w/a", b"\x00gone", 2, True,
                         will.properties._replace(will_delay_interval=None))
    for bad in (b"", encode_will(1.0, will)[:12], b"\x00" * 8 + b"\x03\x00\x01w\x00"):
        try:
            decode_will(bad)
        except ValueError:
            continue
        raise AssertionError(f"decoded {bad!r}")


def _with_will(port: int | None, client_id: str, delay: int, expiry: int) -> socket.socket:
    """A raw MQTT 5 connection whose will (topic ``wd/<client id>``) waits ``delay`` s."""
    assert port is not None
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    will = Will5(f"wd/{client_id}", client_id.encode(), 1, False,
                 Properties(will_delay_interval=delay, content_type="text/plain"))
    s.sendall(encode5(Connect5(client_id, True, 60, will=will,
                               properties=Properties(session_expiry_interval=expiry))))
    assert s.recv(64)[:1] == b"\x20"
    return s


def _waiting(server: ServerProcess) -> int:
    return int(json.loads(server.cli("status", "--json").stdout)["mqtt"]["wills_waiting"])


def test_delayed_wills_survive_sigkill(start_mqtt: Start) -> None:
    server = start_mqtt()
    watcher = Client5(server.mqtt_port, "wd-watch")
    watcher.connect(properties=KEEP)
    assert watcher.subscribe("wd/#", 1) == [1]
    watcher.disconnect()
    _with_will(server.mqtt_port, "late", 3, 3600).close()  # no DISCONNECT: the will waits
    _with_will(server.mqtt_port, "ends", 3600, 2).close()  # its session ends first (2 s)
    _with_will(server.mqtt_port, "back", 3, 3600).close()
    deadline = time.monotonic() + 10
    while _waiting(server) < 3:
        assert time.monotonic() < deadline, "the wills never started waiting"
        time.sleep(0.1)
    back = Client5(server.mqtt_port, "back")  # resumed within the delay: no will
    back.connect(clean_start=False, properties=KEEP)
    back.disconnect()
    barrier = Client5(server.mqtt_port, "wd-barrier")  # one more commit round, then SIGKILL
    barrier.connect()
    assert barrier.publish("wd-none/x", b"", 1) == 0x10  # (acknowledged: nobody took it)
    barrier.close()
    assert _waiting(server) == 2
    killed = time.monotonic()
    server.kill()
    time.sleep(max(0.0, killed + 3.5 - time.monotonic()))  # both wills fall due while down
    server.start()
    watcher = Client5(server.mqtt_port, "wd-watch")
    assert watcher.connect(clean_start=False, properties=KEEP)[0]
    got = sorted((watcher.get(), watcher.get()), key=lambda m: m.topic)
    assert [(m.topic, m.payload) for m in got] == [("wd/ends", b"ends"), ("wd/late", b"late")]
    assert all(m.properties.ContentType == "text/plain" for m in got)
    assert watcher.nothing(1.5)  # not "back"'s
    assert _waiting(server) == 0
    watcher.close()
