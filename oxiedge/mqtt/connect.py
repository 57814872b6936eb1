"""The CONNECT step of an MQTT connection (``MqttProtocol``'s first packet, 3.1/3.2).

The first packet must be CONNECT (MQTT-3.1.0-1; a non-CONNECT first byte is refused before
its body arrives); then the protocol level, the client id (an empty one assigned, or
refused without a clean session), the will topic's bounds, the login (a thread, through
``Authenticate``; or the TLS identity), the session count, a take-over of the client id's
current connection (a persistent session taken over by a persistent one keeps its will
unpublished), the session - with a commit before CONNACK when it depends on one - and
the re-sends of a resumed session. A mixin of ``MqttProtocol``: the state is the
protocol's (see there), the steps are generators as in ``_run``.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING

from oxiedge.access.grants import Grants
from oxiedge.mqtt.codec import PacketTooLarge, ProtocolError, TopicTooLong, encode
from oxiedge.mqtt.connect5 import (
    TOPIC_ALIAS_MAXIMUM,
    Connect5Terms,
    refusal,
    response_information,
)
from oxiedge.mqtt.encode5 import encode5
from oxiedge.mqtt.forward5 import Peer5
from oxiedge.mqtt.handlers5 import Handlers5
from oxiedge.mqtt.packets import Connack, ConnackCode, Connect, PacketType, Will, first_byte
from oxiedge.mqtt.packets5 import Connack5, Connect5, Will5
from oxiedge.mqtt.topics import topic_limit_problem
from oxiedge.net.actions import KICK, Authenticate

if TYPE_CHECKING:
    from oxiedge.access.rules import PermissionStore
    from oxiedge.mqtt.bounds import Limits
    from oxiedge.mqtt.broker import Broker
    from oxiedge.mqtt.codec5 import Decoder5
    from oxiedge.mqtt.handlers import Handlers
    from oxiedge.mqtt.ports import Outlet
    from oxiedge.mqtt.session import Session

_CONNECT_FIRST = first_byte(PacketType.CONNECT)


def _anything(_flt: str) -> bool:
    return True  # (no read rules are active)


def _connack(code: int, present: bool = False) -> bytes:
    return encode(Connack(code, present))


class CloseConnection(Exception):
    """End the connection; ``abnormal`` means the will is published, ``by_broker`` that
    the broker decided it (``MqttProtocol.ended_by_broker``)."""

    def __init__(self, reason: str, abnormal: bool = True, by_broker: bool = False) -> None:
        super().__init__(reason)
        self.abnormal = abnormal
        self.by_broker = by_broker


class ConnectStep:
    """``_handshake``: read and handle CONNECT; the keep-alive it asked for."""

    broker: Broker
    outlet: Outlet
    limits: Limits
    decoder: Decoder5
    max_packet_size: int
    deadline: float
    session: Session | None
    will: Will | Will5 | None
    level: int
    _h5: Handlers5 | None
    client_id: str
    tls_identity: str | None
    username: str | None
    grants: Grants | None
    _perms: PermissionStore
    _h: Handlers
    _ok: bool

    if TYPE_CHECKING:  # (MqttProtocol's)
        def _read(self) -> Generator[object, None, None]: ...

        def _commit(self) -> Generator[object, None, None]: ...

        def take_over(self) -> None: ...

    def _handshake(self) -> Generator[object, None, int]:
        decoder = self.decoder
        first = None
        while first is None:
            yield from self._read()
            if decoder.first_byte != _CONNECT_FIRST:
                # MQTT-3.1.0-1: no need to wait for the body of a non-CONNECT.
                raise ProtocolError("first packet is not CONNECT (MQTT-3.1.0-1)")
            try:
                first = decoder.next_connect()
            except PacketTooLarge:
                self.broker.stats.connect_too_large += 1
                raise
        if not isinstance(first, (Connect, Connect5)):
            raise ProtocolError("first packet is not CONNECT (MQTT-3.1.0-1)")
        self.deadline = math.inf  # a slow login or disk is not the client's delay
        keep_alive = yield from self._connect(first)
        decoder.max_packet_size = self.max_packet_size  # authenticated now
        decoder.mqtt31 = first.protocol_level == 3
        return keep_alive

    def _refuse(self, code: int) -> None:
        """Write the CONNACK that refuses the connection (3.1.1 ``code``; MQTT 5: its
        reason code, 3.2.2.2)."""
        if self.level == 5:
            self.outlet.write(encode5(Connack5(refusal(code))))
        else:
            self.outlet.write(_connack(code))

    def _connect(self, pkt: Connect | Connect5) -> Generator[object, None, int]:
        broker = self.broker
        if (pkt.protocol_name, pkt.protocol_level) not in (("MQTT", 4), ("MQIsdp", 3),
                                                           ("MQTT", 5)):
            self._refuse(ConnackCode.UNACCEPTABLE_PROTOCOL_VERSION)  # MQTT-3.1.2-2
            raise CloseConnection(f"unsupported protocol level {pkt.protocol_level}",
                                  abnormal=False)
        terms = None
        if isinstance(pkt, Connect5):
            self.level = 5
            terms = Connect5Terms.of(pkt, self.limits.session_expiry,
                                     self.limits.max_keepalive)
            if pkt.properties.authentication_method is not None:
                # Enhanced authentication (4.12): no method is supported.
                self.outlet.write(encode5(Connack5(0x8C)))
                raise CloseConnection("unsupported authentication method", abnormal=False)
            clean = pkt.clean_start
        else:
            clean = pkt.clean_session
        client_id = pkt.client_id
        assigned = None
        if not client_id:
            if not clean and terms is None:
                self._refuse(ConnackCode.IDENTIFIER_REJECTED)  # MQTT-3.1.3-8
                raise CloseConnection("empty client id with clean_session=0", abnormal=False)
            client_id = assigned = broker.assign_client_id()  # MQTT-3.1.3-6
        self.client_id = client_id
        will = pkt.will
        if will is not None:
            lim = self.limits
            if topic_limit_problem(will.topic, lim.max_topic_levels, lim.max_topic_length):
                raise TopicTooLong("will topic over --mqtt-max-topic-levels/-length")
        if self.tls_identity is not None:
            # --tls-identity-as-username (Mosquitto's use_identity_as_username): the verified
            # certificate is the credential and its name the user; CONNECT's are ignored.
            self.username = self.tls_identity
        else:
            self._ok = False
            yield Authenticate(pkt.username, pkt.password)  # off the event loop
            if not self._ok:
                broker.stats.auth_failures += 1
                # 3.2.2.3: 4 = bad user name or password, 5 = not authorized (none given).
                self._refuse(ConnackCode.BAD_USERNAME_OR_PASSWORD if pkt.username is not None
                             else ConnackCode.NOT_AUTHORIZED)  # fmt: skip
                raise CloseConnection("authentication failed", abnormal=False)
            self.username = pkt.username
        self.grants = Grants(self._perms, self.username, client_id)
        if not broker.session_room(client_id):
            broker.stats.sessions_refused += 1
            self._refuse(ConnackCode.SERVER_UNAVAILABLE)  # 3.2.2.3
            raise CloseConnection(f"--mqtt-max-sessions ({self.limits.max_sessions}) reached",
                         abnormal=False)  # fmt: skip
        old = broker.sessions.get(client_id)
        if old is not None and old.conn is not None:
            conn = old.conn
            old.conn = None  # from here on the old connection delivers nothing
            old.replay = None
            broker.stats.takeovers += 1
            other = getattr(conn, "protocol", None)
            if isinstance(other, ConnectStep):
                if not old.clean and not clean and other.will is not None:
                    # A persistent session taken over by a persistent one continues: its
                    # will is not published (Mosquitto 2; MQTT 5 does the same).
                    other.will = None
                    broker.stats.wills_skipped += 1
                other.take_over()
        if terms is None:
            s, present, staged = broker.open_session(client_id, clean, self.username or "")
        else:
            s, present, staged = self._open_session5(client_id, clean, terms)
        # CONNACK waits for a commit when it depends on one: the session record (new, or
        # a clean session replacing a durable one) exists before CONNACK; a resumed
        # durable session may have state that an earlier connection staged in a round
        # still open (QoS 2 packet ids, PUBREL obligations that ``resend`` sends below).
        if staged or (present and s.store is not None):
            broker.connecting[client_id] = self
            try:
                yield from self._commit()
            finally:
                newest = broker.connecting.get(client_id) is self
                if newest:
                    del broker.connecting[client_id]
            if not newest or broker.sessions.get(client_id) is not s or s.conn is not None:
                broker.stats.takeovers += 1  # (the newer CONNECT found no connection to end)
                raise CloseConnection("session taken over during CONNECT", by_broker=True)
        self.session = self._h.session = s
        self._h.grants = self.grants
        self.will = pkt.will
        if terms is None:
            # MQTT 3.1 (level 3) has no session-present flag: that byte is reserved there.
            self.outlet.write(_connack(ConnackCode.ACCEPTED, present and pkt.protocol_level == 4))
            s.peer, s.window = None, self.limits.max_inflight
            if s.expiry is not None and s.set_expiry(None, None):
                yield KICK  # (an MQTT 5 session resumed by 3.1.1: --mqtt-session-expiry)
        elif self._accept5(s, present, terms, assigned):
            yield KICK  # its expiry record says "connected"
        s.conn = self.outlet
        if broker.wills.cancel(client_id):  # MQTT-3.1.3-9: a delayed will is not sent
            broker.stats.wills_skipped += 1  # (cancelled once the session is ours: the
            # connection that left it may still be closing, and only then delay its will)
            yield KICK  # (its record's deletion)
        s.offline_since = None  # attached: no session expiry (Broker.expire_sessions)
        broker.set_acl(s, self.grants)
        if self._perms.active and (s.queue or s.inflight):
            unreadable = broker.drop_unreadable(s)
            if unreadable:
                self._perms.counters["mqtt_queued_dropped"] += unreadable
                yield KICK
        s.resend()
        return pkt.keep_alive if terms is None else terms.keep_alive

    def _open_session5(self, client_id: str, clean_start: bool, terms: Connect5Terms
                       ) -> tuple[Session, bool, bool]:  # fmt: skip
        """``Broker.open_session`` for MQTT 5: Clean Start discards what existed (3.1.2.4),
        the Session Expiry Interval decides whether the session outlives the connection
        (0: it ends with it, 3.1.2.11.2)."""
        broker = self.broker
        durable = terms.session_expiry > 0
        staged = False
        old = broker.sessions.get(client_id)
        if old is not None and clean_start and durable:
            # a new durable session replaces it (its shared messages go to other members)
            staged = broker.discard_session(old) or old.store is not None
        s, present, more = broker.open_session(client_id, not durable and
                                               (clean_start or old is None), self.username or "")
        return s, present, staged or more

    def _accept5(self, s: Session, present: bool, terms: Connect5Terms,
                 assigned: str | None) -> bool:  # fmt: skip
        """CONNACK of an MQTT 5 connection; the session learns its client's limits and
        its expiry (True: its record was staged)."""
        if not terms.session_expiry:
            # A resumed durable session ends with this connection (3.1.2.11.2). Set only
            # now that it is ours: the connection that left it may still be closing.
            s.clean = True
        h5 = self._h5 = Handlers5(self._h, self._perms, alias_max=TOPIC_ALIAS_MAXIMUM,
                                  receive_max=self.limits.max_qos2_pending,
                                  session_expiry=terms.session_expiry,
                                  problem_info=terms.problem_info)  # fmt: skip
        response = None
        if terms.response_info:
            grants = self.grants
            response = response_information(
                s.client_id, grants.may_subscribe if self._perms.active and grants is not None
                else _anything)  # fmt: skip
        for info in (response, None) if response is not None else (None,):
            connack = encode5(terms.connack(
                present, assigned=assigned, receive_maximum=h5.receive_max,
                max_packet_size=self.max_packet_size, response=info))
            if len(connack) <= terms.max_packet:
                break  # (else without it: MQTT-3.1.2-24, the client's Maximum Packet Size)
        self.outlet.write(connack)
        s.peer = Peer5(self.broker.stats, receive_maximum=terms.receive_maximum,
                       max_packet=terms.max_packet, alias_max=terms.topic_alias_maximum)
        s.window = min(self.limits.max_inflight, terms.receive_maximum)
        return s.set_expiry(terms.session_expiry, None)
