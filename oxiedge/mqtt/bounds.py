"""The bounds and counters of the MQTT broker: ``Limits`` (docs/limits.md; defaults in
``oxiedge.config``) and ``Stats`` (``oxiedge status``). Plain data, no behaviour: the
session, the router, the protocol and the service all read them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oxiedge.mqtt.topics import DEFAULT_MAX_TOPIC_LENGTH, DEFAULT_MAX_TOPIC_LEVELS

if TYPE_CHECKING:
    from oxiedge.store.backlog import Backlog

#: Inbound QoS 2 packet ids one session holds before PUBREL; at the bound the oldest is
#: forgotten (``inbound2.InboundQos2``). Far above a client's in-flight window (paho
#: and mosquitto_pub keep 20 messages in flight), so only ids a client abandoned go.
MAX_QOS2_PENDING = 1024
#: The queue of a session that keeps it in memory (a clean session, ``--no-mqtt-persist``)
#: holds at most this many messages / topic + payload bytes, whatever the flags allow: the
#: flags' disk-sized defaults are for the durable sessions, whose queues are on disk.
MEMORY_QUEUE_LIMIT = 4096
MEMORY_QUEUE_BYTES = 4 << 20


class Stats:
    """Broker-wide counters (``oxiedge status``)."""

    __slots__ = (
        "auth_failures",
        "backlog_bytes",
        "blocked",
        "commit_errors",
        "connect_timeouts",
        "connect_too_large",
        "connections",
        "connections_total",
        "disconnects_sent",
        "dropped",
        "dropped_backlog_bytes",
        "dropped_qos0",
        "dropped_queue_bytes",
        "dropped_too_large",
        "expired",
        "messages_in",
        "messages_in5",
        "messages_out",
        "messages_out5",
        "payload_format_invalid",
        "protocol_errors",
        "qos2_ids_forgotten",
        "retained_refused",
        "sessions_expired",
        "sessions_refused",
        "shared_handed_on",
        "shared_lost",
        "shared_undelivered",
        "subscriptions_refused",
        "takeovers",
        "topics_refused",
        "wills",
        "wills_skipped",
    )

    def __init__(self) -> None:
        self.auth_failures = 0  # CONNACK 4/5 sent
        self.blocked = 0  # times a publisher was held by a memory/disk alarm
        self.commit_errors = 0  # commits that failed (nothing of theirs was acked)
        self.connections = 0  # open now
        self.connections_total = 0
        self.connect_timeouts = 0  # sockets closed for sending no CONNECT in time
        self.connect_too_large = 0  # closed: the first packet exceeded --mqtt-max-connect-size
        self.dropped = 0  # queued messages dropped at a queue bound (oldest first)
        # Gauge: topic + payload bytes queued in all persistent sessions (--max-backlog-bytes),
        # kept by their queues (``store/qlog.py`` ``Tally``).
        self.backlog_bytes = 0
        self.dropped_backlog_bytes = 0  # of ``dropped``: those dropped at --max-backlog-bytes
        self.dropped_qos0 = 0  # QoS 0 deliveries skipped on a full output buffer
        self.dropped_queue_bytes = 0  # of ``dropped``: those dropped at --mqtt-queue-bytes
        self.disconnects_sent = 0  # MQTT 5 DISCONNECTs the broker sent (with a reason)
        self.dropped_too_large = 0  # MQTT 5: over the client's Maximum Packet Size, not sent
        self.expired = 0  # MQTT 5: messages past their Message Expiry Interval, not sent
        self.messages_in = 0  # PUBLISH accepted (clients, wills, bridges)
        self.messages_out = 0  # PUBLISH sent (re-sends included)
        # of messages_in / messages_out: from / to MQTT 5 clients (/metrics: protocol="mqtt50")
        self.messages_in5 = 0
        self.messages_out5 = 0
        self.payload_format_invalid = 0  # MQTT 5: refused with 0x99 (not UTF-8)
        self.protocol_errors = 0
        self.qos2_ids_forgotten = 0  # inbound QoS 2 ids dropped at MAX_QOS2_PENDING (oldest)
        self.retained_refused = 0  # retained messages not kept (--mqtt-retained-max/-bytes)
        self.sessions_expired = 0  # persistent sessions offline --mqtt-session-expiry long
        self.sessions_refused = 0  # CONNACK 3: --mqtt-max-sessions reached
        # $share groups (shared.py): messages of an ending member given to another one, those
        # over HAND_ON_MAX that ended with it, and messages no member could take
        self.shared_handed_on = 0
        self.shared_lost = 0
        self.shared_undelivered = 0
        self.subscriptions_refused = 0  # SUBACK 0x80: --mqtt-max-subscriptions(-levels)
        self.takeovers = 0  # MQTT-3.1.4-2
        self.topics_refused = 0  # over --mqtt-max-topic-levels/-length (0x80 or close)
        self.wills = 0  # will messages published
        self.wills_skipped = 0  # not published: persistent session taken over by one

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


class Limits:
    """Bounds shared by all sessions (defaults: ``oxiedge.config``; docs/limits.md)."""

    __slots__ = ("backlog", "max_backlog_bytes", "max_inflight", "max_keepalive",
                 "max_qos2_pending", "max_sessions", "max_subscription_levels",
                 "max_subscriptions", "max_topic_length", "max_topic_levels",
                 "memory_queue_bytes", "memory_queue_limit", "out_limit", "queue_bytes",
                 "queue_limit", "retained_bytes", "retained_max", "session_expiry")  # fmt: skip

    def __init__(
        self,
        queue_limit: int,
        max_inflight: int = 64,
        out_limit: int = 1 << 20,
        *,
        queue_bytes: int = 4 << 20,
        max_subscriptions: int = 1000,
        max_subscription_levels: int = 100_000,
        max_sessions: int = 1000,
        retained_max: int = 10_000,
        retained_bytes: int = 16 << 20,
        max_topic_levels: int = DEFAULT_MAX_TOPIC_LEVELS,
        max_topic_length: int = DEFAULT_MAX_TOPIC_LENGTH,
        session_expiry: int | None = None,
        max_qos2_pending: int = MAX_QOS2_PENDING,
        max_backlog_bytes: int | None = None,
        max_keepalive: int = 65535,
    ) -> None:
        self.queue_limit = queue_limit  # queued (not yet sent) messages per session
        self.queue_bytes = queue_bytes  # their topic + payload bytes per session
        # The same for a queue kept in memory (a clean session): capped (MEMORY_QUEUE_*).
        self.memory_queue_limit = min(queue_limit, MEMORY_QUEUE_LIMIT)
        self.memory_queue_bytes = min(queue_bytes, MEMORY_QUEUE_BYTES)
        self.max_inflight = max_inflight  # sent, unacknowledged (incl. PUBREL pending)
        self.out_limit = out_limit  # connection output buffer bytes before we hold back
        self.max_subscriptions = max_subscriptions  # filters per session
        self.max_subscription_levels = max_subscription_levels  # levels of all filters
        self.max_sessions = max_sessions  # sessions (clean and persistent) in the broker
        self.retained_max = retained_max  # retained messages (topics)
        self.retained_bytes = retained_bytes  # their topic + payload bytes
        self.max_topic_levels = max_topic_levels  # '/' separators in a name or filter
        self.max_topic_length = max_topic_length  # UTF-8 bytes of a name or filter
        # Seconds a persistent session may stay offline before it is deleted (None: for
        # ever). MQTT 5's per-client Session Expiry Interval will be capped by it.
        self.session_expiry = session_expiry
        self.max_qos2_pending = max_qos2_pending  # inbound QoS 2 ids awaiting PUBREL
        # Topic + payload bytes of all persistent sessions' queues together (None: no bound).
        self.max_backlog_bytes = max_backlog_bytes
        # The budget shared with AMQP's paged queues (``store.backlog``; None: MQTT's alone).
        self.backlog: Backlog | None = None
        # The longest keep-alive an MQTT 5 client gets (Server Keep Alive, 3.2.2.3.14).
        self.max_keepalive = max_keepalive

    def backlog_left(self, stats: Stats) -> int | None:
        """What the persistent sessions (``stats.backlog_bytes``) may hold now: the backlog
        budget less what the other protocols hold (None: no bound)."""
        backlog = self.backlog
        return self.max_backlog_bytes if backlog is None else backlog.left_for(stats)
