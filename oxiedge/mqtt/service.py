"""``MqttService``: the MQTT 3.1.1 broker as one service of ``oxiedge serve``.

It owns the ``Broker`` (state, router), recovers it before the listener opens, accepts
connections (one ``Connection`` each), answers the admin operations ``sessions`` and
``retained``, exposes counters, shows its raw records as the ``_mqtt`` collection, and
is the MQTT entry of the bus (``oxiedge/bus.py``): ``publish_from_bridge`` routes a
message from another origin as if a client had published it. The router hands every
publish on to the bus (``Broker.bus``, wired by ``server.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import trio

from oxiedge import __version__
from oxiedge.access.grants import Grants
from oxiedge.app import App
from oxiedge.durations import format_duration
from oxiedge.lograte import clip
from oxiedge.mqtt.broker import Broker
from oxiedge.mqtt.codec import topic_cache_bytes
from oxiedge.mqtt.connection import Connection, Traffic
from oxiedge.mqtt.forward5 import from_bus
from oxiedge.mqtt.operations import MqttOperations
from oxiedge.mqtt.properties import NO_PROPERTIES, Properties
from oxiedge.mqtt.protocol import MqttProtocol
from oxiedge.mqtt.reasons import ReasonCode
from oxiedge.mqtt.session import Limits, Session
from oxiedge.mqtt.systree import SysTree
from oxiedge.mqtt.topics import sys_topic, valid_topic_name
from oxiedge.mqtt.views import register_views
from oxiedge.operations import handlers
from oxiedge.staged import COMMIT, MQTT, MessageProps, Origin
from oxiedge.tls import TlsManager, open_secured, peer_name

#: Client ids one expiry log line names; the rest are counted.
EXPIRED_NAMED = 10


class MqttService:
    """The MQTT broker service (see ``oxiedge.service.Service``)."""

    name = "mqtt"

    def __init__(self, app: App, *, tls: TlsManager | None = None) -> None:
        self.app = app
        self.tls = tls  # the TLS listener's manager (handshakes), if there is one
        config = app.config
        self.persist = bool(config.mqtt_persist)
        # --max-backlog-bytes: one budget with the AMQP queues paged to disk (app.backlog).
        budget, self.backlog_source = app.backlog.budget, app.backlog.source
        self.limits = Limits(
            queue_limit=config.mqtt_queue_limit,
            queue_bytes=config.mqtt_queue_bytes,
            max_subscriptions=config.mqtt_max_subscriptions,
            max_subscription_levels=config.mqtt_max_subscription_levels,
            max_sessions=config.mqtt_max_sessions,
            retained_max=config.mqtt_retained_max,
            retained_bytes=config.mqtt_retained_bytes,
            max_topic_levels=config.mqtt_max_topic_levels,
            max_topic_length=config.mqtt_max_topic_length,
            session_expiry=config.mqtt_session_expiry,
            max_backlog_bytes=budget,
            max_keepalive=config.mqtt_max_keepalive,
        )
        self.max_packet_size = config.mqtt_max_packet_size
        self.max_connect_size = config.mqtt_max_connect_size  # before CONNECT is accepted
        self.connect_timeout = float(config.mqtt_connect_timeout)  # seconds to send CONNECT
        self.broker = Broker(app.store if self.persist else None, self.limits)
        self.limits.backlog = app.backlog  # what the AMQP queues hold counts too
        app.backlog.join(self.broker.stats)
        self.broker.on_hold = self._wake_releaser
        self._held = trio.Event()
        perms = app.permissions  # deliveries follow the read rules from the first change on
        self.broker.acl_active = perms.active
        perms.on_change.append(lambda: self.broker.acl_changed(perms.active))
        # A session recovered at start-up reads with its recorded user's rules at once.
        self.broker.reader_for = lambda user, client_id: Grants(perms, user, client_id)
        self._lines: list[str] = []
        #: Bytes read and sent by every MQTT connection (TCP, TLS, WebSocket).
        self.traffic = Traffic()
        #: $SYS/broker/... every --sys-interval seconds (None: 0, off).
        self.systree = (SysTree(self.broker, self.traffic, version=__version__,
                                interval=config.sys_interval,
                                uptime=lambda: time.time() - app.started_at)
                        if config.sys_interval else None)
        register_views(app.store)
        #: What an operator may do (delete a session, kick a client...): the admin socket's
        #: and the HTTP API's one implementation.
        self.operations = MqttOperations(self.broker, app.store.commit,
                                         lambda: time.time() - app.started_at, self)

    # ----------------------------------------------------------------- bridges
    def publish_from_bridge(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        origin: Origin | None = None,
        props: MessageProps | None = None,
    ) -> bool:
        """Inject a message as if a client had published it. Returns True if durable work
        was staged: the caller must ``await app.store.commit()`` before acknowledging
        its source. ``origin``: where it entered the bus (the bus never hands it back
        there; ``None``: as an MQTT client); ``props``: its properties (MQTT 5
        subscribers get them). Raises ValueError for an invalid topic name or QoS, and
        for a ``$SYS`` topic."""
        if not valid_topic_name(topic) or qos not in (0, 1, 2):
            raise ValueError(f"invalid MQTT topic {topic!r} or QoS {qos}")
        if sys_topic(topic):  # the broker's own (systree.py), from no other origin
            raise ValueError(f"MQTT topic {topic!r}: $SYS topics are the broker's")
        if props is None:
            return self.broker.route(topic, payload, qos, retain, origin)
        return bool(self.broker.router.route5(topic, payload, qos, retain, topic.encode(),
                                              from_bus(props), props.expires_at, None,
                                              origin or MQTT) & COMMIT)

    async def publish(
        self,
        topic: str,
        payload: bytes,
        qos: int = 0,
        retain: bool = False,
        origin: Origin | None = None,
    ) -> None:
        """``publish_from_bridge`` plus the commit (returns once it is durable)."""
        if self.publish_from_bridge(topic, payload, qos, retain, origin):
            await self.app.store.commit()

    # --------------------------------------------------------------- lifecycle
    async def recover(self) -> None:
        """Load sessions, queued messages, QoS 2 state and retained messages."""
        if not self.persist:
            self._lines = ["MQTT persistence off - sessions live in memory only"]
            return
        sessions, pending = self.broker.recover(time.time())
        if self.app.store.committer.pending:
            await self.app.store.commit()  # queue surplus removed on disk (bound)
        self._lines = [
            f"MQTT persistence on - recovered {sessions} sessions, {pending} pending messages"
        ]

    def listening_suffix(self) -> str:
        return ""

    def extra_lines(self) -> list[str]:
        return list(self._lines)

    async def run(
        self,
        listeners: list[trio.abc.Listener[Any]],
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept connections until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.release_held)
            nursery.start_soon(self.expire_sessions)
            if self.systree is not None:
                nursery.start_soon(self.systree.run)
            await nursery.start(trio.serve_listeners,
                                self.app.connections.guard(self._handle, "MQTT"), listeners)
            task_status.started()

    def shutting_down(self) -> None:
        """The server stops: every MQTT 5 client is told so (DISCONNECT 0x8B, 4.13), each
        with one non-blocking write while every connection is still open. With
        ``--mqtt-server-reference`` it is DISCONNECT 0x9C (Use another server, 4.11) with
        that Server Reference: the operator named a server to use meanwhile."""
        ref = self.app.config.mqtt_server_reference
        code, props = ((ReasonCode.USE_ANOTHER_SERVER, Properties(server_reference=ref)) if ref
                       else (ReasonCode.SERVER_SHUTTING_DOWN, NO_PROPERTIES))  # fmt: skip
        for s in list(self.broker.sessions.values()):
            conn = s.conn
            if conn is not None and s.peer is not None:
                proto = getattr(conn, "protocol", None)
                if isinstance(proto, MqttProtocol):
                    proto.disconnect5(code, props)

    def _wake_releaser(self) -> None:
        self._held.set()

    async def release_held(self) -> None:
        """Release the deliveries the broker holds for a commit that nobody else awaits
        (a will, a retained replay after SUBACK, a bridge's publish): commit, then send.
        A connection releases what its own read burst held itself (``router.py``)."""
        broker, store = self.broker, self.app.store
        while True:
            await self._held.wait()
            self._held = trio.Event()
            hold = broker.take_hold()
            if hold is None:
                continue  # a connection took it for its own commit
            try:
                await store.commit()
            except Exception as exc:  # CommitError: not durable, so never sent
                self.app.log.error("MQTT: commit failed, %d held deliveries dropped: %s",
                                   len(hold.pending) + len(hold.qos0), exc)  # fmt: skip
                continue
            except BaseException:
                broker.return_hold(hold)
                raise
            hold.release()

    async def expire_sessions(self) -> None:
        """Delete the persistent sessions offline longer than ``--mqtt-session-expiry``
        (``Broker.expire_sessions``), checked every tenth of it (1 s to 60 s), and MQTT 5
        sessions at their own deadline (checked every second while one is offline)."""
        expiry = self.limits.session_expiry
        interval = 60.0 if expiry is None else min(60.0, max(1.0, expiry / 10))
        due = trio.current_time()
        while True:
            now = trio.current_time()
            if self.broker.wills and self.broker.wills.due(time.time()):
                try:  # (what a delayed will staged; its QoS 2 hold goes to the releaser)
                    await self.app.store.commit()
                except Exception as exc:  # CommitError: the server stops on it anyway
                    self.app.log.error("MQTT: commit of delayed wills failed: %s", exc)
                    return
            if now < due and not self.broker.deadlines:
                await trio.sleep(1.0)  # (an MQTT 5 session may go offline meanwhile)
                continue
            due = now + interval
            expired = self.broker.expire_sessions(now, time.time())
            if expired:
                # Logged once the deletion is durable (a crash before it brings them back,
                # with their full expiry: nothing the log said was deleted reappears).
                try:
                    await self.app.store.commit()
                except Exception as exc:  # CommitError: the server stops on it anyway
                    self.app.log.error("MQTT: commit of expired sessions failed: %s", exc)
                    return
                self.broker.stats.sessions_expired += len(expired)  # counted once durable
                self._log_expired(expired, expiry)
            await trio.sleep(1.0)

    def _log_expired(self, expired: list[Session], expiry: int | None) -> None:
        """One info line per sweep: who expired and what was lost with them (queued and
        unacknowledged messages; a QoS 2 one awaiting PUBCOMP was received already)."""
        lost = sum(len(s.queue) + len(s.inflight) for s in expired)
        names = ", ".join(clip(s.client_id) for s in expired[:EXPIRED_NAMED])
        if len(expired) > EXPIRED_NAMED:
            names += f" and {len(expired) - EXPIRED_NAMED} more"
        over = "their expiry" if expiry is None or any(s.expiry is not None for s in expired) \
            else format_duration(expiry)
        self.app.log.info("MQTT: %d persistent session%s offline over %s expired (%s); %d "
                          "undelivered message%s deleted with them", len(expired),
                          "" if len(expired) == 1 else "s", over,
                          names, lost, "" if lost == 1 else "s")  # fmt: skip

    async def _handle(self, stream: trio.abc.Stream) -> None:
        go_on, identity = await open_secured(self.tls, stream, "MQTT")
        if not go_on:
            return
        conn = Connection(self, stream, identity, peer_name(stream))
        try:
            await conn.serve()
        except Exception as exc:  # a bug in one connection must not end the server
            self.app.log.exception("MQTT: connection %s failed: %s", clip(conn.client_id), exc)

    async def authenticate(self, username: str | None, password: bytes | None) -> bool:
        """Check credentials: off the event loop, throttled after failures (oxiedge.login)."""
        return await self.app.logins.check(username, password)

    # ------------------------------------------------------------------- admin
    def admin_handlers(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        """The listings and the operator's operations (``mqtt/operations.py``)."""
        return {
            "retained": lambda args: self.broker.retained_rows(args.get("sys") is True),
            **handlers(self.operations.operations()),
        }

    def status(self) -> dict[str, Any]:
        b = self.broker
        out: dict[str, Any] = dict(b.stats.as_dict())
        lim = self.limits
        sessions = b.sessions.values()
        out.update(
            persist=self.persist,
            sessions=len(b.sessions),
            subscriptions=len(b.subscriptions),
            retained=len(b.retained) - b.retained.unstored,  # the clients' ($SYS apart)
            retained_bytes=b.retained_bytes,
            queued=sum(len(s.queue) for s in sessions),
            queued_bytes=sum(s.queue_bytes for s in sessions),
            inflight=sum(len(s.inflight) + len(s.rel) for s in sessions),
            retained_owed=sum(s.replay.owed() for s in sessions if s.replay is not None),
            wills_waiting=len(b.wills),  # MQTT 5 wills waiting out their delay (on disk)
            topic_cache_bytes=topic_cache_bytes(),
            # The bounds (docs/limits.md); each one's counter is in the counters above.
            queue_limit=lim.queue_limit,
            queue_bytes_limit=lim.queue_bytes,
            max_backlog_bytes=lim.max_backlog_bytes,
            max_backlog_source=self.backlog_source,
            memory_queue_limit=lim.memory_queue_limit,  # a clean session's queue (in memory)
            memory_queue_bytes_limit=lim.memory_queue_bytes,
            max_inflight=lim.max_inflight,
            max_packet_size=self.max_packet_size,
            max_connect_size=self.max_connect_size,
            connect_timeout=self.connect_timeout,
            max_sessions=lim.max_sessions,
            session_expiry=lim.session_expiry,
            max_keepalive=lim.max_keepalive,
            max_subscriptions=lim.max_subscriptions,
            subscription_levels=b.subscription_levels,
            max_subscription_levels=lim.max_subscription_levels,
            retained_max=lim.retained_max,
            retained_bytes_limit=lim.retained_bytes,
            max_topic_levels=lim.max_topic_levels,
            max_topic_length=lim.max_topic_length,
        )
        if self.systree is not None:
            out.update(self.systree.status())
        return out
