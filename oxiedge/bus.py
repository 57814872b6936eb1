"""The bus: the one publish path between MQTT, AMQP's ``amq.topic``, ingest and the uplinks.

Theory of operation
-------------------
Every publish of the MQTT topic space carries its *origin* (``staged.Origin``): an MQTT
client (``MQTT``), an AMQP channel publishing to ``amq.topic`` (``AMQP``), or one uplink's
inbound command (``Uplink.origin``). Its destinations are

- the MQTT router (sessions, retained value; ``mqtt/router.py``),
- ``amq.topic`` and the AMQP queues bound to it (``bridge/amqp_mqtt.py``),
- the ingest collections whose routes match (``ingest/step.py``; only while MQTT runs,
  as it is the MQTT ingest bridge),
- the outboxes of the uplinks whose ``--out`` filters match (``uplink/``).

They are all staged synchronously in the same round, so the publisher's one group commit
covers every durable copy before its acknowledgement. The one echo rule: **a destination
never receives a publish whose origin is itself** (an AMQP message is not handed back to
``amq.topic``, an uplink's command not back to that uplink's outbox).

Entries, one per kind of origin:

- an MQTT client's PUBLISH goes through ``Router.route``, which delivers to the sessions
  and then calls ``Bus.fan_out`` from its one marked section (the hot path: one call, and
  each destination is one attribute test while it has nothing to do);
- an AMQP publish to ``amq.topic`` is routed to its queues by the exchange; the AMQP
  publish path's one marked place calls ``Bus.from_amqp``;
- an uplink command (and any other in-process publisher) calls ``Bus.publish``.

Every entry returns one ``staged.Staged`` (``COMMIT``: commit before acknowledging).
"""

from __future__ import annotations

from collections.abc import Mapping, Sized
from typing import Protocol

from .staged import AMQP, COMMIT, NOTHING, MessageProps, Origin, Staged
from .topicmap import mqtt_to_routing_key

# The destinations as the bus sees them: small Protocols of what it uses, so that this
# module imports none of them (server.py wires the real ones: ``MqttService``,
# ``TopicBridge``, ``Ingest``, ``UplinkManager``).


class MqttEntry(Protocol):
    """The MQTT broker (``mqtt.service.MqttService``): its router delivers to the sessions,
    then hands the publish back to ``Bus.fan_out`` for everything else."""

    def publish_from_bridge(self, topic: str, payload: bytes, qos: int, retain: bool,
                            origin: Origin | None = None,
                            props: MessageProps | None = None) -> bool:
        """Route it as if a client had published it (with ``props``: as an MQTT 5 client
        with those properties); True if durable work was staged. Raises ``ValueError``
        for an invalid topic."""
        ...


class InUse(Protocol):
    @property
    def in_use(self) -> bool:
        """Whether anything is bound to the exchange (else nothing is staged into it)."""
        ...


class TopicDestination(Protocol):
    """``amq.topic`` and the name translation (``bridge.amqp_mqtt.TopicBridge``)."""

    counters: dict[str, int]

    @property
    def exchange(self) -> InUse: ...

    def stage(self, origin: Origin, topic: str, payload: bytes, qos: int,
              retain: bool, props: MessageProps | None = None) -> Staged:
        """Route one publish of the MQTT topic space into ``amq.topic``."""
        ...

    def props_of(self, properties: bytes) -> MessageProps | None:
        """The properties of an AMQP publish to ``amq.topic`` in MQTT 5's terms (None:
        nothing to carry)."""
        ...

    def topic_of(self, routing_key: str) -> str | None:
        """The MQTT topic of an ``amq.topic`` routing key, if it has one."""
        ...


class IngestDestination(Protocol):
    """The ingest collections (``ingest.step.Ingest``)."""

    @property
    def routes(self) -> Sized:
        """Its routes; while there is none the bus pays one truth test per publish."""
        ...

    def stage_publish(self, topic: str, payload: bytes, props: MessageProps | None = None
                      ) -> bool:  # fmt: skip
        """Stage the documents of the routes matching ``topic`` (with ``_props``); True if
        any was."""
        ...


class Outbox(Protocol):
    """One uplink as the bus sees it: a destination with an origin of its own."""

    origin: Origin
    skipped: int

    def enqueue(self, topic: str, payload: bytes, retain: bool = False,
                props: MessageProps | None = None) -> None: ...


class Outboxes(Protocol):
    """The uplinks as the bus sees them (``uplink/manager.py``)."""

    @property
    def uplinks(self) -> Mapping[str, Outbox]:
        """The uplinks by name; while there is none the bus pays one truth test per
        publish (an attribute, not a call: this is on every publish's path)."""
        ...

    def targets(self, topic: str) -> tuple[tuple[Outbox, bool], ...]:
        """The uplinks whose ``--out`` matches ``topic``, each with whether the topic has
        an upstream name there (cached per topic)."""
        ...


class Bus:
    """The destinations of one server and the one router between them (module docstring).

    Built by ``server.py`` with the parts that run; ``uplinks`` is set once the uplink
    manager exists (it is built after recovery, and needs the bus for its commands)."""

    def __init__(self, mqtt: MqttEntry | None, bridge: TopicDestination | None,
                 ingest: IngestDestination | None) -> None:
        self.mqtt = mqtt
        self.bridge = bridge
        # Ingest is fed from the MQTT topic space only while MQTT runs.
        self.ingest = ingest if mqtt is not None else None
        self.uplinks: Outboxes | None = None

    # ------------------------------------------------------------------ the router
    def fan_out(self, origin: Origin, topic: str, payload: bytes, qos: int,
                retain: bool, props: MessageProps | None = None) -> Staged:
        """Stage one publish into every destination beyond the MQTT sessions except its
        origin; ``COMMIT`` if anything durable was staged, ``ROUTED`` if a destination took it
        without (an AMQP queue that is not durable: MQTT 5's PUBACK 0x10 must not say that
        nobody took it).
        ``props``: its properties (None: it has none, the 3.1.1 case)."""
        staged = NOTHING
        bridge = self.bridge
        if bridge is not None and origin is not AMQP and bridge.exchange.in_use:
            staged = bridge.stage(origin, topic, payload, qos, retain, props)
        uplinks = self.uplinks
        if uplinks is not None and uplinks.uplinks and (payload or not retain):
            # (clearing a retained message is not a message, MQTT-3.3.1-10)
            for uplink, routable in uplinks.targets(topic):
                if uplink.origin is origin:
                    continue  # the echo rule: a command never goes back where it came from
                if routable:
                    uplink.enqueue(topic, payload, retain, props)
                    staged |= COMMIT  # (or-ed: a queue's REFUSED still reaches the publisher)
                else:
                    uplink.skipped += 1
        ingest = self.ingest
        if ingest is not None and ingest.routes and ingest.stage_publish(topic, payload, props):
            staged |= COMMIT
        return staged

    # -------------------------------------------------------------------- entries
    def from_amqp(self, routing_key: str, body: bytes, persistent: bool,
                  properties: bytes = b"") -> Staged:
        """A client publish to ``amq.topic`` (already routed to its queues): stage it into
        the MQTT topic space, its ``properties`` (raw basic properties) mapped onto MQTT
        5's (``bridge/props.py``); ``COMMIT`` if anything durable was staged."""
        mqtt, bridge = self.mqtt, self.bridge
        if mqtt is None and (self.uplinks is None or not self.uplinks.uplinks):
            return NOTHING  # AMQP alone, no uplink: nothing lies beyond amq.topic
        if bridge is None:  # cannot happen: from_amqp is called by a running AMQP broker
            return NOTHING
        topic = bridge.topic_of(routing_key)
        if topic is None:
            return NOTHING
        qos = 1 if persistent else 0
        props = bridge.props_of(properties) if properties else None
        if mqtt is None:
            return self.fan_out(AMQP, topic, body, qos, False, props)
        try:
            staged = mqtt.publish_from_bridge(topic, body, qos, False, AMQP, props)
        except ValueError:  # not a valid MQTT topic after all (e.g. too long)
            bridge.counters["skipped_amqp_keys"] += 1
            return NOTHING
        bridge.counters["amqp_to_mqtt"] += 1
        return COMMIT if staged else NOTHING

    def publish(self, origin: Origin, topic: str, payload: bytes, qos: int,
                retain: bool, props: MessageProps | None = None) -> Staged:
        """Publish from ``origin`` (not an MQTT client, not AMQP) into every destination:
        through the MQTT router when MQTT runs, else straight to the others. ``COMMIT``:
        ``await store.commit()`` before acknowledging the source. Raises ``ValueError`` for
        a topic that cannot be published (invalid, or without an AMQP name when only AMQP
        runs)."""
        mqtt = self.mqtt
        if mqtt is not None:
            return COMMIT if mqtt.publish_from_bridge(topic, payload, qos, retain, origin,
                                                      props) else NOTHING
        if mqtt_to_routing_key(topic) is None:
            raise ValueError(f"topic {topic!r} has no AMQP routing key")
        return self.fan_out(origin, topic, payload, qos, retain, props) & COMMIT
