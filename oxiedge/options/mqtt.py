"""Settings of the MQTT broker: persistence, ingest routes and its bounds (docs/limits.md)."""

from __future__ import annotations

from dataclasses import dataclass

from .declare import Bound, option
from .kinds import EXPIRY, ROUTES, SWITCH, TEXT, count, size


@dataclass(frozen=True)
class MqttSettings:
    """The MQTT broker's settings."""

    mqtt_persist: bool = option(
        SWITCH, "1",
        "persist MQTT sessions (1/0)",
        limits=None)
    ingest: list[str] = option(
        ROUTES, "",
        "ingest route FILTER:COLLECTION (repeatable; env: comma-separated)",
        env="OXIEDGE_MQTT_INGEST",
        limits=None)
    mqtt_max_packet_size: int = option(
        count(64), "1048576",
        "largest MQTT packet accepted, bytes",
        limits=Bound("MQTT", "packet size",
                     "refused from the fixed header; connection closed",
                     "`mqtt.protocol_errors`"))
    mqtt_queue_limit: int = option(
        count(), "10000000",
        "messages queued per MQTT session before the oldest is dropped (a persistent "
        "session's queue is on disk; a clean session keeps at most 4096 in memory)",
        limits=Bound("MQTT", "messages queued per session",
                     "oldest dropped (memory and disk)",
                     "`mqtt.dropped`",
                     default="10000000 (a persistent session's queue is on disk, a window of "
                             "1024 in memory while connected; a clean session's queue is in "
                             "memory: at most 4096, `MEMORY_QUEUE_LIMIT`)"))
    mqtt_queue_bytes: int = option(
        size(), "1GiB",
        "topic + payload bytes queued per MQTT session before the oldest is dropped (a clean "
        "session keeps at most 4MiB in memory)",
        limits=Bound("MQTT", "bytes queued per session",
                     "oldest dropped (the newest is kept); also applied at recovery",
                     "`mqtt.dropped_queue_bytes` (gauge `mqtt.queued_bytes`)",
                     default="1GiB (topic + payload, on disk; a window of 1 MiB in memory "
                             "while connected; a clean session: at most 4MiB in memory, "
                             "`MEMORY_QUEUE_BYTES`)"))
    mqtt_retained_max: int = option(
        count(0), "10000",
        "most retained MQTT messages (topics); more are delivered but not retained",
        limits=Bound("MQTT", "retained messages",
                     "a new retained topic is delivered, not retained",
                     "`mqtt.retained_refused` (gauge `mqtt.retained`)"))
    mqtt_retained_bytes: int = option(
        size(), "16MiB",
        "topic + payload bytes of all retained MQTT messages",
        limits=Bound("MQTT", "retained bytes",
                     "same; the topic's older retained message is removed",
                     "`mqtt.retained_refused` (gauge `mqtt.retained_bytes`)",
                     default="16MiB (topic + payload)"))
    mqtt_max_sessions: int = option(
        count(), "1000",
        "most MQTT sessions (online and persistent offline); new client ids get CONNACK 3",
        limits=Bound("MQTT", "sessions (online + persistent offline)",
                     "CONNACK 3 for a new client id",
                     "`mqtt.sessions_refused`"))
    mqtt_max_keepalive: int = option(
        count(1), "65535",
        "longest keep-alive an MQTT 5 client gets, seconds: a longer one (or 0) is lowered to "
        "it and CONNACK says so with Server Keep Alive (3.1.1 clients keep theirs)",
        limits=Bound("MQTT", "keep-alive of an MQTT 5 client",
                     "lowered to the bound; CONNACK carries Server Keep Alive",
                     "-", default="65535 s (the protocol's largest: no bound)"))
    mqtt_server_reference: str = option(
        TEXT, "",
        "MQTT 5: another server for clients to use while this one is stopped (e.g. "
        "'standby.local:1883'): at shutdown MQTT 5 clients get DISCONNECT 0x9C (Use another "
        "server) with it as Server Reference instead of 0x8B; empty: none",
        limits=None, metavar="HOST[:PORT]")
    mqtt_session_expiry: int | None = option(
        EXPIRY, "1d",
        "a persistent MQTT session offline this long is deleted with its queued messages (30m, "
        "12h, 7d; never = kept until its client cleans it); a restart restarts the clock",
        limits=Bound("MQTT", "time a persistent session stays offline",
                     "the session, its subscriptions and its queued messages are deleted (one info"
                     " line per sweep); its room counts for new client ids again",
                     "`mqtt.sessions_expired`",
                     default="1d (`never`: no limit)"))
    mqtt_max_subscriptions: int = option(
        count(), "1000",
        "most topic filters per MQTT session; more get SUBACK 0x80",
        limits=Bound("MQTT", "subscriptions per session",
                     "SUBACK 0x80 for each filter beyond it",
                     "`mqtt.subscriptions_refused`"))
    mqtt_max_subscription_levels: int = option(
        count(), "100000",
        "most topic-filter levels of all MQTT subscriptions together (the subscription trie's "
        "size, ~400 bytes each); more get SUBACK 0x80",
        limits=Bound("MQTT", "subscription trie size",
                     "SUBACK 0x80 for a filter that would exceed it",
                     "`mqtt.subscriptions_refused` (gauge `mqtt.subscription_levels`)",
                     default="100000 levels of all filters together (~400 bytes each: ~40 MB at "
                             "most)"))
    mqtt_max_topic_levels: int = option(
        count(), "200",
        "most '/' separators in an MQTT topic name or filter (Mosquitto: 200)",
        limits=Bound("MQTT", "topic levels",
                     "filter: SUBACK 0x80; PUBLISH or will topic: connection closed",
                     "`mqtt.topics_refused`",
                     default="200 `/` separators (Mosquitto's count)"))
    mqtt_max_topic_length: int = option(
        count(), "4096",
        "longest MQTT topic name or filter, UTF-8 bytes",
        limits=Bound("MQTT", "topic length",
                     "same",
                     "`mqtt.topics_refused`",
                     default="4096 bytes"))
    mqtt_max_connect_size: int = option(
        size(), "64KiB",
        "largest first packet (CONNECT) before authentication, bytes",
        limits=Bound("MQTT", "first packet before authentication",
                     "refused from the fixed header; connection closed",
                     "`mqtt.connect_too_large`"))
    mqtt_connect_timeout: int = option(
        count(metavar="S"), "10",
        "seconds a new MQTT connection has to send its CONNECT",
        limits=Bound("MQTT", "time to send CONNECT",
                     "connection closed",
                     "`mqtt.connect_timeouts`",
                     default="10 s"))
    sys_interval: int = option(
        count(0, metavar="S"), "10",
        "seconds between $SYS/broker/... updates (Mosquitto's topic names, docs/mqtt.md); "
        "0 = no $SYS topics",
        limits=None)
