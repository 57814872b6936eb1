"""The MQTT ⇄ AMQP bridge through ``amq.topic`` (``/`` ⇄ ``.``).

Theory of operation
-------------------
Both brokers live in this process, so the bridge is two synchronous hooks, not a client:

MQTT → AMQP
    ``MqttService.on_publish`` sees every accepted PUBLISH. The hook routes it into
    ``amq.topic`` with ``AmqpService.publish_from_bridge`` (QoS >= 1 → ``delivery_mode=2``),
    which stages the records of the durable queues it reaches and then enqueues the message
    (record first, so a consumer's ack can never be staged before the insert it deletes).
    The hook returns True when it staged something, so the MQTT connection awaits the group
    commit before its PUBACK: the message is on disk in every durable queue before the
    sensor hears "acknowledged". No task and no per-message wait of our own: the MQTT
    connection already commits once per read burst, for all of the burst's publishes.

AMQP → MQTT
    ``AmqpService.topic_hooks`` sees every publish to ``amq.topic``. The hook injects it with
    ``MqttService.publish_from_bridge``: persistent → QoS 1 (the broker caps it at each
    subscription's granted QoS), transient → QoS 0. It returns True when durable MQTT
    copies (offline persistent sessions) were staged; the AMQP connection then commits
    before its publisher confirm, and the message counts as routed for ``mandatory``.

No loops: the MQTT injection runs ``Broker.route``, which calls every ``on_publish`` hook
again, including ours. A flag set around the (synchronous) injection makes our MQTT hook
ignore the messages we are injecting, so a message never goes back to the side it came
from. (``publish_from_bridge`` on the AMQP side does not call ``topic_hooks`` at all.)

Untranslatable names are counted and skipped, never mangled:
MQTT topics with ``.``, an empty level (``a//b``, ``/a``, ``a/``), a leading ``$`` or longer
than 255 bytes (an AMQP short string); AMQP routing keys that are empty, contain ``/``,
``+``, ``#`` or NUL, are not UTF-8, have an empty word (``a..b``) or start with ``$``.
"""

from __future__ import annotations

from typing import Any

from ..amqp.exchanges import Exchange
from ..amqp.service import AmqpService
from ..app import App
from ..mqtt.service import MqttService
from ..topicmap import EXCHANGE, mqtt_to_routing_key, routing_key_to_mqtt

_KEY_CACHE = 4096


class TopicBridge:
    """The two hooks of the MQTT ⇄ AMQP bridge of one server, and its counters."""

    def __init__(self, app: App, mqtt: MqttService, amqp: AmqpService) -> None:
        self.app = app
        self.mqtt = mqtt
        self.amqp = amqp
        self._injecting = False  # an AMQP message is being injected into MQTT right now
        # amq.topic is built in (it cannot be deleted), so one reference serves for good.
        self._exchange: Exchange = amqp.broker.exchanges[EXCHANGE]
        self._keys: dict[str, str | None] = {}  # topic → routing key, bounded cache
        self.counters = {"mqtt_to_amqp": 0, "amqp_to_mqtt": 0, "skipped_mqtt_topics": 0,
                         "skipped_amqp_keys": 0}

    def attach(self) -> None:
        self.mqtt.on_publish.append(self.on_mqtt_publish)
        self.amqp.topic_hooks.append(self.on_amqp_publish)

    # ------------------------------------------------------------ MQTT → AMQP
    def on_mqtt_publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> bool:
        """``on_publish`` hook; True if durable AMQP records were staged."""
        if self._injecting:
            return False  # came from AMQP: never back
        if not self._exchange.in_use:
            return False  # nothing bound to amq.topic: one attribute test per publish
        if retain and not payload:
            return False  # clearing a retained message is not a message (MQTT-3.3.1-10)
        key = self._keys.get(topic, "")
        if key == "":
            if len(self._keys) >= _KEY_CACHE:
                self._keys.clear()
            key = self._keys[topic] = mqtt_to_routing_key(topic)
        if key is None:
            self.counters["skipped_mqtt_topics"] += 1
            return False
        staged = self.amqp.publish_from_bridge(EXCHANGE, key, payload, qos >= 1)
        self.counters["mqtt_to_amqp"] += 1
        return bool(staged.needs_commit)

    # ------------------------------------------------------------ AMQP → MQTT
    def on_amqp_publish(self, routing_key: str, raw_properties: bytes, body: bytes,
                        persistent: bool) -> bool:
        """``topic_hooks`` hook; True if durable MQTT copies were staged."""
        topic = routing_key_to_mqtt(routing_key)
        if topic is None:
            self.counters["skipped_amqp_keys"] += 1
            return False
        qos = 1 if persistent else 0
        self._injecting = True
        try:
            staged = bool(self.mqtt.publish_from_bridge(topic, body, qos, False))
        except ValueError:
            self.counters["skipped_amqp_keys"] += 1
            return False
        finally:
            self._injecting = False
        self.counters["amqp_to_mqtt"] += 1
        return staged

    def status(self) -> dict[str, Any]:
        return dict(self.counters)


def start_topic_bridge(app: App, mqtt: MqttService | None, amqp: AmqpService | None
                       ) -> TopicBridge | None:
    """Wire the bridge when both brokers run (called by ``oxiedge serve`` before listening);
    it is two synchronous hooks, no task."""
    if mqtt is None or amqp is None:
        return None
    bridge = TopicBridge(app, mqtt, amqp)
    bridge.attach()
    app.log.info("MQTT-AMQP bridge on - amq.topic")
    return bridge
