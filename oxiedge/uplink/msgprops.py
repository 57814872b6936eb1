"""A message's properties (``staged.MessageProps``) in an outbox record and in the MQTT 5
PUBLISH a link sends upstream (sans-IO).

In an outbox record (``outbox.py``, flag ``PROPS``) they follow the topic: the Message
Expiry deadline (Q, wall-clock milliseconds; 0: none), then an MQTT 5 PUBLISH property
block with the others (Payload Format Indicator, Content Type, Response Topic, Correlation
Data, User Properties in order). So they reach the upstream byte for byte after a restart,
and the expiry clock runs while the device is down or offline: a message whose deadline
passed in the outbox is not sent (the link drops it as confirmed, ``expired``).
"""

from __future__ import annotations

import struct
import time

from ..mqtt.bodies import ProtocolError
from ..mqtt.forward5 import forwarded, to_bus
from ..mqtt.message import expiry_left
from ..mqtt.packets import PacketType
from ..mqtt.packets5 import Publish5
from ..mqtt.properties import NO_PROPERTIES, Properties, decode_properties, encode_properties
from ..staged import MessageProps

_DEADLINE = struct.Struct(">Q")
_PUBLISH = PacketType.PUBLISH


def _mqtt(mp: MessageProps, expiry: int | None = None) -> Properties:
    return Properties(payload_format_indicator=mp.payload_format_indicator,
                      message_expiry_interval=expiry, content_type=mp.content_type,
                      response_topic=mp.response_topic, correlation_data=mp.correlation_data,
                      user_properties=mp.user_properties)


def encode_props(mp: MessageProps) -> bytes:
    """The record form of ``mp`` (module docstring)."""
    exp = mp.expires_at
    deadline = 0 if exp is None else max(1, round(exp * 1000))
    return _DEADLINE.pack(deadline) + encode_properties(_mqtt(mp), _PUBLISH)


def decode_props(value: bytes, off: int) -> tuple[MessageProps, int]:
    """The properties at ``value[off]`` and the offset after them; ValueError if they do
    not decode."""
    try:
        deadline = _DEADLINE.unpack_from(value, off)[0]
        p, end = decode_properties(bytes(value), off + _DEADLINE.size, _PUBLISH)
    except (struct.error, ProtocolError, IndexError) as exc:
        raise ValueError(f"message properties: {exc}") from None
    if p.message_expiry_interval is not None or p.topic_alias is not None \
            or p.subscription_identifiers:
        raise ValueError("message properties: a property a message does not keep")
    return MessageProps(p.payload_format_indicator, deadline / 1000 if deadline else None,
                        p.content_type, p.response_topic, p.correlation_data,
                        p.user_properties), end


def expired(mp: MessageProps, now: float) -> bool:
    """Whether a message with ``mp`` is past its Message Expiry at ``now`` (wall clock)."""
    return mp.expires_at is not None and mp.expires_at <= now


def publish_block(mp: MessageProps | None, now: float) -> bytes | None:
    """The property block of the MQTT 5 PUBLISH of a message with ``mp`` sent at ``now``
    (wall clock): the Message Expiry Interval is what is left (MQTT-3.3.2-6). None: it
    expired (not to be sent)."""
    if mp is None:
        return b"\x00"
    exp = mp.expires_at
    if exp is not None and exp <= now:
        return None
    p = _mqtt(mp, None if exp is None else expiry_left(exp, now))
    return b"\x00" if p == NO_PROPERTIES else encode_properties(p, _PUBLISH)


def inbound_props(msg: object) -> MessageProps | None:
    """The properties an inbound message from an upstream is published with here: an MQTT
    5 PUBLISH's, as a subscriber here gets them (None: a 3.1.1 one)."""
    if not isinstance(msg, Publish5):
        return None
    fwd, expires_at = forwarded(msg.properties, time.time())
    return to_bus(fwd, expires_at)
