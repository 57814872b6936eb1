"""The one topic mapping between MQTT and AMQP: MQTT ``/`` ⇄ AMQP ``.`` in ``amq.topic``.

Used by the amq.topic bridge (``bridge/amqp_mqtt.py``), the uplink (a topic's name on an
AMQP upstream) and the permission grants. Untranslatable names give ``None``: they are
counted and skipped by the callers, never mangled. MQTT topics with ``.``, an empty level
(``a//b``, ``/a``, ``a/``), a leading ``$`` or longer than 255 bytes (an AMQP short
string); AMQP routing keys that are empty, contain ``/``, ``+``, ``#`` or NUL, are not
UTF-8, have an empty word (``a..b``) or start with ``$``.
"""

from __future__ import annotations

#: The AMQP exchange MQTT topics map onto.
EXCHANGE = "amq.topic"


def mqtt_to_routing_key(topic: str) -> str | None:
    """``sensors/t1/temp`` → ``sensors.t1.temp``; ``None`` if it cannot be translated."""
    if not topic or topic.startswith("$") or "." in topic or len(topic.encode()) > 255:
        return None
    levels = topic.split("/")
    if "" in levels:
        return None
    return ".".join(levels)


def routing_key_to_mqtt(key: str) -> str | None:
    """``devices.valve7.cmd`` → ``devices/valve7/cmd``; ``None`` if it cannot be translated."""
    if not key or key.startswith("$") or any(c in key for c in "/+#\x00"):
        return None
    if not key.isascii():
        try:  # bytes that were not UTF-8 come as surrogates; a topic is UTF-8 (MQTT-1.5.3-1)
            key.encode("utf-8")
        except UnicodeEncodeError:
            return None
    words = key.split(".")
    if "" in words:
        return None
    return "/".join(words)
