"""The operator's MQTT operations (``oxiedge/operations.py`` tells the whole story).

* ``session.delete``: a persistent session goes with its subscriptions and everything it
  was owed (queued and in-flight messages, counted in the result), as when
  ``--mqtt-session-expiry`` expires it (``Broker.discard_session``); a connected client is
  disconnected first, as a take-over would (its will is published).
* ``client.kick``: the client's connection ends (``MqttProtocol.end``), as Mosquitto's
  ``kickClient``; a persistent session stays and the client may come back.
* ``retained.clear``: a topic's retained message (or all of them) is cleared as a
  zero-byte retained PUBLISH would clear it (MQTT-3.3.1-10) - without delivering anything.
* ``sessions`` (``--offline``, ``--older-than``), ``subscriptions``: the listings.

Every change is committed before the answer.
"""

from __future__ import annotations

import base64
import math
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from oxiedge.mqtt.localclient import LocalClientError, local_client
from oxiedge.mqtt.packets import SUBACK_FAILURE, Publish
from oxiedge.mqtt.protocol import MqttProtocol
from oxiedge.mqtt.reasons import ReasonCode
from oxiedge.mqtt.session import Message
from oxiedge.mqtt.topics import valid_topic_name
from oxiedge.operations import (
    BAD_REQUEST,
    NOT_FOUND,
    REFUSED,
    UNAVAILABLE,
    Args,
    Emit,
    Operation,
    OperationError,
    Streamed,
)

if TYPE_CHECKING:
    from oxiedge.mqtt.broker import Broker
    from oxiedge.mqtt.connection import ConnectionHost
    from oxiedge.mqtt.session import Session

#: How long ``client.kick`` waits for the connection to let go of its session.
KICK_WAIT_S = 2.0


@dataclass(frozen=True, slots=True)
class SessionDeleted:
    client: str
    messages: int  # queued + in flight, deleted with it
    subscriptions: int
    was_connected: bool


@dataclass(frozen=True, slots=True)
class Kicked:
    client: str


@dataclass(frozen=True, slots=True)
class RetainedCleared:
    cleared: int
    topics: list[str]


@dataclass(frozen=True, slots=True)
class SessionRow:
    client: str
    connected: bool
    clean: bool
    subscriptions: int
    queued: int
    inflight: int
    dropped: int
    #: seconds until --mqtt-session-expiry deletes it (None: connected, clean, no expiry)
    expires_in: int | None
    #: seconds offline (None: connected); a session offline since before the server
    #: started counts from the start (a lower bound)
    offline_s: int | None


@dataclass(frozen=True, slots=True)
class SubscriptionRow:
    client: str
    filter: str
    qos: int
    connected: bool


@dataclass(frozen=True, slots=True)
class Published:
    topic: str
    qos: int
    retain: bool
    bytes: int


@dataclass(frozen=True, slots=True)
class Received:
    """One message a local subscriber got (``oxiedge sub``); ``payload`` in base64."""
    topic: str
    payload: str
    qos: int
    retain: bool


@dataclass(frozen=True, slots=True)
class SubscriptionEnded:
    received: int
    granted: list[int]
    timed_out: bool  # ``timeout`` passed (before ``count`` messages, if one was given)


def _no_session(client: str) -> OperationError:
    return OperationError(f"no MQTT session of client {client!r} (see `oxiedge sessions`)",
                          NOT_FOUND)


class MqttOperations:
    """The MQTT operations on one broker (see the module docstring)."""

    def __init__(self, broker: Broker, commit: Callable[[], Awaitable[None]],
                 uptime: Callable[[], float], host: ConnectionHost | None = None) -> None:
        self.broker = broker
        self._commit = commit
        self._uptime = uptime  # seconds since the server started
        self.host = host  # what a local client's connection is served by (pub, sub)

    def _session(self, client: str) -> Session:
        s = self.broker.sessions.get(client)
        if s is None:
            raise _no_session(client)
        if client in self.broker.connecting:
            raise OperationError(f"client {client!r} is connecting right now: try again",
                                 REFUSED)
        return s

    async def delete_session(self, client: str) -> SessionDeleted:
        s = self._session(client)
        connected = s.conn is not None
        if connected:
            _end(s, "session deleted by the administrator")
        messages = len(s.queue) + len(s.inflight)
        subscriptions = len(s.subs)
        durable = s.store is not None
        if self.broker.discard_session(s) or durable:
            await self._commit()
        return SessionDeleted(client, messages, subscriptions, connected)

    async def kick(self, client: str) -> Kicked:
        s = self._session(client)
        outlet = s.conn
        if outlet is None:
            raise OperationError(f"client {client!r} is not connected", NOT_FOUND)
        proto = getattr(outlet, "protocol", None)
        if not isinstance(proto, MqttProtocol):
            raise OperationError(f"client {client!r}: its connection cannot be ended", REFUSED)
        proto.disconnect5(ReasonCode.ADMINISTRATIVE_ACTION)  # (MQTT 5 clients hear why)
        proto.end("kicked by the administrator")
        with trio.move_on_after(KICK_WAIT_S):  # `oxiedge sessions` then shows it offline
            while s.conn is outlet:
                await trio.sleep(0.01)
        return Kicked(client)

    async def clear_retained(self, topic: str | None, everything: bool = False
                             ) -> RetainedCleared:
        retained = self.broker.retained
        if everything == (topic is not None):
            raise OperationError("give a topic or --all", BAD_REQUEST)
        if topic is not None and not valid_topic_name(topic):
            raise OperationError(f"{topic!r} is not a topic name (no wildcards)", BAD_REQUEST)
        if topic is not None and topic.startswith("$SYS/"):
            raise OperationError(f"{topic!r} is the broker's own $SYS value (--sys-interval)",
                                 BAD_REQUEST)
        topics = (sorted(t for t, _r in retained.items() if not t.startswith("$SYS/"))
                  if everything else [topic or ""])  # $SYS: the broker's, rewritten anyway
        if not everything and retained.get(topics[0]) is None:
            raise OperationError(f"no retained message on topic {topic!r}", NOT_FOUND)
        staged = False
        for t in topics:
            staged |= retained.keep(Message(t, b""), 0)  # MQTT-3.3.1-10: an empty one clears
        if staged:
            await self._commit()
        return RetainedCleared(len(topics), topics)

    def session_rows(self, offline: bool = False, older_than: float | None = None
                     ) -> list[SessionRow]:
        now, wall = trio.current_time(), time.time()
        rows = []
        for s in sorted(self.broker.sessions.values(), key=lambda s: s.client_id):
            row = s.row(now, wall)
            away: int | None = None
            if s.conn is None:
                since = s.offline_since
                away = round(self._uptime() if since is None else now - since)
            if (offline or older_than is not None) and away is None:
                continue
            if older_than is not None and away is not None and away < older_than:
                continue
            rows.append(SessionRow(
                s.client_id, s.conn is not None, s.clean, len(s.subs), int(str(row["queued"])),
                int(str(row["inflight"])), s.dropped, _opt_int(row.get("expires_in")), away))
        return rows

    def subscription_rows(self) -> list[SubscriptionRow]:
        return [SubscriptionRow(s.client_id, flt, qos & 3, s.conn is not None)
                for s in sorted(self.broker.sessions.values(), key=lambda s: s.client_id)
                for flt, qos in sorted(s.subs.items())]

    # -- a local client (``oxiedge pub`` / ``sub``, ``localclient.py``) ---------------------

    def _local(self) -> ConnectionHost:
        if self.host is None:
            raise OperationError("no MQTT broker to connect to", UNAVAILABLE)
        return self.host

    async def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False,
                      *, client_id: str | None = None, username: str | None = None,
                      password: bytes | None = None) -> Published:
        """Publish as a client of this broker would (its login, permissions, bounds);
        returns once the broker acknowledged it (QoS 1 and 2: once durable)."""
        host = self._local()
        alarms = host.app.alarms
        if alarms.blocked:  # (a client would wait, unanswered, until it clears)
            raise OperationError(f"publishers are held by a resource alarm: {alarms.reason}")
        cid = client_id or f"oxiedge-pub-{secrets.token_hex(4)}"
        try:
            async with local_client(host, cid, username=username, password=password) as c:
                await c.publish(topic, payload, qos, retain)
        except LocalClientError as exc:
            raise OperationError(str(exc), REFUSED) from None
        return Published(topic, qos, retain, len(payload))

    def subscribe(self, filters: list[str], qos: int = 0, *, count: int | None = None,
                  timeout: float | None = None, client_id: str | None = None,
                  clean: bool = True, username: str | None = None,
                  password: bytes | None = None) -> Streamed:
        """Subscribe as a client would and stream what arrives: until ``count`` messages,
        ``timeout`` seconds, or the front end goes away (a clean session ends then)."""
        host = self._local()
        cid = client_id or f"oxiedge-sub-{secrets.token_hex(4)}"

        async def run(emit: Emit) -> SubscriptionEnded:
            received = 0

            async def deliver(p: Publish) -> None:
                nonlocal received
                received += 1
                await emit(Received(p.topic, base64.b64encode(p.payload).decode(), p.qos,
                                    p.retain))

            try:
                async with local_client(host, cid, clean=clean, username=username,
                                        password=password) as c:
                    granted = await c.subscribe([(f, qos) for f in filters])
                    refused = [f for f, code in zip(filters, granted, strict=False)
                               if code == SUBACK_FAILURE]
                    if refused:
                        raise OperationError(
                            f"subscription refused by the broker: {', '.join(refused)} (not "
                            "permitted for this user, or over a subscription bound)", REFUSED)
                    with trio.move_on_after(math.inf if timeout is None else timeout) as t:
                        await c.receive(deliver, count)
            except LocalClientError as exc:
                raise OperationError(str(exc), REFUSED) from None
            return SubscriptionEnded(received, list(granted), t.cancelled_caught)

        return Streamed(run)

    def operations(self) -> list[Operation]:
        """This broker's entries of the operation table (``docs/operations.md``)."""

        def older(a: Args) -> float | None:
            return a.number("older_than")

        return [
            Operation("sessions", "MQTT sessions (offline, offline longer than N seconds)",
                      lambda a: self.session_rows(a.flag("offline"), older(a))),
            Operation("subscriptions", "MQTT subscriptions",
                      lambda a: self.subscription_rows()),
            Operation("session.delete", "delete a session and what it is owed",
                      lambda a: self.delete_session(a.text("client", required=True)),
                      writes=True),
            Operation("client.kick", "disconnect an MQTT client",
                      lambda a: self.kick(a.text("client", required=True)), writes=True),
            Operation("retained.clear", "clear a topic's retained message, or all",
                      lambda a: self.clear_retained(a.optional_text("topic"), a.flag("all")),
                      writes=True),
            Operation("mqtt.publish", "publish as a local client (payload in base64)",
                      lambda a: self.publish(
                          a.text("topic", required=True), _payload(a),
                          a.integer("qos", 0, high=2), a.flag("retain"), **_login(a)),
                      writes=True),
            Operation("mqtt.subscribe", "subscribe as a local client: a stream of messages",
                      lambda a: self.subscribe(
                          _filters(a), a.integer("qos", 0, high=2), count=_count(a),
                          timeout=a.number("timeout"), clean=a.flag("clean", True),
                          **_login(a))),
        ]


def _login(a: Args) -> dict[str, Any]:
    password = a.optional_text("password")
    return {"client_id": a.optional_text("client_id"), "username": a.optional_text("username"),
            "password": None if password is None else password.encode()}


def _payload(a: Args) -> bytes:
    try:
        return base64.b64decode(a.text("payload", ""), validate=True)
    except ValueError:
        raise OperationError("argument 'payload' must be base64", BAD_REQUEST) from None


def _filters(a: Args) -> list[str]:
    raw = a.raw.get("filters")
    if not isinstance(raw, list) or not raw or not all(isinstance(f, str) and f for f in raw):
        raise OperationError("argument 'filters' must be a list of topic filters", BAD_REQUEST)
    return raw


def _count(a: Args) -> int | None:
    count = a.integer("count", 0, low=0)
    return count or None


def _end(s: Session, reason: str) -> None:
    """Detach ``s`` from its connection, then end that connection (as a take-over does:
    from here on nothing of the session leaves through it)."""
    outlet, s.conn, s.replay = s.conn, None, None
    proto = getattr(outlet, "protocol", None)
    if isinstance(proto, MqttProtocol):
        proto.disconnect5(ReasonCode.ADMINISTRATIVE_ACTION)  # (MQTT 5 clients hear why)
        proto.end(reason)


def _opt_int(value: object) -> int | None:
    return None if value is None else int(str(value))
