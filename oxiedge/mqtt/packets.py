"""MQTT 3.1.1 control packets as frozen, slotted dataclasses.

One class per packet type (spec section 3). They carry decoded, validated values only:
the codec (``oxiedge.mqtt.codec``) turns bytes into these objects and back. Nothing here
knows about sockets or the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class PacketType(IntEnum):
    """Control packet types (MQTT 3.1.1 2.2.1, MQTT 5 2.1.2)."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15  # MQTT 5 only (3.15); reserved in 3.1.1, which the 3.1.1 decoder refuses


#: Flags of the fixed header that are reserved with a fixed value (2.2.2, MQTT-3.6.1-1,
#: MQTT-3.8.1-1, MQTT-3.10.1-1): 0010 for PUBREL, SUBSCRIBE and UNSUBSCRIBE, else 0000.
RESERVED_FLAGS = {PacketType.PUBREL: 0x2, PacketType.SUBSCRIBE: 0x2, PacketType.UNSUBSCRIBE: 0x2}


def first_byte(ptype: PacketType, flags: int | None = None) -> int:
    """The fixed header's first byte (2.2): the type and its flags (PUBLISH's flags are
    DUP/QoS/RETAIN, given by the caller; the others' are the reserved ones)."""
    return ptype << 4 | (RESERVED_FLAGS.get(ptype, 0) if flags is None else flags)


class ConnackCode(IntEnum):
    """CONNACK return codes (3.2.2.3)."""

    ACCEPTED = 0
    UNACCEPTABLE_PROTOCOL_VERSION = 1
    IDENTIFIER_REJECTED = 2
    SERVER_UNAVAILABLE = 3
    BAD_USERNAME_OR_PASSWORD = 4
    NOT_AUTHORIZED = 5


#: SUBACK return code for a refused subscription (3.9.3).
SUBACK_FAILURE = 0x80


@dataclass(frozen=True, slots=True)
class Will:
    """The will message carried in CONNECT (3.1.2.5 - 3.1.2.7, 3.1.3.2 - 3.1.3.3)."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False


@dataclass(frozen=True, slots=True)
class Connect:
    """CONNECT (3.1). ``protocol_name``/``protocol_level`` are kept as received so the
    broker can answer an unsupported level with CONNACK 1 (MQTT-3.1.2-2)."""

    client_id: str
    clean_session: bool = True
    keep_alive: int = 0
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    protocol_name: str = "MQTT"
    protocol_level: int = 4


@dataclass(frozen=True, slots=True)
class Connack:
    """CONNACK (3.2)."""

    return_code: int = 0
    session_present: bool = False


@dataclass(frozen=True, slots=True)
class Publish:
    """PUBLISH (3.3). ``packet_id`` is None for QoS 0 (MQTT-2.3.1-5)."""

    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None


@dataclass(frozen=True, slots=True)
class Puback:
    """PUBACK (3.4)."""

    packet_id: int


@dataclass(frozen=True, slots=True)
class Pubrec:
    """PUBREC (3.5)."""

    packet_id: int


@dataclass(frozen=True, slots=True)
class Pubrel:
    """PUBREL (3.6)."""

    packet_id: int


@dataclass(frozen=True, slots=True)
class Pubcomp:
    """PUBCOMP (3.7)."""

    packet_id: int


@dataclass(frozen=True, slots=True)
class Subscribe:
    """SUBSCRIBE (3.8): ``topics`` is a tuple of ``(filter, requested QoS)``."""

    packet_id: int
    topics: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Suback:
    """SUBACK (3.9): one return code per requested filter (0, 1, 2 or 0x80)."""

    packet_id: int
    return_codes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    """UNSUBSCRIBE (3.10)."""

    packet_id: int
    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Unsuback:
    """UNSUBACK (3.11)."""

    packet_id: int


@dataclass(frozen=True, slots=True)
class Pingreq:
    """PINGREQ (3.12)."""


@dataclass(frozen=True, slots=True)
class Pingresp:
    """PINGRESP (3.13)."""


@dataclass(frozen=True, slots=True)
class Disconnect:
    """DISCONNECT (3.14)."""


Packet = (
    Connect
    | Connack
    | Publish
    | Puback
    | Pubrec
    | Pubrel
    | Pubcomp
    | Subscribe
    | Suback
    | Unsubscribe
    | Unsuback
    | Pingreq
    | Pingresp
    | Disconnect
)
