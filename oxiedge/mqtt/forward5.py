"""MQTT 5 properties on their way from a publisher to the subscribers, sans-IO.

Theory of operation
-------------------
A PUBLISH from an MQTT 5 client may carry properties the broker forwards unchanged
(3.3.2.3: Payload Format Indicator, Content Type, Response Topic, Correlation Data, User
Properties, in their order and with duplicates) and some it must not forward: the Topic
Alias belongs to one connection and one direction (3.3.2.3.4), Subscription Identifiers
are the subscriber's (3.3.4), and the Message Expiry Interval is forwarded reduced by the
time the message waited (MQTT-3.3.2-6). ``forwarded`` keeps the first kind and turns the
interval into an absolute wall-clock deadline, so the clock also runs while the broker is
down: a stored message read back after a restart expires on time.

``message.Message5`` is a ``Message`` with those properties, their block encoded once
(``block``), and the deadline. A message from an MQTT 3.1.1 client, a will, a bridge or
the bus is a plain ``Message``: an MQTT 5 subscriber gets it with an empty property block.

The bus (``oxiedge/bus.py``: ``amq.topic``, the uplinks, ingest) carries them as a
``staged.MessageProps`` (``to_bus``); a publish from another origin with properties (an
AMQP publisher's, mapped by ``bridge/props.py``) becomes a ``Message5`` (``from_bus``).

``Peer5`` is what the session knows of its MQTT 5 client: it encodes every PUBLISH to
it (``publish``) - the remaining Message Expiry Interval, the client's Subscription
Identifiers, its Maximum Packet Size (MQTT-3.1.2-24: a PUBLISH that would exceed it is not
sent, counted, and the message counts as delivered) - and knows its Receive Maximum. A
3.1.1 session has none (``Session.peer`` is None) and takes none of this path.

Outbound Topic Aliases (3.3.2.3.4): when the client announced a Topic Alias Maximum, the
first PUBLISH of a topic to it carries the topic and a new alias, every later one the
alias and an empty topic, until its ``alias_max`` aliases are taken; topics after that go
with their name. The table is the ``Peer5``'s, made anew for every connection (never
persisted, never forwarded: MQTT-3.3.2-7), and an alias is taken only once its PUBLISH is
known to fit the client's Maximum Packet Size (a dropped one would leave the client
without the mapping).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from oxiedge.mqtt.bounds import Stats
from oxiedge.mqtt.encode import encode_varint
from oxiedge.mqtt.encode5 import NO_PROPERTY_BYTES, encode_publish5
from oxiedge.mqtt.message import Message, Message5
from oxiedge.mqtt.packets import PacketType
from oxiedge.mqtt.properties import NO_PROPERTIES, Properties, encode_properties, read_varint
from oxiedge.staged import MessageProps

_PUBLISH = PacketType.PUBLISH

#: Wall-clock seconds (time.time): a message's deadline survives a restart.
WallClock = Callable[[], float]


def forwarded(props: Properties, now: float) -> tuple[Properties, float | None]:
    """The properties a subscriber receives of a publisher's ``props`` (without the
    Topic Alias, Subscription Identifiers and Message Expiry Interval) and the message's
    absolute expiry deadline on the wall clock (None: it does not expire)."""
    expiry = props.message_expiry_interval
    if props.topic_alias is None and expiry is None and not props.subscription_identifiers:
        return props, None
    kept = props._replace(topic_alias=None, message_expiry_interval=None,
                          subscription_identifiers=())  # fmt: skip
    if kept == NO_PROPERTIES:
        kept = NO_PROPERTIES  # (the shared one: compared by identity on the hot paths)
    return kept, (None if expiry is None else now + expiry)


def to_bus(props: Properties, expires_at: float | None) -> MessageProps:
    """The forwarded ``props`` and deadline of a message as the bus carries them."""
    return MessageProps(props.payload_format_indicator, expires_at, props.content_type,
                        props.response_topic, props.correlation_data, props.user_properties)


def from_bus(mp: MessageProps) -> Properties:
    """The properties MQTT 5 subscribers get of a publish the bus carried (its deadline
    is ``mp.expires_at``)."""
    if mp.payload_format_indicator is None and mp.content_type is None \
            and mp.response_topic is None and mp.correlation_data is None \
            and not mp.user_properties:
        return NO_PROPERTIES
    return Properties(payload_format_indicator=mp.payload_format_indicator,
                      content_type=mp.content_type, response_topic=mp.response_topic,
                      correlation_data=mp.correlation_data,
                      user_properties=mp.user_properties)


def expired(msg: Message, now: float) -> bool:
    """Whether ``msg`` must not be delivered any more (MQTT-3.3.2-5)."""
    return type(msg) is Message5 and msg.expired(now)


def with_alias(block: bytes, alias: int) -> bytes:
    """An encoded property block with a Topic Alias (0x23) added at its end (properties
    may come in any order on the wire, 2.2.2.2)."""
    length, i = read_varint(block, 0, len(block))
    return encode_varint(length + 3) + block[i:] + bytes((0x23, alias >> 8, alias & 0xFF))


class Peer5:
    """A session's MQTT 5 client, as its deliveries need it (see the module docstring)."""

    __slots__ = ("alias_max", "aliases", "clock", "max_packet", "plain_max", "receive_maximum",
                 "stats", "sub_ids")

    def __init__(self, stats: Stats, *, receive_maximum: int = 65535,
                 max_packet: int = 1 << 28, alias_max: int = 0,
                 clock: WallClock = time.time) -> None:  # fmt: skip
        self.stats = stats
        self.alias_max = alias_max  # the client's Topic Alias Maximum (3.1.2.11.5)
        self.aliases: dict[bytes, int] = {}  # outbound: topic -> its alias (this connection)
        self.receive_maximum = receive_maximum  # the client's (3.1.2.11.3)
        self.max_packet = max_packet  # the client's Maximum Packet Size (3.1.2.11.4)
        # The longest shared QoS 0 frame (``Message.qos0v5``) this client takes as is: its
        # Maximum Packet Size, or -1 (none) when it gets Topic Aliases. ``Session.deliver``
        # tests it inline, so a plain QoS 0 delivery costs no call here.
        self.plain_max = -1 if alias_max else max_packet
        self.clock = clock
        # filter -> Subscription Identifier of that subscription (3.8.2.1.2)
        self.sub_ids: dict[str, int] = {}

    def publish(self, msg: Message, qos: int, retain: bool, dup: bool,
                pid: int | None, ids: tuple[int, ...] = ()) -> bytes | None:  # fmt: skip
        """The PUBLISH of ``msg`` for this client, or None: expired (MQTT-3.3.2-5) or
        over the client's Maximum Packet Size (MQTT-3.1.2-25); both are counted and
        the caller treats the message as delivered."""
        if qos == 0 and not retain and not ids and not self.alias_max \
                and (type(msg) is not Message5 or msg.expires_at is None):
            # The same bytes for every MQTT 5 subscriber without aliases: encoded once per
            # message, or the publisher's own frame (``Router.route5``), as ``Message.qos0``
            # is for 3.1.1 subscribers
            data = msg.qos0v5
            if data is None:
                block = msg.block if type(msg) is Message5 else NO_PROPERTY_BYTES
                data = msg.qos0v5 = encode_publish5(msg.topic_b, msg.payload, 0, False, False,
                                                    None, block)
            if len(data) > self.max_packet:  # (``_fit``, inlined: once per message)
                self.stats.dropped_too_large += 1
                return None
            return data
        if type(msg) is not Message5 and not ids and not self.alias_max:
            # A message without properties to a client without aliases (the common case):
            # as 3.1.1 encodes it, with an empty property block
            data = encode_publish5(msg.topic_b, msg.payload, qos, retain, dup, pid,
                                   NO_PROPERTY_BYTES)
            if len(data) > self.max_packet:
                self.stats.dropped_too_large += 1
                return None
            return data
        if type(msg) is Message5:
            exp = msg.expires_at
            if exp is None and not ids:
                block = msg.block
            else:
                now = self.clock()
                if exp is not None and exp <= now:
                    self.stats.expired += 1
                    return None
                props = msg.props
                if exp is not None:
                    props = props._replace(message_expiry_interval=msg.remaining(now))
                if ids:
                    props = props._replace(subscription_identifiers=ids)
                block = encode_properties(props, _PUBLISH)
        elif ids:
            block = encode_properties(Properties(subscription_identifiers=ids), _PUBLISH)
        else:
            block = NO_PROPERTY_BYTES
        topic_b = msg.topic_b
        if self.alias_max:
            alias = self.aliases.get(topic_b)
            if alias is not None:
                return self._fit(encode_publish5(b"", msg.payload, qos, retain, dup, pid,
                                                 with_alias(block, alias)))
            if len(self.aliases) < self.alias_max:
                alias = len(self.aliases) + 1
                data = self._fit(encode_publish5(topic_b, msg.payload, qos, retain, dup, pid,
                                                 with_alias(block, alias)))
                if data is not None:
                    self.aliases[topic_b] = alias
                return data
        return self._fit(encode_publish5(topic_b, msg.payload, qos, retain, dup, pid, block))

    def _fit(self, data: bytes) -> bytes | None:
        """``data``, or None (counted) when over the client's Maximum Packet Size."""
        if len(data) > self.max_packet:
            self.stats.dropped_too_large += 1
            return None
        return data

    def fits(self, data: bytes) -> bool:
        """Whether a packet fits the client's Maximum Packet Size."""
        return len(data) <= self.max_packet
