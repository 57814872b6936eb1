"""MQTT 5 control packets as frozen, slotted dataclasses (spec chapter 3).

A class per packet type, named with a ``5`` where MQTT 3.1.1 has a class of the same role
(``oxiedge.mqtt.packets``), so a module that handles both versions can import both without
aliases. PINGREQ and PINGRESP are the same in both versions (``packets.Pingreq``,
``packets.Pingresp``); AUTH exists only in MQTT 5. Every packet that may carry properties has
a ``properties`` field, ``NO_PROPERTIES`` (shared) when it has none; reason codes are plain
ints (``oxiedge.mqtt.reasons.ReasonCode`` names them).

On the hot paths a PUBLISH is not a ``Publish5`` but a ``RawPublish5`` tuple and a PUBACK
without reason code or properties a bare packet id (``oxiedge.mqtt.codec``).
"""

from __future__ import annotations

from dataclasses import dataclass

from oxiedge.mqtt.packets import Pingreq, Pingresp
from oxiedge.mqtt.properties import NO_PROPERTIES, Properties


@dataclass(frozen=True, slots=True)
class Will5:
    """The will of a CONNECT (3.1.2.5 - 3.1.2.7, 3.1.3.2 - 3.1.3.4), with its properties."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Connect5:
    """CONNECT (3.1) at protocol level 5. ``clean_start`` is 3.1.1's clean session bit; in
    MQTT 5 the session's end is the Session Expiry Interval property. A Password without a
    User Name is allowed (3.1.2.9)."""

    client_id: str
    clean_start: bool = True
    keep_alive: int = 0
    username: str | None = None
    password: bytes | None = None
    will: Will5 | None = None
    properties: Properties = NO_PROPERTIES

    # (properties, not ClassVars: mypyc would take a ClassVar with a value for a field)
    @property
    def protocol_name(self) -> str:
        """Always "MQTT" (3.1.2.1), as ``packets.Connect.protocol_name``."""
        return "MQTT"

    @property
    def protocol_level(self) -> int:
        """Always 5 (3.1.2.2), as ``packets.Connect.protocol_level``."""
        return 5


@dataclass(frozen=True, slots=True)
class Connack5:
    """CONNACK (3.2). Session Present is 0 when the reason code is not 0 (MQTT-3.2.2-6)."""

    reason_code: int = 0
    session_present: bool = False
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Publish5:
    """PUBLISH (3.3). ``topic`` may be empty when the properties carry a Topic Alias."""

    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Puback5:
    """PUBACK (3.4)."""

    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Pubrec5:
    """PUBREC (3.5)."""

    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Pubrel5:
    """PUBREL (3.6)."""

    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Pubcomp5:
    """PUBCOMP (3.7)."""

    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Subscription:
    """One topic filter of a SUBSCRIBE with its Subscription Options (3.8.3.1)."""

    topic_filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0  # 0 send retained, 1 only for a new subscription, 2 never

    @property
    def options(self) -> int:
        """The Subscription Options byte."""
        return (self.qos | (4 if self.no_local else 0) | (8 if self.retain_as_published else 0)
                | self.retain_handling << 4)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Subscribe5:
    """SUBSCRIBE (3.8); a Subscription Identifier is in ``properties``."""

    packet_id: int
    subscriptions: tuple[Subscription, ...]
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Suback5:
    """SUBACK (3.9): one reason code per filter, in order (MQTT-3.9.3-1)."""

    packet_id: int
    reason_codes: tuple[int, ...]
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Unsubscribe5:
    """UNSUBSCRIBE (3.10)."""

    packet_id: int
    topics: tuple[str, ...]
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Unsuback5:
    """UNSUBACK (3.11): unlike 3.1.1's, one reason code per filter."""

    packet_id: int
    reason_codes: tuple[int, ...]
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Disconnect5:
    """DISCONNECT (3.14), sent by either side in MQTT 5."""

    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Auth:
    """AUTH (3.15): enhanced authentication (MQTT 5 only)."""

    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


Packet5 = (
    Connect5
    | Connack5
    | Publish5
    | Puback5
    | Pubrec5
    | Pubrel5
    | Pubcomp5
    | Subscribe5
    | Suback5
    | Unsubscribe5
    | Unsuback5
    | Pingreq
    | Pingresp
    | Disconnect5
    | Auth
)
