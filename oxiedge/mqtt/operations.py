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

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from oxiedge.mqtt.protocol import MqttProtocol
from oxiedge.mqtt.session import Message
from oxiedge.mqtt.topics import valid_topic_name
from oxiedge.operations import (
    BAD_REQUEST,
    NOT_FOUND,
    REFUSED,
    Args,
    Operation,
    OperationError,
)

if TYPE_CHECKING:
    from oxiedge.mqtt.broker import Broker
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


def _no_session(client: str) -> OperationError:
    return OperationError(f"no MQTT session of client {client!r} (see `oxiedge sessions`)",
                          NOT_FOUND)


class MqttOperations:
    """The MQTT operations on one broker (see the module docstring)."""

    def __init__(self, broker: Broker, commit: Callable[[], Awaitable[None]],
                 uptime: Callable[[], float]) -> None:
        self.broker = broker
        self._commit = commit
        self._uptime = uptime  # seconds since the server started

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
        self.broker.discard_session(s)
        if durable:
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
        topics = sorted(t for t, _r in retained.items()) if everything else [topic or ""]
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
        now = trio.current_time()
        rows = []
        for s in sorted(self.broker.sessions.values(), key=lambda s: s.client_id):
            row = s.row(now)
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
        return [SubscriptionRow(s.client_id, flt, qos, s.conn is not None)
                for s in sorted(self.broker.sessions.values(), key=lambda s: s.client_id)
                for flt, qos in sorted(s.subs.items())]

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
        ]


def _end(s: Session, reason: str) -> None:
    """Detach ``s`` from its connection, then end that connection (as a take-over does:
    from here on nothing of the session leaves through it)."""
    outlet, s.conn, s.replay = s.conn, None, None
    proto = getattr(outlet, "protocol", None)
    if isinstance(proto, MqttProtocol):
        proto.end(reason)


def _opt_int(value: object) -> int | None:
    return None if value is None else int(str(value))
