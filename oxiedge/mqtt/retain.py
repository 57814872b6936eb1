"""Retained messages (MQTT 3.1.1, 3.3.1.3): the store, its bounds, its records.

``RetainedStore`` is the topic trie of retained messages plus what bounds it
(``--mqtt-retained-max`` topics, ``--mqtt-retained-bytes`` of topic + payload) and the
staging of its records. Sans-IO: ``keep`` stages, the caller commits.

Who reads it: the router (``router.py``) calls ``keep`` for every PUBLISH with RETAIN 1;
``Broker.replay_step`` sends matching messages to new subscriptions (``replay.py``);
recovery loads it (``load``); ``oxiedge retained`` lists it (``rows``).
"""

from __future__ import annotations

from typing import Any

from oxiedge.mqtt import persist
from oxiedge.mqtt.message import Message5, message_of
from oxiedge.mqtt.persist import CF, RawStore
from oxiedge.mqtt.session import Limits, Message, Stats
from oxiedge.mqtt.topics import RetainedTrie


class Retained:
    """A retained message (3.3.1.3)."""

    __slots__ = ("msg", "qos")

    def __init__(self, msg: Message, qos: int) -> None:
        self.msg = msg
        self.qos = qos


class RetainedStore(RetainedTrie[Retained]):
    """The retained messages of one broker: a ``RetainedTrie`` (``get``, ``match``,
    ``items``, ``len``) that keeps its own bounds and records."""

    __slots__ = ("bytes", "limits", "stats", "store", "unstored")

    def __init__(self, store: RawStore | None, limits: Limits, stats: Stats) -> None:
        super().__init__()
        self.store = store
        self.limits = limits
        self.stats = stats
        self.bytes = 0  # topic + payload bytes of the clients' retained messages
        self.unstored = 0  # topics kept by keep_unstored ($SYS): outside the bounds

    def load(self) -> None:
        """Recovery: load the retained records."""
        if self.store is None:
            return
        for topic, qos, payload in persist.load_retained_records(self.store):
            # Kept even over the retained bounds (they were accepted under other settings);
            # the bounds apply to new retained topics.
            m = Message(topic, payload)
            if qos & persist.MSG_V5:  # an MQTT 5 message: its properties come along
                try:
                    m = message_of(topic, m.topic_b, payload, 0)
                except ValueError as exc:
                    self.store.quarantine(CF, persist.retain_key(topic), bytes((qos,)) + payload,
                                          f"retained message: {exc}")  # fmt: skip
                    continue
                qos &= 3
            self.set(topic, Retained(m, qos))
            self.bytes += len(m.topic_b) + len(payload)

    def keep(self, msg: Message, qos: int) -> bool:
        """A PUBLISH with RETAIN 1: replace, clear or refuse the topic's retained message;
        True if a record change was staged (commit before acknowledging)."""
        store = self.store
        old = self.get(msg.topic)
        old_size = 0 if old is None else len(old.msg.topic_b) + len(old.msg.payload)
        size = len(msg.topic_b) + len(msg.payload)
        limits = self.limits
        refused = bool(msg.payload) and (
            (old is None and len(self) - self.unstored >= limits.retained_max)
            or self.bytes - old_size + size > limits.retained_bytes
        )
        if refused:
            # Over --mqtt-retained-max/-bytes: the message is still delivered, not kept.
            # An older retained message of the topic goes (it is not the latest any more).
            self.stats.retained_refused += 1
        if not msg.payload or refused:
            # MQTT-3.3.1-10: an empty retained payload clears the topic's retained message.
            if self.delete(msg.topic):
                self.bytes -= old_size
                if store is not None:
                    store.stage_delete_key(CF, persist.retain_key(msg.topic))
                    return True
            return False
        self.set(msg.topic, Retained(msg, qos))  # MQTT-3.3.1-5: replaces
        self.bytes += size - old_size
        if store is not None:
            value = (bytes((qos,)) + msg.payload if type(msg) is not Message5
                     else bytes((qos | persist.MSG_V5,)) + msg.body())  # fmt: skip
            store.stage_put(CF, persist.retain_key(msg.topic), value)
            return True
        return False

    def keep_unstored(self, msg: Message) -> None:
        """Retain ``msg`` at QoS 0 in memory only: no record is staged, and the retained
        bounds do not apply (the broker's own ``$SYS`` values, ``systree.py``: a few dozen
        short topics that must never reach the disk)."""
        if self.get(msg.topic) is None:
            self.unstored += 1
        self.set(msg.topic, Retained(msg, 0))

    def rows(self, include_sys: bool = False) -> list[dict[str, Any]]:
        """The admin listing (``oxiedge retained``): the clients' retained messages, and
        the broker's own ``$SYS`` values only when asked (``--sys``), since those few dozen
        topics would bury what an operator looks for."""
        return [
            {"topic": topic, "qos": r.qos, "bytes": len(r.msg.payload)}
            for topic, r in sorted(self.items(), key=lambda t: t[0])
            if include_sys or not topic.startswith("$SYS/")
        ]
