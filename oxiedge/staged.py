"""The types of the one publish path (``oxiedge/bus.py``): where a publish comes from and
what it staged.

A leaf module: the MQTT router, the AMQP broker and the uplinks import these, and the small
protocols through which they hand a publish to the bus (``Fanout``, ``TopicEntry``,
``Publisher``), without importing the bus, each other, ingest or the uplinks.

``Staged`` is a bit set in a plain ``int``, so the hot path builds no object per message.
A ``bool`` is a ``Staged``: ``False`` is ``NOTHING``, ``True`` is ``COMMIT`` (the MQTT
router returns one).

``MessageProps`` are the message properties that travel with a publish between the
destinations (an MQTT 5 publisher's, or an AMQP publisher's mapped onto them): ``None``
for a publish without any, which is what every 3.1.1 publish carries, so a publish
without properties pays one ``None`` test where a destination would map them.
"""

from __future__ import annotations

from typing import Final, NamedTuple, Protocol, TypeAlias

#: What one publish staged: ``NOTHING``, or ``COMMIT`` / ``ROUTED`` / ``RETURNED`` /
#: ``REFUSED`` or-ed (the AMQP publish path, ``amqp/publish.py``, returns all four).
Staged: TypeAlias = int
NOTHING: Final = 0
#: Durable records were staged: ``await store.commit()`` before acknowledging the publisher.
COMMIT: Final = 1
#: It reached at least one queue (or the bus took it: AMQP ``mandatory``).
ROUTED: Final = 2
#: Unroutable and AMQP ``mandatory``: the publisher gets ``basic.return``.
RETURNED: Final = 4
#: A destination refused it (AMQP ``x-overflow=reject-publish``: the publisher gets a nack).
REFUSED: Final = 8


class MessageProps(NamedTuple):
    """The properties of one publish as they cross the bus, in MQTT 5's terms (the MQTT
    router passes an MQTT 5 publisher's forwarded properties; ``bridge/props.py`` maps an
    AMQP publisher's onto them and back, as RabbitMQ's conversions do)."""

    payload_format_indicator: int | None = None
    #: The Message Expiry deadline on the wall clock (``time.time()``), None: no expiry.
    expires_at: float | None = None
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    #: In the publisher's order, duplicates kept.
    user_properties: tuple[tuple[str, str], ...] = ()


class Origin:
    """Where a publish entered the bus. The one echo rule: a destination never receives a
    publish whose origin is that destination (``bus.py``)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Origin({self.name!r})"


#: An MQTT client's PUBLISH or will: MQTT's own router has already delivered it to the
#: MQTT sessions when the bus sees it.
MQTT: Final = Origin("mqtt")
#: An AMQP channel's publish to ``amq.topic``: the exchange has already routed it to its
#: queues when the bus sees it.
AMQP: Final = Origin("amqp")
# Each uplink is an origin of its own (``Uplink.origin``): its inbound commands.


class Fanout(Protocol):
    """The bus as the MQTT router sees it (``mqtt/router.py``)."""

    def fan_out(self, origin: Origin, topic: str, payload: bytes, qos: int,
                retain: bool, props: MessageProps | None = None) -> Staged:
        """Stage the publish into every destination beyond the MQTT sessions except its
        origin; ``COMMIT`` if anything durable was staged."""
        ...


class TopicEntry(Protocol):
    """The bus as the AMQP broker sees it: where a client publish to ``amq.topic`` goes on."""

    def from_amqp(self, routing_key: str, body: bytes, persistent: bool,
                  properties: bytes = b"") -> Staged:
        """Stage it into every destination beyond ``amq.topic``'s queues; ``COMMIT`` if
        anything durable was staged (commit before the confirm; it counts as routed).
        ``properties``: its raw basic properties (flags word onwards)."""
        ...


class Publisher(Protocol):
    """The bus as an in-process publisher sees it: an uplink's inbound commands
    (``uplink/manager.py``)."""

    def publish(self, origin: Origin, topic: str, payload: bytes, qos: int,
                retain: bool, props: MessageProps | None = None) -> Staged:
        """Publish from ``origin`` into every destination but ``origin``; ``COMMIT``: commit
        before acknowledging the source. Raises ``ValueError`` for a topic that cannot be
        published."""
        ...
