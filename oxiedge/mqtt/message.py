"""A published message, as every session it is delivered to shares it: ``Message`` (any
publisher: MQTT 3.1.1, a will, a bridge, the bus) and ``Message5`` (an MQTT 5 publisher's,
with the properties its subscribers get and its expiry deadline), and their ``m`` records
(``persist.py``: an MQTT 5 one has flag ``MSG_V5`` and its properties after the topic).

The properties are stored byte for byte as subscribers receive them, and the Message
Expiry Interval as an absolute wall-clock deadline, so the clock runs while the broker is
down (``forward5.py`` has why and how they are forwarded).
"""

from __future__ import annotations

import math

from oxiedge.mqtt import persist
from oxiedge.mqtt.bodies import ProtocolError
from oxiedge.mqtt.encode import encode_publish
from oxiedge.mqtt.packets import PacketType
from oxiedge.mqtt.persist import MSG_V5, v5_part_end
from oxiedge.mqtt.properties import Properties, decode_properties, encode_properties

_PUBLISH = PacketType.PUBLISH
#: The longest Message Expiry Interval a PUBLISH can say (4 bytes of seconds, 3.3.2.3.3).
EXPIRY_MAX = 0xFFFFFFFF


def expiry_left(exp: float, now: float) -> int:
    """The Message Expiry Interval to forward at ``now`` for the deadline ``exp``
    (MQTT-3.3.2-6): whole seconds rounded up, at least 1, at most ``EXPIRY_MAX`` (a deadline
    ``EXPIRY_MAX`` seconds off can round up past it)."""
    return min(EXPIRY_MAX, max(1, math.ceil(exp - now)))


class Message:
    """One published message, shared by every session it is delivered to."""

    __slots__ = ("payload", "qos0", "qos0v5", "topic", "topic_b")

    def __init__(self, topic: str, payload: bytes, topic_b: bytes | None = None) -> None:
        self.topic = topic
        self.topic_b = topic.encode("utf-8") if topic_b is None else topic_b
        self.payload = payload
        self.qos0: bytes | None = None  # the QoS 0 PUBLISH bytes, encoded once for fan-out
        # ... and for MQTT 5 subscribers (``forward5.Peer5``): encoded once, or the frame an
        # MQTT 5 publisher sent when it is exactly that
        self.qos0v5: bytes | None = None

    def qos0_bytes(self) -> bytes:
        raw = self.qos0
        if raw is None:
            raw = self.qos0 = encode_publish(self.topic_b, self.payload)
        return raw

    def record(self, qos: int, retain: bool) -> bytes:
        """Its ``m`` record's value (``Message5`` adds its properties)."""
        return persist.encode_msg(qos, retain, self.topic_b, self.payload)


class Message5(Message):
    """A message from an MQTT 5 publisher: its forwarded properties (``props``), their
    encoded block (``block``) and its expiry deadline (``expires_at``, wall clock)."""

    __slots__ = ("block", "expires_at", "props")

    def __init__(self, topic: str, payload: bytes, topic_b: bytes | None,
                 props: Properties, expires_at: float | None) -> None:  # fmt: skip
        super().__init__(topic, payload, topic_b)
        self.props = props
        self.expires_at = expires_at
        self.block = encode_properties(props, _PUBLISH)

    def record(self, qos: int, retain: bool) -> bytes:
        """Its ``m`` record (``persist.py``): flag ``MSG_V5``, then after the topic the
        deadline in wall-clock milliseconds (0: none) and the property block, byte for
        byte as subscribers get it."""
        return persist.encode_msg(qos | MSG_V5, retain, self.topic_b, self.body())

    def body(self) -> bytes:
        """What follows the topic in its records: the MQTT 5 part, then the payload."""
        exp = self.expires_at
        deadline = 0 if exp is None else max(1, round(exp * 1000))
        return deadline.to_bytes(8, "big") + self.block + self.payload

    def expired(self, now: float) -> bool:
        exp = self.expires_at
        return exp is not None and exp <= now

    def remaining(self, now: float) -> int | None:
        """The Message Expiry Interval to forward now (MQTT-3.3.2-6), None without one."""
        exp = self.expires_at
        return None if exp is None else expiry_left(exp, now)


def message_of(topic: str, topic_b: bytes, value: bytes, off: int) -> Message5:
    """The ``Message5`` of an ``m`` record whose MQTT 5 part starts at ``off``; ValueError
    for one that does not decode (the caller quarantines it)."""
    try:
        end = v5_part_end(value, off)
        deadline = int.from_bytes(value[off:off + 8], "big")
        props, _ = decode_properties(value[:end], off + 8, _PUBLISH)
    except (ProtocolError, IndexError) as exc:
        raise ValueError(f"MQTT 5 part of a message record: {exc}") from None
    return Message5(topic, value[end:], topic_b, props, deadline / 1000 if deadline else None)
