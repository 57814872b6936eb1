"""The packets of one MQTT uplink connection at its protocol level, sans-IO.

The MQTT link (``mqtt_link.py``) speaks MQTT 5 to an upstream that accepts it and 3.1.1 to
one that does not. ``Wire`` is the one place the two differ: it encodes what the link
sends at the connection's level, and decodes what the upstream sends into the 3.1.1
packet classes the link's logic is written for (``Connack``, ``Suback``, ``Unsuback``,
``Puback``, ``Pubrel``, ``Pingresp``), except an MQTT 5 PUBLISH, which stays a
``Publish5`` so its properties reach the local side, and a PUBACK that refuses the message
(reason code 0x80 or above), which stays a ``Puback5`` so the link can say why.

MQTT 5 specifics, each with its rule:

* CONNECT carries Clean Start 0 and a Session Expiry Interval of 0xFFFFFFFF: the session
  never expires upstream, as a 3.1.1 ``clean_session=0`` session (3.1.2.11.2; without the
  property an MQTT 5 session would end with the connection).
* An outbox message's properties (``msgprops.py``) go in its PUBLISH, the Message Expiry
  Interval reduced by the time it waited here (MQTT-3.3.2-6).
* A DISCONNECT from the upstream ends the link with its reason.
* CONNACK 0x84 (Unsupported Protocol Version), or a 3.1.1 CONNACK (two bytes, which the
  MQTT 5 decoder refuses as truncated), means the upstream does not speak MQTT 5
  (``Unsupported``): the link then connects at 3.1.1.
"""

from __future__ import annotations

import math

from ..mqtt.bodies import MalformedPacket
from ..mqtt.codec import encode, encode_publish
from ..mqtt.codec5 import Decoder5
from ..mqtt.encode5 import (
    encode5,
    encode_puback5,
    encode_pubcomp5,
    encode_publish5,
    encode_pubrec5,
)
from ..mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    Pingreq,
    Puback,
    Pubcomp,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
)
from ..mqtt.packets5 import (
    Connack5,
    Connect5,
    Disconnect5,
    Puback5,
    Publish5,
    Pubrel5,
    Suback5,
    Subscribe5,
    Subscription,
    Unsuback5,
    Unsubscribe5,
)
from ..mqtt.properties import Properties
from ..mqtt.reasons import ReasonCode, reason_name
from .link import LinkError

#: CONNACK return codes of MQTT 3.1.1 (3.2.2.3) as reasons.
CONNACK_REASONS = {
    1: "unacceptable protocol version",
    2: "client identifier rejected",
    3: "server unavailable",
    4: "bad user name or password",
    5: "not authorized",
}
#: MQTT 5 CONNECT: the upstream keeps our session for good (module docstring).
SESSION_FOREVER = Properties(session_expiry_interval=0xFFFFFFFF)
_PINGREQ = encode(Pingreq())


def keep_alive_seconds(heartbeat: float) -> int:
    """The CONNECT keep-alive for ``--heartbeat``: whole seconds (the field is 16-bit),
    rounded up; 0 (or less) disables keep-alive and dead-link detection."""
    if heartbeat <= 0:
        return 0
    return min(0xFFFF, max(1, math.ceil(heartbeat)))


class Unsupported(LinkError):
    """The upstream refused MQTT 5 (the link retries at 3.1.1)."""


class Wire:
    """Encoding and decoding at one protocol level: 5 (MQTT 5) or 4 (MQTT 3.1.1)."""

    __slots__ = ("decoder", "disconnect", "level", "pingreq")

    def __init__(self, level: int, max_packet: int) -> None:
        self.level = level
        # (an MQTT 5 decoder is the 3.1.1 one with methods added: one class for both)
        self.decoder = Decoder5(max_packet)
        self.pingreq = _PINGREQ
        self.disconnect = encode5(Disconnect5()) if level == 5 else encode(Disconnect())

    def feed(self, data: bytes | bytearray) -> None:
        self.decoder.feed(bytes(data))

    def connack_code(self, code: int) -> str:
        if self.level == 5:
            return f"CONNACK reason code 0x{code:02X}"
        return f"CONNACK return code {code}"

    def connack_reason(self, code: int) -> str:
        """A refusing CONNACK's code as words."""
        if self.level == 5:
            return reason_name(PacketType.CONNACK, code)
        return CONNACK_REASONS.get(code, "refused")

    # ------------------------------------------------------------------ out
    def connect(self, client_id: str, keep_alive: int, username: str | None,
                password: bytes | None) -> bytes:  # fmt: skip
        if self.level == 5:
            return encode5(Connect5(client_id, False, keep_alive, username, password,
                                    properties=SESSION_FOREVER))
        return encode(Connect(client_id=client_id, clean_session=False, keep_alive=keep_alive,
                              username=username, password=password))

    def subscribe(self, packet_id: int, filters: list[str]) -> bytes:
        """SUBSCRIBE ``filters`` at QoS 1."""
        if self.level == 5:
            return encode5(Subscribe5(packet_id, tuple(Subscription(f, 1) for f in filters)))
        return encode(Subscribe(packet_id, tuple((f, 1) for f in filters)))

    def unsubscribe(self, packet_id: int, filters: tuple[str, ...]) -> bytes:
        if self.level == 5:
            return encode5(Unsubscribe5(packet_id, filters))
        return encode(Unsubscribe(packet_id, filters))

    def publish(self, topic: bytes, payload: bytes, retain: bool, packet_id: int,
                block: bytes) -> bytes:  # fmt: skip
        """A QoS 1 PUBLISH; ``block``: the MQTT 5 property block (ignored at 3.1.1)."""
        if self.level == 5:
            return encode_publish5(topic, payload, 1, retain, False, packet_id, block)
        return encode_publish(topic, payload, 1, retain, False, packet_id)

    def puback(self, packet_id: int) -> bytes:
        return encode_puback5(packet_id) if self.level == 5 else encode(Puback(packet_id))

    def pubrec(self, packet_id: int) -> bytes:
        return encode_pubrec5(packet_id) if self.level == 5 else encode(Pubrec(packet_id))

    def pubcomp(self, packet_id: int) -> bytes:
        return encode_pubcomp5(packet_id) if self.level == 5 else encode(Pubcomp(packet_id))

    # ------------------------------------------------------------------- in
    def next_packet(self) -> Packet | Publish5 | Puback5 | None:
        """The next packet from the upstream (see the module docstring), None for more
        bytes. Raises ``ProtocolError`` for a malformed one, ``LinkError`` for a
        DISCONNECT, ``Unsupported`` for a refusal of MQTT 5."""
        if self.level != 5:
            return self.decoder.next_packet()
        try:
            p = self.decoder.next_packet5()
        except MalformedPacket as exc:
            if "CONNACK" in str(exc):
                raise Unsupported("upstream answered CONNECT in MQTT 3.1.1") from None
            raise
        if isinstance(p, Puback5):
            return p if p.reason_code >= 0x80 else Puback(p.packet_id)
        if isinstance(p, Connack5):
            if p.reason_code == ReasonCode.UNSUPPORTED_PROTOCOL_VERSION:
                raise Unsupported("upstream refused MQTT 5 (CONNACK 0x84)")
            return Connack(p.reason_code, p.session_present)
        if isinstance(p, Suback5):
            return Suback(p.packet_id, tuple(0x80 if c >= 0x80 else c for c in p.reason_codes))
        if isinstance(p, Unsuback5):
            return Unsuback(p.packet_id)
        if isinstance(p, Pubrel5):
            return Pubrel(p.packet_id)
        if isinstance(p, Disconnect5):
            why = p.properties.reason_string
            name = reason_name(PacketType.DISCONNECT, p.reason_code)
            raise LinkError(f"upstream disconnected: {name} (0x{p.reason_code:02X})"
                            f"{': ' + why if why else ''}")
        return p  # type: ignore[return-value]  # Publish5, Pingresp, or what the link refuses


def refusal(code: int) -> str:
    """A PUBACK reason code as words."""
    return f"{reason_name(PacketType.PUBACK, code)} (0x{code:02X})"
