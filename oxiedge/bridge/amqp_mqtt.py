"""The MQTT ⇄ AMQP bridge through ``amq.topic`` (``/`` ⇄ ``.``): the AMQP end of the bus.

Theory of operation
-------------------
Both brokers live in this process, so the bridge is no client and no task: it is the
``amq.topic`` destination of the bus (``oxiedge/bus.py``) and the translation of names.

MQTT → AMQP
    The bus hands ``TopicBridge.stage`` every publish of the MQTT topic space whose origin is
    not AMQP (an MQTT client, an uplink's command). It routes it into ``amq.topic`` with
    ``AmqpService.publish_from_bridge`` (QoS >= 1 → ``delivery_mode=2``), which stages the
    records of the durable queues it reaches and then enqueues the message (record first,
    so a consumer's ack can never be staged before the insert it deletes). ``COMMIT`` comes
    back when it staged something, so the MQTT connection awaits the group commit before
    its PUBACK: the message is on disk in every durable queue before the sensor hears
    "acknowledged". No task and no per-message wait of our own: the MQTT connection already
    commits once per read burst, for all of the burst's publishes.

AMQP → MQTT
    A client publish to ``amq.topic`` reaches the bus (``Bus.from_amqp``, called from the
    one marked place of the AMQP publish path). ``topic_of`` gives its MQTT topic, and the
    bus publishes it with origin ``AMQP``: persistent → QoS 1 (the broker caps it at each
    subscription's granted QoS), transient → QoS 0. ``COMMIT`` when durable MQTT copies
    (offline persistent sessions, ingest documents, uplink outboxes) were staged; the AMQP
    connection then commits before its publisher confirm, and the message counts as routed
    for ``mandatory``.

Properties (an MQTT 5 publisher's, an AMQP publisher's basic properties) cross as RabbitMQ
converts them (``bridge/props.py``); a publish without any pays one test.

No loops, by the bus's one echo rule: a destination never receives a publish whose origin
is itself, so a message from AMQP is never handed back to ``amq.topic``.

Untranslatable names are counted and skipped, never mangled (``oxiedge/topicmap.py``).

The bridge sees the AMQP broker as ``AmqpEntry``, a Protocol of the one method it calls, and
imports no service; ``server.py`` wires the real ``AmqpService`` and its ``amq.topic``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from ..amqp import spec
from ..amqp.exchanges import Exchange
from ..staged import COMMIT, NOTHING, REFUSED, ROUTED, MessageProps, Origin, Staged
from ..topicmap import EXCHANGE, mqtt_to_routing_key, routing_key_to_mqtt
from . import props as mapping

_KEY_CACHE = 4096


class AmqpEntry(Protocol):
    """The AMQP broker as the bridge sees it (``amqp.service.AmqpService``)."""

    def publish_from_bridge(self, exchange: str, routing_key: str, body: bytes,
                            persistent: bool, properties: spec.BasicProperties | None = None,
                            *, origin: Origin) -> Staged:
        """Route one message from another origin of the bus into ``exchange``; stage the
        records of the durable queues it reaches."""
        ...


class TopicBridge:
    """The ``amq.topic`` destination of the bus, the name translation, and its counters.

    ``exchange`` is the AMQP broker's ``amq.topic`` (``server.py`` passes it); ``clock`` the
    wall clock Message Expiry deadlines are on."""

    def __init__(self, amqp: AmqpEntry, exchange: Exchange,
                 clock: Callable[[], float] = time.time) -> None:
        assert exchange.name == EXCHANGE
        self.amqp = amqp
        self.clock = clock
        # amq.topic is built in (it cannot be deleted), so one reference serves for good;
        # the bus tests ``exchange.in_use`` before it calls ``stage`` (one attribute test
        # per publish while nothing is bound).
        self.exchange = exchange
        self._keys: dict[str, str | None] = {}  # topic → routing key, bounded cache
        self.counters = {"mqtt_to_amqp": 0, "amqp_to_mqtt": 0, "skipped_mqtt_topics": 0,
                         "skipped_amqp_keys": 0, "user_properties_dropped": 0}

    # ------------------------------------------------------------ MQTT → AMQP
    def stage(self, origin: Origin, topic: str, payload: bytes, qos: int,
              retain: bool, props: MessageProps | None = None) -> Staged:
        """Route one publish of the MQTT topic space (from ``origin``, never ``AMQP``) into
        ``amq.topic``, its ``props`` mapped onto basic properties; ``COMMIT`` if durable
        AMQP records were staged."""
        if retain and not payload:
            return NOTHING  # clearing a retained message is not a message (MQTT-3.3.1-10)
        key = self._keys.get(topic, "")
        if key == "":
            if len(self._keys) >= _KEY_CACHE:
                self._keys.clear()
            key = self._keys[topic] = mqtt_to_routing_key(topic)
        if key is None:
            self.counters["skipped_mqtt_topics"] += 1
            return NOTHING
        properties = None
        if props is not None:
            properties, dropped = mapping.to_amqp_counted(props, qos >= 1, self.clock())
            if dropped:
                self.counters["user_properties_dropped"] += dropped
        staged = self.amqp.publish_from_bridge(EXCHANGE, key, payload, qos >= 1, properties,
                                               origin=origin)
        self.counters["mqtt_to_amqp"] += 1
        # (ROUTED: a queue took it; REFUSED: a queue's reject-publish refused it - for MQTT
        # 5's reason codes, 0x10 and 0x97)
        return staged & (COMMIT | ROUTED | REFUSED)

    # ------------------------------------------------------------ AMQP → MQTT
    def topic_of(self, routing_key: str) -> str | None:
        """The MQTT topic of an ``amq.topic`` routing key; ``None`` (counted) if it has none."""
        topic = routing_key_to_mqtt(routing_key)
        if topic is None:
            self.counters["skipped_amqp_keys"] += 1
        return topic

    def props_of(self, properties: bytes) -> MessageProps | None:
        """The MQTT 5 properties of an AMQP publish's raw basic ``properties``."""
        return mapping.from_amqp(properties, self.clock())

    def status(self) -> dict[str, Any]:
        return dict(self.counters)
