"""A paho-mqtt client speaking MQTT 5 (``protocol=MQTTv5``), for the ``test_mqtt5_*`` tests:
CONNACK reason code and properties, received messages with their properties, the reason
codes of acknowledgements and of a server's DISCONNECT, each in a queue to wait on."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

TIMEOUT = 10.0


#: The ``v5`` fixture (tests/mqtt/conftest.py): ``v5(port, client_id)`` -> a Client5 closed
#: at teardown.
Make5 = Callable[..., "Client5"]


def props(kind: int = PacketTypes.PUBLISH, **values: Any) -> Properties:
    """paho ``Properties`` of packet ``kind`` with ``values`` (paho's property names)."""
    p = Properties(kind)
    for name, value in values.items():
        setattr(p, name, value)
    return p


class Client5:
    """One MQTT 5 paho client with its events in queues."""

    def __init__(self, port: int | None, client_id: str = "") -> None:
        assert port is not None
        self.port = port
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self.connack: queue.Queue[tuple[int, bool, Properties | None]] = queue.Queue()
        self.disconnects: queue.Queue[tuple[int, Properties | None]] = queue.Queue()
        self.acks: dict[int, int] = {}  # mid -> reason code of its PUBACK/PUBREC/PUBCOMP
        self._acked = threading.Condition()
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                             protocol=mqtt.MQTTv5)  # fmt: skip
        self.c.on_message = lambda _c, _u, m: self.messages.put(m)
        self.c.on_connect = lambda _c, _u, flags, rc, p: self.connack.put(
            (rc.value, bool(flags.session_present), p))
        self.c.on_disconnect = lambda _c, _u, _f, rc, p: self.disconnects.put((rc.value, p))
        self.c.on_publish = self._on_publish

    def _on_publish(self, _c: Any, _u: Any, mid: int, rc: Any, _p: Any) -> None:
        with self._acked:
            self.acks[mid] = rc.value
            self._acked.notify_all()

    def connect(self, clean_start: bool = True, expect: int = 0, keepalive: int = 60,
                properties: Properties | None = None,
                will: tuple[str, bytes, int, bool, Properties | None] | None = None
                ) -> tuple[bool, Properties | None]:  # fmt: skip
        """Connect, wait for CONNACK (reason ``expect``); ``(session present, its
        properties)``."""
        if will is not None:
            topic, payload, qos, retain, wprops = will
            self.c.will_set(topic, payload, qos, retain, properties=wprops)
        self.c.connect("127.0.0.1", self.port, keepalive=keepalive, clean_start=clean_start,
                       properties=properties)  # fmt: skip
        self.c.loop_start()
        rc, present, p = self.connack.get(timeout=TIMEOUT)
        assert rc == expect, f"CONNACK {rc:#x} != {expect:#x}"
        return present, p

    def subscribe(self, topic: str, qos: int = 0, sid: int | None = None,
                  **options: Any) -> list[int]:
        """SUBSCRIBE one filter with ``SubscribeOptions`` (noLocal, retainAsPublished,
        retainHandling) and a Subscription Identifier; the SUBACK's reason codes."""
        done = threading.Event()
        codes: list[int] = []

        def on_sub(_c: Any, _u: Any, _mid: int, rcs: list[Any], _p: Any) -> None:
            codes.extend(rc.value for rc in rcs)
            done.set()

        self.c.on_subscribe = on_sub
        opts = mqtt.SubscribeOptions(qos=qos, **options)
        p = None if sid is None else props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=sid)
        rc, _mid = self.c.subscribe(topic, options=opts, properties=p)
        assert rc == 0
        assert done.wait(TIMEOUT), "no SUBACK"
        return codes

    def unsubscribe(self, *topics: str) -> list[int]:
        done = threading.Event()
        codes: list[int] = []

        def on_unsub(_c: Any, _u: Any, _mid: int, rcs: list[Any], _p: Any) -> None:
            codes.extend(rc.value for rc in rcs)
            done.set()

        self.c.on_unsubscribe = on_unsub
        self.c.unsubscribe(list(topics))
        assert done.wait(TIMEOUT), "no UNSUBACK"
        return codes

    def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False,
                properties: Properties | None = None) -> int:  # fmt: skip
        """Publish and wait for its acknowledgement; its reason code (0 for QoS 0)."""
        info = self.c.publish(topic, payload, qos=qos, retain=retain, properties=properties)
        if qos == 0:
            info.wait_for_publish(TIMEOUT)
            return 0
        with self._acked:
            assert self._acked.wait_for(lambda: info.mid in self.acks, TIMEOUT), "no ack"
            return self.acks[info.mid]

    def get(self, timeout: float = TIMEOUT) -> mqtt.MQTTMessage:
        return self.messages.get(timeout=timeout)

    def nothing(self, wait: float = 0.3) -> bool:
        """True if no message arrives within ``wait`` (only for asserting an absence)."""
        try:
            self.messages.get(timeout=wait)
        except queue.Empty:
            return True
        return False

    def disconnect(self, reason: int = 0, properties: Properties | None = None) -> None:
        from paho.mqtt.reasoncodes import ReasonCode

        rc = ReasonCode(PacketTypes.DISCONNECT, identifier=reason)
        self.c.disconnect(reasoncode=rc, properties=properties)
        self.disconnects.get(timeout=TIMEOUT)
        self.c.loop_stop()

    def close(self) -> None:
        try:
            self.c.disconnect()
        finally:
            self.c.loop_stop()
