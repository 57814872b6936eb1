"""The packet handlers of one connected MQTT client (the body of ``MqttProtocol``).

Sans-IO. Each handler applies one packet to the broker (``broker.py``, ``router.py``,
``session.py``), stages what must become durable and queues its reply in the current
burst: ``replies`` (in order), ``need_commit`` (a reply depends on a staged record or on a
round still open: a barrier), ``kick`` (staged work nobody waits for), ``after_burst``
(retained messages owed after a SUBACK). ``MqttProtocol`` ends the burst: one commit for
all of it, then the replies (``protocol.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import Any

from oxiedge.access.grants import Grants
from oxiedge.access.rules import PermissionStore
from oxiedge.mqtt.broker import Broker
from oxiedge.mqtt.codec import ProtocolError, RawPublish
from oxiedge.mqtt.encode import (
    PINGRESP_BYTES,
    encode,
    encode_puback,
    encode_pubcomp,
    encode_pubrec,
    encode_pubrel,
    encode_unsuback,
)
from oxiedge.mqtt.packets import (
    SUBACK_FAILURE,
    Connect,
    Disconnect,
    Pingreq,
    Pubcomp,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Unsubscribe,
)
from oxiedge.mqtt.session import Session
from oxiedge.mqtt.shared import unshared
from oxiedge.mqtt.topics import reserved_topic
from oxiedge.net.actions import CHECKPOINT

#: A SUBSCRIBE / UNSUBSCRIBE with more filters than this is applied in steps of at most
#: ``STEP_LEVELS`` filter levels, with a checkpoint in between.
STEP_FILTERS = 64
STEP_LEVELS = 2000


def _steps(topics: list[tuple[str, int]]) -> Iterator[list[tuple[str, int]]]:
    """``topics`` in consecutive slices of at most ``STEP_LEVELS`` levels each."""
    start, levels = 0, 0
    for i, (flt, _qos) in enumerate(topics):
        levels += flt.count("/") + 1
        if levels >= STEP_LEVELS:
            yield topics[start : i + 1]
            start, levels = i + 1, 0
    if start < len(topics):
        yield topics[start:]



class Handlers:
    """One connected client's packet handlers and the state of its current burst."""

    def __init__(self, broker: Broker, perms: PermissionStore) -> None:
        self.broker = broker
        self._route = broker.route  # (bound once: the publish path, ``Router.route``)
        # Permissions (docs/permissions.md): ``_perms.active`` is False while no rule exists,
        # so an unrestricted broker pays one attribute test per PUBLISH.
        self._perms = perms
        self.session: Session | None = None  # set once CONNECT is accepted
        self.grants: Grants | None = None
        self.replies: list[bytes] = []
        # (session, newly accepted filters): retained sends pending after the SUBACK
        self.after_burst: list[tuple[Session, list[tuple[str, int]]]] = []
        self.need_commit = False
        self.kick = False
        self.published = False  # publishers are held while a resource alarm is on
        self.disconnected = False

    def table(self) -> dict[type, Callable[[Any], bool]]:
        """Packet type -> handler (True: stop the burst, DISCONNECT). PUBLISH and PUBACK
        come from the decoder as a tuple and an ``int``: ``on_publish``, ``on_puback``."""
        return {
            Pubrec: self._on_pubrec,
            Pubrel: self._on_pubrel,
            Pubcomp: self._on_pubcomp,
            Subscribe: self._on_subscribe,
            Unsubscribe: self._on_unsubscribe,
            Pingreq: self._on_pingreq,
            Disconnect: self._on_disconnect,
            Connect: self._on_second_connect,
        }

    def on_publish(self, p: RawPublish) -> None:
        self.published = True
        topic, topic_b, qos, retain, _dup, pid, payload, frame = p
        if ((self._perms.active and not self.grants.may_publish(topic))  # type: ignore[union-attr]
                or (topic[0] == "$" and reserved_topic(topic))):  # $SYS, $share/
            self._deny_publish(qos, pid)  # type: ignore[arg-type]
            return
        if qos == 0:
            # ``frame``: the received bytes, forwarded unchanged to QoS 0 subscribers.
            if self._route(topic, payload, 0, retain, None, topic_b, frame):
                self.kick = True
        elif qos == 1:
            if self._route(topic, payload, 1, retain, None, topic_b):
                self.need_commit = True
            self.replies.append(encode_puback(pid))  # type: ignore[arg-type]
        else:
            s = self.session
            assert s is not None
            # Method B of 4.3.3: route once, remember the id until PUBREL (MQTT-4.3.3-2);
            # the deliveries are held until the commit (router.py), PUBREC follows it.
            if s.rx2.received(pid):  # type: ignore[arg-type]
                routed = self._route(topic, payload, 2, retain, None, topic_b)
                if routed or s.store is not None:
                    self.need_commit = True
            elif s.store is not None:
                # A re-send of an id we hold: not routed again. Its first copy may sit in a
                # round still open (of a connection this one took over): a barrier.
                self.need_commit = True
            self.replies.append(encode_pubrec(pid))  # type: ignore[arg-type]

    def _deny_publish(self, qos: int, pid: int) -> None:
        """A PUBLISH the user may not write: acknowledged and dropped (3.1.1 has no negative
        acknowledgement; Mosquitto does the same), counted. Nothing is routed or retained;
        a QoS 2 id is not remembered, so its PUBREL gets the PUBCOMP of an unknown id."""
        self._perms.counters["mqtt_publish_denied"] += 1
        if qos == 1:
            self.replies.append(encode_puback(pid))
        elif qos == 2:
            self.replies.append(encode_pubrec(pid))

    def on_puback(self, pid: int) -> None:
        s = self.session
        if s is not None and s.on_puback(pid):
            self.kick = True

    def _on_pubrec(self, p: Pubrec) -> bool:
        s = self.session
        if s is not None:
            # PUBREL only after the PUBREC transition (message record -> PUBREL
            # obligation) is synced: after a PUBREL the PUBLISH is never sent again, not
            # even after a crash (MQTT-4.3.3). A repeated PUBREC is answered the same way.
            if s.on_pubrec(p.packet_id):
                self.need_commit = True
            if p.packet_id in s.rel:
                if s.store is not None:
                    self.need_commit = True
                self.replies.append(encode_pubrel(p.packet_id))
        return False

    def _on_pubrel(self, p: Pubrel) -> bool:
        s = self.session
        if s is not None and (s.rx2.released(p.packet_id) or s.store is not None):
            # PUBCOMP after the id's removal is durable; for an id we do not know, after a
            # barrier (a taken-over connection may have staged its removal).
            self.need_commit = True
        self.replies.append(encode_pubcomp(p.packet_id))  # known id or not
        return False

    def _on_pubcomp(self, p: Pubcomp) -> bool:
        s = self.session
        if s is not None and s.on_pubcomp(p.packet_id):
            self.kick = True
        return False

    def _on_subscribe(self, p: Subscribe) -> bool:
        s = self.session
        assert s is not None
        codes, accepted, staged = self.subscribe_filters(s, p.topics)
        if staged:
            self.need_commit = True
        # encode() writes the remaining length as a varint: > 125 filters need 2 bytes.
        self.replies.append(encode(Suback(p.packet_id, tuple(codes))))
        if accepted:
            self.after_burst.append((s, accepted))
        return False

    def in_steps(self, p: Subscribe | Unsubscribe) -> Generator[object, None, None]:
        """Apply a SUBSCRIBE or UNSUBSCRIBE with many filters a few thousand filter levels
        at a time, letting other tasks run in between: 1,000 filters of 200 levels are
        200,000 trie nodes, a third of a second of work in one go. The result is the same
        as in one go: one SUBACK with a code per filter, identical filters merged."""
        s = self.session
        assert s is not None
        broker = self.broker
        if isinstance(p, Unsubscribe):
            for chunk in _steps([(flt, 0) for flt in p.topics]):
                if broker.unsubscribe(s, [flt for flt, _ in chunk]):
                    self.need_commit = True
                yield CHECKPOINT
            self.replies.append(encode_unsuback(p.packet_id))  # MQTT-3.10.4-4
            return
        codes: list[int] = []
        resulting: dict[str, int] = {}
        for chunk in _steps(list(p.topics)):
            part, res, staged = self.subscribe_filters(s, chunk)
            codes += part
            for flt, qos in res:
                resulting.pop(flt, None)  # MQTT-3.8.4-3 across the steps too
                resulting[flt] = qos
            if staged:
                self.need_commit = True
            yield CHECKPOINT
        self.replies.append(encode(Suback(p.packet_id, tuple(codes))))
        if resulting:
            self.after_burst.append((s, list(resulting.items())))

    def subscribe_filters(self, s: Session, topics: Any
                   ) -> tuple[list[int], list[tuple[str, int]], bool]:
        grants = self.grants
        if self._perms.active and grants is not None:
            return self._subscribe_checked(s, topics, grants)
        return self.broker.subscribe(s, topics)

    def _subscribe_checked(self, s: Session, topics: Any, grants: Grants
                           ) -> tuple[list[int], list[tuple[str, int]], bool]:
        """SUBSCRIBE with the read rules: a denied filter gets 0x80 (3.9.3), the others are
        subscribed as usual and keep their position in the SUBACK (MQTT-3.8.4-5)."""
        # (a shared subscription is checked as its topic filter, as Mosquitto does)
        allowed = [(f, q) for f, q in topics if grants.may_subscribe(unshared(f))]
        if len(allowed) == len(topics):
            return self.broker.subscribe(s, topics)
        self._perms.counters["mqtt_subscribe_denied"] += len(topics) - len(allowed)
        got, accepted, staged = self.broker.subscribe(s, allowed)
        it = iter(got)
        codes = [next(it) if grants.may_subscribe(unshared(f)) else SUBACK_FAILURE
                 for f, _q in topics]  # fmt: skip
        return codes, accepted, staged

    def _on_unsubscribe(self, p: Unsubscribe) -> bool:
        s = self.session
        assert s is not None
        if self.broker.unsubscribe(s, p.topics):
            self.need_commit = True
        self.replies.append(encode_unsuback(p.packet_id))  # MQTT-3.10.4-4
        return False

    def _on_pingreq(self, p: Pingreq) -> bool:
        self.replies.append(PINGRESP_BYTES)
        return False

    def _on_disconnect(self, p: Disconnect) -> bool:
        self.disconnected = True  # the protocol discards the will (MQTT-3.14.4-3)
        return True

    def _on_second_connect(self, p: Connect) -> bool:
        raise ProtocolError("second CONNECT (MQTT-3.1.0-2)")

