"""Settings of the whole server: resource alarms, users, connections and logins, the uplink
file, the event loop."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .declare import Bound, option
from .kinds import (
    BACKLOG,
    KEEPALIVE,
    MAYBE_PATH,
    MAYBE_SWITCH,
    TEXT,
    WATERMARK,
    count,
    seconds,
    size,
)


@dataclass(frozen=True)
class ServerSettings:
    """Settings shared by both brokers."""

    memory_high_watermark: int = option(
        WATERMARK, "0.4",
        "block publishers above this RSS: a fraction of the memory limit (RAM, or the cgroup's "
        "MemoryMax/MemoryHigh when lower) or a size >= 32MB (MB = 10^6, MiB = 2^20)",
        limits=Bound("Resource alarms", "memory high watermark",
                     "publishers blocked until the RSS falls 5% below it (hysteresis: no flapping "
                     "at the boundary)",
                     "`alarms.alarms_fired`; `alarms.memory_limit_mb`, "
                     "`alarms.memory_limit_source`",
                     default="0.4 of the memory limit (RAM, or the cgroup's "
                             "`memory.max`/`memory.high` when lower); an absolute size must be ≥ "
                             "32 MB"))
    disk_free_limit: int = option(
        size(), "200MB",
        "block publishers when the data dir's filesystem has less free space (MB = 10^6)",
        limits=Bound("Resource alarms", "free disk",
                     "publishers blocked until the free space is 10% over the limit again",
                     "`alarms.alarms_fired`"))
    max_backlog_bytes: str = option(
        BACKLOG, "0.5",
        "bytes queued on disk in all persistent MQTT sessions (topic + payload) and durable "
        "AMQP queues (bodies) together: a fraction of the data directory's filesystem size, "
        "or a size (MB = 10^6, MiB = 2^20)",
        limits=Bound("Core", "bytes queued on disk in all persistent MQTT sessions and "
                             "durable AMQP queues together",
                     "the queue a message is queued to drops its oldest (the newest is kept): "
                     "an MQTT session, an AMQP queue with drop-head (dead-lettered where it "
                     "has a DLX); an AMQP queue with `x-overflow` reject-publish refuses the "
                     "publish (basic.nack to a confirming publisher)",
                     "`mqtt.dropped_backlog_bytes`, `amqp.dropped_backlog_bytes`, "
                     "`amqp.rejected_backlog_bytes` (gauges `mqtt.backlog_bytes`, "
                     "`amqp.backlog_bytes`; `max_backlog_bytes`, `max_backlog_source` in both)",
                     default="0.5 of the size of the data directory's filesystem (a size >= 1 "
                             "MB instead: that many bytes)"))
    password_file: Path | None = option(
        MAYBE_PATH, "",
        "password file (`oxiedge user add` writes it)",
        shown_default="DATA/passwd",
        limits=None)
    allow_anonymous: bool | None = option(
        MAYBE_SWITCH, "",
        "accept clients without credentials",
        shown_default="only with no user and a loopback --bind",
        limits=Bound("Core", "anonymous access",
                     "anonymous MQTT: CONNACK 5; AMQP: 403 ACCESS_REFUSED; the start-up log line "
                     "`MQTT on ADDR: …` / `AMQP on ADDR: …` names the mode",
                     "`logins.failures`, `logins.mode`",
                     default="only with no user *and* a loopback `--bind`"))
    device_id: str = option(
        TEXT, "",
        "this device's name upstream (uplink prefix {device}, queue and client ids)",
        shown_default="the host name's first label",
        metavar="ID",
        limits=None)
    config_file: Path | None = option(
        MAYBE_PATH, "",
        "TOML file with [uplink.NAME] tables",
        flag="--config",
        env="OXIEDGE_CONFIG",
        metavar="FILE",
        limits=None)
    max_connections: int = option(
        count(), "1000",
        "open connections, MQTT and AMQP together; more wait up to 100 ms for a slot, "
        "then are closed",
        limits=Bound("Core", "open connections (MQTT + AMQP)",
                     "a new connection waits up to 100 ms, unread, for a slot to be released (a "
                     "client that closes and at once reconnects at the bound gets in while its "
                     "old connection is still being cleaned up; a connection counts until "
                     "then); at most 16 wait at once, any further one and one whose wait runs "
                     "out is closed before a byte is read; one log line per 10 s",
                     "`connections.refused_max_connections` (and `open`, `peak`; `waiting`, "
                     "`waiting_peak`, `admitted_after_wait`)"))
    max_connections_per_source: int = option(
        count(), "100",
        "open connections from one remote address; more wait up to 100 ms for a slot, "
        "then are closed",
        limits=Bound("Core", "open connections per source address",
                     "same, the 100 ms wait and the 16 waiters shared with the total bound "
                     "(IPv4-mapped IPv6 counts as IPv4, other IPv6 addresses by their /64)",
                     "`connections.refused_max_per_source` (and `sources`)"))
    login_hash_threads: int = option(
        count(), "1",
        "threads hashing passwords (all protocols); other logins wait their turn",
        limits=Bound("Core", "password hashing threads (all protocols)",
                     "further logins wait for a thread; the event loop never hashes",
                     "`logins.hashing_now`, `logins.waiting_to_hash`"))
    login_delay_max: float = option(
        seconds(0.0), "2",
        "longest delay before a login from an address or for a user name with recent failures, "
        "seconds (0.1 s doubling per failure; 0 = no delay)",
        limits=Bound("Core", "delay after failed logins",
                     "after n recent failures of a user name (from that address or from anywhere),"
                     " or from an address that tried 3 or more names, each attempt waits min(cap, "
                     "0.1 s·2ⁿ⁻¹) before its check, so a client retrying a wrong password does not"
                     " slow its neighbours; forgotten after 10 min without failure; a success "
                     "clears the user name",
                     "`logins.delayed`, `logins.delay_total_s`, `logins.failures`",
                     default="2 s"))
    login_track_max: int = option(
        count(16), "4096",
        "addresses and user names whose failed logins are remembered (each)",
        limits=Bound("Core", "failed-login tracking table",
                     "the least recently failed entry is evicted",
                     "`logins.track_evicted`, `logins.tracked_sources`, `logins.tracked_users`",
                     default="4096 addresses + 4096 user names"))
    blocked_keepalive: tuple[int, int, int] = option(
        KEEPALIVE, "60,20,3",
        "TCP keep-alive of a connection blocked by an alarm: IDLE,INTERVAL,COUNT seconds, seconds,"
        " probes (a silent peer is dropped after IDLE + INTERVAL x COUNT)",
        limits=Bound("Resource alarms", "TCP keep-alive of a blocked connection",
                     "the kernel times the socket out, the connection ends as lost",
                     "`alarms.blocked_hangups` (every blocked connection whose peer hung up or "
                     "vanished)",
                     default="60,20,3: a peer silent for 60 s is probed every 20 s, dropped after "
                             "3 unanswered probes (~2 min)",
                     flag_note="(IDLE,INTERVAL,COUNT: three whole numbers ≥ 1; anything else is a "
                               "start-up error)"))
    busy_poll_us: int = option(
        count(0, 1000), "0",
        "microseconds the event loop polls before it sleeps while messages come back to back "
        "(lower latency for more CPU; 0 = off, at most 1000)",
        limits=None)
