"""The packet handlers of one connected MQTT 5 client, beside 3.1.1's ``Handlers``.

Sans-IO. ``Handlers5`` is composed with the connection's ``Handlers`` and shares its burst
state (``replies``, ``need_commit``, ``kick``, ``after_burst``, ``session``, ``grants``):
the protocol ends a burst the same way for both levels (``protocol.py``). What differs is
here: a PUBLISH comes as a ``codec5.RawPublish5`` with its ``Properties``; Topic Aliases are
resolved per connection (3.3.2.3.4; never persisted, never forwarded); acknowledgements
carry reason codes (0x87 for a publish the ACLs refuse instead of a silent drop, 0x99 for a
Payload Format Indicator of 1 with a payload that is not UTF-8, 0x92 for a PUBREL of an
unknown id); UNSUBACK has a code per filter; DISCONNECT carries a reason (0x04 keeps the
will) and may change the Session Expiry Interval.

A rule broken raises a ``ProtocolError`` whose ``reason_code`` the protocol sends in its
DISCONNECT before it closes (4.13.1).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar

from oxiedge.access.rules import PermissionStore
from oxiedge.mqtt.bodies import ProtocolError, ProtocolViolation
from oxiedge.mqtt.codec5 import RawPublish5
from oxiedge.mqtt.encode5 import (
    encode5,
    encode_disconnect5,
    encode_puback5,
    encode_pubcomp5,
    encode_pubrec5,
    encode_pubrel5,
)
from oxiedge.mqtt.forward5 import WallClock, forwarded
from oxiedge.mqtt.handlers import Handlers
from oxiedge.mqtt.packets import SUBACK_FAILURE, Connect, Pingreq
from oxiedge.mqtt.packets5 import (
    Auth,
    Connect5,
    Disconnect5,
    Puback5,
    Pubcomp5,
    Pubrec5,
    Pubrel5,
    Suback5,
    Subscribe5,
    Unsuback5,
    Unsubscribe5,
)
from oxiedge.mqtt.properties import NO_PROPERTIES, Properties
from oxiedge.mqtt.reasons import ReasonCode as RC
from oxiedge.mqtt.router import ID_SHIFT, NO_LOCAL, RETAIN_AS_PUBLISHED
from oxiedge.mqtt.shared import SHARE_PREFIX, share_problem, unshared
from oxiedge.mqtt.topics import reserved_topic, topic_filter_problem
from oxiedge.staged import COMMIT, REFUSED, ROUTED


class TopicAliasInvalid(ProtocolError):
    """A Topic Alias of 0 or above the maximum the broker announced (MQTT-3.3.2-8/-9)."""

    reason_code: ClassVar[int] = RC.TOPIC_ALIAS_INVALID


class ReceiveMaximumExceeded(ProtocolError):
    """More QoS 2 PUBLISHes awaiting PUBREL than the broker's Receive Maximum
    (MQTT-3.3.4-8)."""

    reason_code: ClassVar[int] = RC.RECEIVE_MAXIMUM_EXCEEDED


class PayloadFormatInvalid(ProtocolError):
    """A QoS 0 PUBLISH whose Payload Format Indicator says UTF-8 and whose payload is not
    (3.3.2.3.2): there is no acknowledgement to refuse it with."""

    reason_code: ClassVar[int] = RC.PAYLOAD_FORMAT_INVALID


#: The PUBACK/PUBREC reason code for what ``Router.route5`` returned (a ``staged.Staged``,
#: indexed by its bits): 0x97 when a destination's bound refused the message (an AMQP queue
#: with x-overflow reject-publish through amq.topic), 0x10 when nothing took it (no session,
#: queue, ingest route or uplink), else success.
REASON_OF: tuple[int, ...] = tuple(
    int(RC.QUOTA_EXCEEDED if got & REFUSED else RC.SUCCESS if got & ROUTED
        else RC.NO_MATCHING_SUBSCRIBERS) for got in range(16))  # fmt: skip


def _is_utf8(payload: bytes) -> bool:
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class Handlers5:
    """One MQTT 5 client's handlers; the burst state is ``h``'s (see the module doc)."""

    def __init__(self, h: Handlers, perms: PermissionStore, *, alias_max: int,
                 receive_max: int, session_expiry: int, problem_info: bool = True,
                 wall: WallClock = time.time) -> None:  # fmt: skip
        self.h = h
        self.broker = h.broker
        self._route5 = h.broker.router.route5
        self._perms = perms
        self.aliases: dict[int, tuple[str, bytes]] = {}  # inbound: alias -> topic
        self.alias_max = alias_max  # ours, announced in CONNACK (Topic Alias Maximum)
        self.receive_max = receive_max  # ours, announced in CONNACK (Receive Maximum)
        self.session_expiry = session_expiry  # as CONNECT (or a DISCONNECT) set it
        self.wall = wall
        self.keep_will = False  # DISCONNECT 0x04: the will is published (3.14.2.1)
        # Request Problem Information 0: no Reason String but on CONNACK, PUBLISH and
        # DISCONNECT (MQTT-3.1.2-29)
        self.problem_info = problem_info

    def table(self) -> dict[type, Callable[[Any], bool]]:
        """Packet type -> handler, as ``Handlers.table`` (PUBLISH: ``on_publish``; a PUBACK
        without a reason code comes as its packet id: ``Handlers.on_puback``)."""
        return {
            Puback5: self._on_puback,
            Pubrec5: self._on_pubrec,
            Pubrel5: self._on_pubrel,
            Pubcomp5: self._on_pubcomp,
            Subscribe5: self._on_subscribe,
            Unsubscribe5: self._on_unsubscribe,
            Pingreq: self.h.table()[Pingreq],
            Disconnect5: self._on_disconnect,
            Auth: self._on_auth,
            Connect: self._on_second_connect,
            Connect5: self._on_second_connect,
        }

    # ----------------------------------------------------------------- PUBLISH
    def on_publish(self, p: RawPublish5) -> None:
        h = self.h
        h.published = True
        topic, topic_b, qos, retain, _dup, pid, payload, frame, props = p
        expires_at = None
        if props is not NO_PROPERTIES:
            alias = props.topic_alias
            if alias is not None:
                if not 0 < alias <= self.alias_max:
                    raise TopicAliasInvalid(f"Topic Alias {alias} (maximum {self.alias_max})")
                if topic:
                    self.aliases[alias] = (topic, topic_b)
                else:
                    known = self.aliases.get(alias)
                    if known is None:
                        raise ProtocolViolation(f"Topic Alias {alias} was never set (3.3.2.3.4)")
                    topic, topic_b = known
            if props.subscription_identifiers:
                raise ProtocolViolation("Subscription Identifier in a PUBLISH (MQTT-3.3.4-6)")
            if props.payload_format_indicator == 1 and not _is_utf8(payload):
                if not qos:
                    raise PayloadFormatInvalid("payload is not UTF-8 (3.3.2.3.2)")
                self.broker.stats.payload_format_invalid += 1
                self._ack(qos, pid, RC.PAYLOAD_FORMAT_INVALID)  # type: ignore[arg-type]
                return
            props, expires_at = forwarded(props, self.wall())
        if ((self._perms.active and not h.grants.may_publish(topic))  # type: ignore[union-attr]
                or (topic[0] == "$" and reserved_topic(topic))):  # $SYS, $share/
            self._perms.counters["mqtt_publish_denied"] += 1
            self._ack(qos, pid, RC.NOT_AUTHORIZED)  # type: ignore[arg-type]
            return
        route5 = self._route5
        if qos == 0:
            if route5(topic, payload, 0, retain, topic_b, props, expires_at, h.session, None,
                      frame) & COMMIT:  # (MQTT 5 subscribers share the received frame: Peer5)
                h.kick = True
        elif qos == 1:
            got = route5(topic, payload, 1, retain, topic_b, props, expires_at, h.session)
            if got & COMMIT:
                h.need_commit = True
            h.replies.append(encode_puback5(pid, REASON_OF[got]))  # type: ignore[arg-type]
        else:
            s = h.session
            assert s is not None and pid is not None
            if pid not in s.rx2 and len(s.rx2) >= self.receive_max:
                raise ReceiveMaximumExceeded(f"more than {self.receive_max} QoS 2 "
                                             "PUBLISHes awaiting PUBREL")  # fmt: skip
            # As 3.1.1 (``Handlers.on_publish``): route once, remember the id until PUBREL.
            code = 0
            if s.rx2.received(pid):
                got = route5(topic, payload, 2, retain, topic_b, props, expires_at, s)
                if got & COMMIT or s.store is not None:
                    h.need_commit = True
                code = REASON_OF[got]
            elif s.store is not None:
                h.need_commit = True
            h.replies.append(encode_pubrec5(pid, code))

    def failed(self, reason: str) -> bytes:
        """The burst's commit failed: nothing of its round is on disk, so its PUBACKs and
        PUBRECs go out as 0x80 with ``reason`` as their Reason String, the rest of its
        replies not at all, then DISCONNECT 0x80 (the connection closes)."""
        props = Properties(reason_string=reason[:120])
        ack_props = props if self.problem_info else NO_PROPERTIES
        out = []
        for r in self.h.replies:
            kind = r[0] >> 4
            if kind in (4, 5) and len(r) >= 4:  # PUBACK, PUBREC (remaining length < 128)
                pid = int.from_bytes(r[2:4], "big")
                ack = encode_puback5 if kind == 4 else encode_pubrec5
                out.append(ack(pid, RC.UNSPECIFIED_ERROR, ack_props))
        out.append(encode_disconnect5(RC.UNSPECIFIED_ERROR, props))
        return b"".join(out)

    def _ack(self, qos: int, pid: int, code: int) -> None:
        """A refused PUBLISH: PUBACK or PUBREC with ``code``; QoS 0 has nothing to say."""
        if qos == 1:
            self.h.replies.append(encode_puback5(pid, code))
        elif qos == 2:
            self.h.replies.append(encode_pubrec5(pid, code))

    # ----------------------------------------------------- acknowledgements in
    def _on_puback(self, p: Puback5) -> bool:
        self.h.on_puback(p.packet_id)  # any reason code ends the flow (4.3.2)
        return False

    def _on_pubrec(self, p: Pubrec5) -> bool:
        h, s = self.h, self.h.session
        if s is None:
            return False
        pid = p.packet_id
        if p.reason_code >= 0x80:
            # A refused QoS 2 delivery ends there: no PUBREL (4.3.3, MQTT-4.3.3-4).
            if s.on_pubrec(pid) | s.on_pubcomp(pid):
                h.kick = True
            return False
        if s.on_pubrec(pid):
            h.need_commit = True
        if pid in s.rel:
            if s.store is not None:
                h.need_commit = True
            h.replies.append(encode_pubrel5(pid))
        else:
            h.replies.append(encode_pubrel5(pid, RC.PACKET_IDENTIFIER_NOT_FOUND))
        return False

    def _on_pubrel(self, p: Pubrel5) -> bool:
        h, s = self.h, self.h.session
        pid = p.packet_id
        known = s is not None and pid in s.rx2
        if s is not None and (s.rx2.released(pid) or s.store is not None):
            h.need_commit = True  # as 3.1.1: PUBCOMP after the id's removal is durable
        h.replies.append(encode_pubcomp5(pid) if known
                         else encode_pubcomp5(pid, RC.PACKET_IDENTIFIER_NOT_FOUND))  # fmt: skip
        return False

    def _on_pubcomp(self, p: Pubcomp5) -> bool:
        s = self.h.session
        if s is not None and s.on_pubcomp(p.packet_id):
            self.h.kick = True
        return False

    # ----------------------------------------------------------- subscriptions
    def _on_subscribe(self, p: Subscribe5) -> bool:
        h, s = self.h, self.h.session
        assert s is not None
        sid = p.properties.subscription_identifiers
        ident = sid[0] << ID_SHIFT if sid else 0  # (the codec allows one, 3.8.2.1.2)
        subs = p.subscriptions
        codes: list[int] = [0] * len(subs)
        wanted: list[tuple[str, int]] = []
        at: list[int] = []  # index in ``codes`` of each ``wanted`` filter
        fresh: dict[str, bool] = {}  # filter -> not subscribed before (Retain Handling 1)
        for i, sub in enumerate(subs):
            flt = sub.topic_filter
            if sub.no_local and flt.startswith(SHARE_PREFIX):
                raise ProtocolViolation("No Local on a shared subscription (MQTT-3.8.3-4)")
            fresh.setdefault(flt, flt not in s.subs)
            # The options live in the subscription's value above its QoS (router.py).
            wanted.append((flt, sub.qos | (NO_LOCAL if sub.no_local else 0)
                           | (RETAIN_AS_PUBLISHED if sub.retain_as_published else 0) | ident))
            at.append(i)
        got, accepted, staged = h.subscribe_filters(s, wanted)
        accepted = [(flt, packed & 3) for flt, packed in accepted]
        for (flt, _qos), i, code in zip(wanted, at, got, strict=True):
            codes[i] = code if code != SUBACK_FAILURE else self._refusal(flt)
        if staged:
            h.need_commit = True
        h.replies.append(encode5(Suback5(p.packet_id, tuple(codes))))
        # Retain Handling (3.8.3.1): 0 sends the retained messages, 1 only for a new
        # subscription, 2 never (the last occurrence of a filter decides, MQTT-3.8.4-3).
        handling = {sub.topic_filter: sub.retain_handling for sub in subs}
        owed = [(flt, qos) for flt, qos in accepted
                if handling[flt] == 0 or (handling[flt] == 1 and fresh[flt])]  # fmt: skip
        if owed:
            h.after_burst.append((s, owed))
        return False

    def _refusal(self, flt: str) -> int:
        """The SUBACK reason of a refused filter: its syntax, a bound, else 0x80 (the ACLs
        too: Eclipse paho's MQTT 5 interoperability test expects 0x80 there)."""
        grants = self.h.grants
        if self._perms.active and grants is not None and not grants.may_subscribe(unshared(flt)):
            return RC.UNSPECIFIED_ERROR
        if share_problem(flt) is not None or topic_filter_problem(flt) is not None:
            return RC.TOPIC_FILTER_INVALID
        return RC.QUOTA_EXCEEDED

    def _on_unsubscribe(self, p: Unsubscribe5) -> bool:
        h, s = self.h, self.h.session
        assert s is not None
        codes: list[int] = []
        seen: set[str] = set()  # (a filter twice in one packet: the second did not exist)
        for flt in p.topics:
            there = flt in s.subs and flt not in seen
            if there:
                codes.append(RC.SUCCESS)
            elif share_problem(flt) is not None or topic_filter_problem(flt) is not None:
                codes.append(RC.TOPIC_FILTER_INVALID)
            else:
                codes.append(RC.NO_SUBSCRIPTION_EXISTED)
            seen.add(flt)
        if self.broker.unsubscribe(s, p.topics):
            h.need_commit = True
        h.replies.append(encode5(Unsuback5(p.packet_id, tuple(codes))))
        return False

    # ------------------------------------------------------------------- ends
    def _on_disconnect(self, p: Disconnect5) -> bool:
        expiry = p.properties.session_expiry_interval
        if expiry is not None:
            if expiry and not self.session_expiry:
                # MQTT-3.14.2-2: a session that was to end cannot be kept at the end.
                raise ProtocolViolation("Session Expiry Interval set at DISCONNECT after 0")
            self.session_expiry = expiry
        self.keep_will = p.reason_code == RC.DISCONNECT_WITH_WILL_MESSAGE
        self.h.disconnected = True
        return True

    def _on_auth(self, p: Auth) -> bool:
        # No authentication method was agreed at CONNECT (CONNECT with one is refused with
        # 0x8C), so an AUTH is a protocol error (MQTT-3.15.0-1 ... 4.12).
        raise ProtocolViolation("AUTH without an authentication method")

    def _on_second_connect(self, p: object) -> bool:
        raise ProtocolViolation("second CONNECT (MQTT-3.1.0-2)")
