"""A SUBSCRIBE with more filters than fit a one-byte remaining length gets a valid SUBACK."""

from __future__ import annotations

import threading
from typing import Any

import paho.mqtt.client as mqtt

from tests.conftest import ServerProcess


def test_subscribe_with_200_filters(server: ServerProcess) -> None:
    granted: list[int] = []
    done = threading.Event()
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="many-filters")

    def on_subscribe(_c: object, _u: object, _mid: int, codes: list[Any], _p: object) -> None:
        granted.extend(int(getattr(code, "value", code)) for code in codes)
        done.set()

    c.on_subscribe = on_subscribe
    assert server.mqtt_port is not None
    c.connect("127.0.0.1", server.mqtt_port)
    c.loop_start()
    c.subscribe([(f"many/{i}", 1) for i in range(200)])
    assert done.wait(10)
    c.disconnect()
    c.loop_stop()
    assert granted == [1] * 200
