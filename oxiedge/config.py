"""``oxiedge serve`` configuration: flags win over environment variables, which win over defaults.

Every option of README's option table is one field here, with one flag and one
``OXIEDGE_*`` variable. ``Config.resolve`` is the single place that reads the environment.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .durations import parse_duration
from .errors import ConfigError
from .sizes import parse_memory_watermark, parse_size


@dataclass(frozen=True, slots=True)
class Option:
    """One setting: its flag, its environment variable, its default and its parser."""

    name: str
    flag: str
    env: str
    default: Any
    help: str


OPTIONS: tuple[Option, ...] = (
    Option("data", "--data", "OXIEDGE_DATA", "./oxiedge-data", "data directory"),
    Option("bind", "--bind", "OXIEDGE_BIND", "127.0.0.1", "address the listeners bind to"),
    Option("mqtt_port", "--mqtt-port", "OXIEDGE_MQTT_PORT", "1883",
           "MQTT port; 0 = any free port (logged); off = no MQTT listener"),
    Option("amqp_port", "--amqp-port", "OXIEDGE_AMQP_PORT", "5672",
           "AMQP port; 0 = any free port (logged); off = no AMQP listener"),
    Option("mqtt_tls_port", "--mqtt-tls-port", "OXIEDGE_MQTT_TLS_PORT", "off",
           "MQTT over TLS port (8883 is usual); 0 = any free port; off = none"),
    Option("amqp_tls_port", "--amqp-tls-port", "OXIEDGE_AMQP_TLS_PORT", "off",
           "AMQPS port (5671 is usual); 0 = any free port; off = none"),
    Option("tls_cert", "--tls-cert", "OXIEDGE_TLS_CERT", "",
           "PEM server certificate (chain) for the TLS ports; re-read on SIGHUP"),
    Option("tls_key", "--tls-key", "OXIEDGE_TLS_KEY", "",
           "PEM private key of --tls-cert (default: in the --tls-cert file)"),
    Option("tls_ca", "--tls-ca", "OXIEDGE_TLS_CA", "",
           "PEM CA bundle that signs client certificates (for --tls-verify-client)"),
    Option("tls_min_version", "--tls-min-version", "OXIEDGE_TLS_MIN_VERSION", "1.2",
           "oldest TLS version accepted: 1.2 or 1.3"),
    Option("tls_verify_client", "--tls-verify-client", "OXIEDGE_TLS_VERIFY_CLIENT", "none",
           "client certificates: none, optional (verified if sent) or required"),
    Option("tls_identity_as_username", "--tls-identity-as-username/--no-tls-identity-as-username",
           "OXIEDGE_TLS_IDENTITY_AS_USERNAME", "0",
           "a verified client certificate's CN (or first SAN) is the user name (1/0)"),
    Option("tls_handshake_timeout", "--tls-handshake-timeout", "OXIEDGE_TLS_HANDSHAKE_TIMEOUT",
           "10", "seconds a new TLS connection has to complete its handshake"),
    Option("tls_max_handshakes", "--tls-max-handshakes", "OXIEDGE_TLS_MAX_HANDSHAKES", "256",
           "TLS handshakes in progress at once; more new connections are closed"),
    Option("mqtt_persist", "--mqtt-persist/--no-mqtt-persist", "OXIEDGE_MQTT_PERSIST", "1",
           "persist MQTT sessions (1/0)"),
    Option("ingest", "--ingest", "OXIEDGE_MQTT_INGEST", "",
           "ingest route FILTER:COLLECTION (repeatable; env: comma-separated)"),
    Option("mqtt_max_packet_size", "--mqtt-max-packet-size", "OXIEDGE_MQTT_MAX_PACKET_SIZE",
           str(1 << 20), "largest MQTT packet accepted, bytes"),
    Option("mqtt_queue_limit", "--mqtt-queue-limit", "OXIEDGE_MQTT_QUEUE_LIMIT", "4096",
           "messages queued per MQTT session before the oldest is dropped"),
    Option("mqtt_queue_bytes", "--mqtt-queue-bytes", "OXIEDGE_MQTT_QUEUE_BYTES", "4MiB",
           "topic + payload bytes queued per MQTT session before the oldest is dropped"),
    Option("mqtt_retained_max", "--mqtt-retained-max", "OXIEDGE_MQTT_RETAINED_MAX", "10000",
           "most retained MQTT messages (topics); more are delivered but not retained"),
    Option("mqtt_retained_bytes", "--mqtt-retained-bytes", "OXIEDGE_MQTT_RETAINED_BYTES",
           "16MiB", "topic + payload bytes of all retained MQTT messages"),
    Option("mqtt_max_sessions", "--mqtt-max-sessions", "OXIEDGE_MQTT_MAX_SESSIONS", "1000",
           "most MQTT sessions (online and persistent offline); new client ids get CONNACK 3"),
    Option("mqtt_session_expiry", "--mqtt-session-expiry", "OXIEDGE_MQTT_SESSION_EXPIRY", "1d",
           "a persistent MQTT session offline this long is deleted with its queued messages"
           " (30m, 12h, 7d; never = kept until its client cleans it); a restart restarts"
           " the clock"),
    Option("mqtt_max_subscriptions", "--mqtt-max-subscriptions",
           "OXIEDGE_MQTT_MAX_SUBSCRIPTIONS", "1000",
           "most topic filters per MQTT session; more get SUBACK 0x80"),
    Option("mqtt_max_subscription_levels", "--mqtt-max-subscription-levels",
           "OXIEDGE_MQTT_MAX_SUBSCRIPTION_LEVELS", "100000",
           "most topic-filter levels of all MQTT subscriptions together (the subscription"
           " trie's size, ~400 bytes each); more get SUBACK 0x80"),
    Option("mqtt_max_topic_levels", "--mqtt-max-topic-levels", "OXIEDGE_MQTT_MAX_TOPIC_LEVELS",
           "200", "most '/' separators in an MQTT topic name or filter (Mosquitto: 200)"),
    Option("mqtt_max_topic_length", "--mqtt-max-topic-length", "OXIEDGE_MQTT_MAX_TOPIC_LENGTH",
           "4096", "longest MQTT topic name or filter, UTF-8 bytes"),
    Option("mqtt_max_connect_size", "--mqtt-max-connect-size", "OXIEDGE_MQTT_MAX_CONNECT_SIZE",
           "64KiB", "largest first packet (CONNECT) before authentication, bytes"),
    Option("mqtt_connect_timeout", "--mqtt-connect-timeout", "OXIEDGE_MQTT_CONNECT_TIMEOUT",
           "10", "seconds a new MQTT connection has to send its CONNECT"),
    Option("amqp_queue_limit", "--amqp-queue-limit", "OXIEDGE_AMQP_QUEUE_LIMIT", "100000",
           "ready messages per AMQP queue before the oldest is dropped"),
    Option("amqp_heartbeat", "--amqp-heartbeat", "OXIEDGE_AMQP_HEARTBEAT", "60",
           "AMQP heartbeat the server proposes, seconds (0 = off)"),
    Option("amqp_frame_max", "--amqp-frame-max", "OXIEDGE_AMQP_FRAME_MAX", "131072",
           "largest AMQP frame the server proposes, bytes"),
    Option("amqp_channel_max", "--amqp-channel-max", "OXIEDGE_AMQP_CHANNEL_MAX", "2047",
           "most AMQP channels per connection"),
    Option("amqp_max_message_size", "--amqp-max-message-size",
           "OXIEDGE_AMQP_MAX_MESSAGE_SIZE", "16MiB",
           "largest AMQP message body; a bigger content header gets channel error 406"),
    Option("amqp_queue_bytes", "--amqp-queue-bytes", "OXIEDGE_AMQP_QUEUE_BYTES", "64MiB",
           "ready body bytes per AMQP queue without x-max-length-bytes (oldest dropped)"),
    Option("amqp_max_queues", "--amqp-max-queues", "OXIEDGE_AMQP_MAX_QUEUES", "10000",
           "most AMQP queues in the broker; more declares get 406"),
    Option("amqp_max_exchanges", "--amqp-max-exchanges", "OXIEDGE_AMQP_MAX_EXCHANGES", "10000",
           "most AMQP exchanges in the broker (built-in ones included); more declares get 406"),
    Option("amqp_max_bindings", "--amqp-max-bindings", "OXIEDGE_AMQP_MAX_BINDINGS", "50000",
           "most AMQP bindings in the broker (queue and exchange-to-exchange); more get 406"),
    Option("amqp_max_arguments_bytes", "--amqp-max-arguments-bytes",
           "OXIEDGE_AMQP_MAX_ARGUMENTS_BYTES", "16MiB",
           "memory of the argument tables AMQP bindings, queues and exchanges keep (estimated); "
           "a new table past it gets 406"),
    Option("amqp_max_queues_per_connection", "--amqp-max-queues-per-connection",
           "OXIEDGE_AMQP_MAX_QUEUES_PER_CONNECTION", "1000",
           "most live AMQP queues one connection has created; more declares get 406"),
    Option("amqp_max_consumers_per_connection", "--amqp-max-consumers-per-connection",
           "OXIEDGE_AMQP_MAX_CONSUMERS_PER_CONNECTION", "1000",
           "most AMQP consumers on one connection; more basic.consume get 406"),
    Option("amqp_preauth_max_size", "--amqp-preauth-max-size",
           "OXIEDGE_AMQP_PREAUTH_MAX_SIZE", "64KiB",
           "largest AMQP frame before the login completes (connection.start-ok), bytes"),
    Option("amqp_handshake_timeout", "--amqp-handshake-timeout",
           "OXIEDGE_AMQP_HANDSHAKE_TIMEOUT", "10",
           "seconds from accept to an open AMQP connection (TLS handshake included)"),
    Option("memory_high_watermark", "--memory-high-watermark", "OXIEDGE_MEMORY_HIGH_WATERMARK",
           "0.4", "block publishers above this RSS: a fraction of the memory limit (RAM, or the"
           " cgroup's MemoryMax/MemoryHigh when lower) or a size >= 32MB (MB = 10^6, MiB = 2^20)"),
    Option("disk_free_limit", "--disk-free-limit", "OXIEDGE_DISK_FREE_LIMIT", "200MB",
           "block publishers when the data dir's filesystem has less free space (MB = 10^6)"),
    Option("password_file", "--password-file", "OXIEDGE_PASSWORD_FILE", "",
           "password file (default DATA/passwd; `oxiedge user add` writes it)"),
    Option("allow_anonymous", "--allow-anonymous/--no-allow-anonymous",
           "OXIEDGE_ALLOW_ANONYMOUS", "",
           "accept clients without credentials (default: only when no users exist)"),
    Option("device_id", "--device-id", "OXIEDGE_DEVICE_ID", "",
           "this device's name upstream (uplink prefix {device}, queue and client ids;"
           " default: the host name)"),
    Option("config_file", "--config", "OXIEDGE_CONFIG", "",
           "TOML file with [uplink.NAME] tables"),
    # -- issue 14: connections and logins (docs/limits.md)
    Option("max_connections", "--max-connections", "OXIEDGE_MAX_CONNECTIONS", "1000",
           "open connections, MQTT and AMQP together; more are closed at once"),
    Option("max_connections_per_source", "--max-connections-per-source",
           "OXIEDGE_MAX_CONNECTIONS_PER_SOURCE", "100",
           "open connections from one remote address; more are closed at once"),
    Option("login_hash_threads", "--login-hash-threads", "OXIEDGE_LOGIN_HASH_THREADS", "1",
           "threads hashing passwords (all protocols); other logins wait their turn"),
    Option("login_delay_max", "--login-delay-max", "OXIEDGE_LOGIN_DELAY_MAX", "2",
           "longest delay before a login from an address or for a user name with recent"
           " failures, seconds (0.1 s doubling per failure; 0 = no delay)"),
    Option("login_track_max", "--login-track-max", "OXIEDGE_LOGIN_TRACK_MAX", "4096",
           "addresses and user names whose failed logins are remembered (each)"),
    Option("blocked_keepalive", "--blocked-keepalive", "OXIEDGE_BLOCKED_KEEPALIVE", "60,20,3",
           "TCP keep-alive of a connection blocked by an alarm: IDLE,INTERVAL,COUNT seconds,"
           " seconds, probes (a silent peer is dropped after IDLE + INTERVAL x COUNT)"),
    # -- issue 17: latency
    Option("busy_poll_us", "--busy-poll-us", "OXIEDGE_BUSY_POLL_US", "0",
           "microseconds the event loop polls before it sleeps while messages come back to"
           " back (lower latency for more CPU; 0 = off, at most 1000)"),
)
OPTIONS_BY_NAME = {o.name: o for o in OPTIONS}


@dataclass(slots=True)
class Config:
    """Resolved settings of one ``oxiedge serve`` run."""

    data: Path = Path("./oxiedge-data")
    bind: str = "127.0.0.1"
    mqtt_port: int | None = 1883
    amqp_port: int | None = 5672
    mqtt_tls_port: int | None = None
    amqp_tls_port: int | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    tls_min_version: str = "1.2"
    tls_verify_client: str = "none"
    tls_identity_as_username: bool = False
    tls_handshake_timeout: int = 10
    tls_max_handshakes: int = 256
    mqtt_persist: bool = True
    ingest: list[str] = field(default_factory=list)
    mqtt_max_packet_size: int = 1 << 20
    mqtt_queue_limit: int = 4096
    mqtt_queue_bytes: int = 4 << 20
    mqtt_retained_max: int = 10_000
    mqtt_retained_bytes: int = 16 << 20
    mqtt_max_sessions: int = 1000
    mqtt_session_expiry: int | None = 86400  # seconds; None: never
    mqtt_max_subscriptions: int = 1000
    mqtt_max_subscription_levels: int = 100_000
    mqtt_max_topic_levels: int = 200
    mqtt_max_topic_length: int = 4096
    mqtt_max_connect_size: int = 64 << 10
    mqtt_connect_timeout: int = 10
    amqp_queue_limit: int = 100_000
    amqp_heartbeat: int = 60
    amqp_frame_max: int = 131072
    amqp_channel_max: int = 2047
    amqp_max_message_size: int = 16 << 20
    amqp_queue_bytes: int = 64 << 20
    amqp_max_queues: int = 10_000
    amqp_max_exchanges: int = 10_000
    amqp_max_bindings: int = 50_000
    amqp_max_arguments_bytes: int = 16 << 20
    amqp_max_queues_per_connection: int = 1000
    amqp_max_consumers_per_connection: int = 1000
    amqp_preauth_max_size: int = 64 << 10
    amqp_handshake_timeout: float = 10.0
    memory_high_watermark: int = 0
    disk_free_limit: int = 200_000_000
    password_file: Path | None = None
    allow_anonymous: bool | None = None
    device_id: str = ""
    config_file: Path | None = None
    max_connections: int = 1000
    max_connections_per_source: int = 100
    login_hash_threads: int = 1
    login_delay_max: float = 2.0
    login_track_max: int = 4096
    blocked_keepalive: tuple[int, int, int] = (60, 20, 3)
    busy_poll_us: int = 0

    @property
    def db_path(self) -> Path:
        return self.data / "db"

    @property
    def admin_socket(self) -> Path:
        return self.data / "admin.sock"

    @property
    def users_path(self) -> Path:
        return self.password_file if self.password_file is not None else self.data / "passwd"

    @classmethod
    def resolve(cls, flags: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Config:
        """Build a config from CLI flags (None = not given), then ``env``, then defaults."""
        env = os.environ if env is None else env
        raw: dict[str, Any] = {}
        for opt in OPTIONS:
            given = flags.get(opt.name)
            if given is not None and given != [] and given != ():
                raw[opt.name] = given
            elif env.get(opt.env, "") != "":
                raw[opt.name] = env[opt.env]  # OXIEDGE_MQTT_INGEST: parse_routes splits at ","
            else:
                raw[opt.name] = opt.default
        cfg = cls()
        for f in fields(cls):
            setattr(cfg, f.name, _PARSERS[f.name](f.name, raw[f.name]))
        return cfg


def _label(name: str) -> str:
    opt = OPTIONS_BY_NAME[name]
    return f"{opt.flag.split('/')[0]} ({opt.env})"


def parse_port(name: str, value: Any) -> int | None:
    text = str(value).strip().lower()
    if text in ("off", "none", "disabled", "false", "no"):
        return None
    try:
        port = int(text)
    except ValueError:
        raise ConfigError(f"{_label(name)}: invalid port {value!r} (a number 0-65535 or off)") \
            from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"{_label(name)}: port {port} out of range 0-65535")
    return port


def parse_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{_label(name)}: invalid value {value!r} (use 1 or 0)")


def parse_optional_bool(name: str, value: Any) -> bool | None:
    if value in ("", None):
        return None
    return parse_bool(name, value)


def parse_positive_int(name: str, value: Any, minimum: int = 1) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{_label(name)}: invalid number {value!r}") from None
    if number < minimum:
        raise ConfigError(f"{_label(name)}: {number} is below the minimum {minimum}")
    return number


def _at_least(name: str, number: int, minimum: int) -> int:
    # (AMQP's smallest frame_max is 4096: a start-ok must fit in one.)
    if number < minimum:
        raise ConfigError(f"{_label(name)}: {number} is below the minimum {minimum}")
    return number


def _at_most(name: str, number: int, maximum: int) -> int:
    if number > maximum:
        raise ConfigError(f"{_label(name)}: {number} is above the maximum {maximum}")
    return number


def parse_keepalive(name: str, value: Any) -> tuple[int, int, int]:
    """``IDLE,INTERVAL,COUNT``: three whole numbers of at least 1 (TCP keep-alive)."""
    parts = str(value).replace(" ", "").split(",")
    try:
        idle, interval, count = (int(part) for part in parts)
    except ValueError:
        raise ConfigError(f"{_label(name)}: {value!r} is not IDLE,INTERVAL,COUNT"
                          " (three whole numbers, e.g. 60,20,3)") from None
    if min(idle, interval, count) < 1:
        raise ConfigError(f"{_label(name)}: {value!r}: each of IDLE,INTERVAL,COUNT must be"
                          " at least 1")
    if max(idle, interval) > 32767 or count > 127:  # (Linux's own bounds)
        raise ConfigError(f"{_label(name)}: {value!r}: at most 32767 s and 127 probes")
    return idle, interval, count


def parse_seconds(name: str, value: Any, minimum: float = 0.1) -> float:
    try:
        number = float(str(value).strip())
    except ValueError:
        raise ConfigError(f"{_label(name)}: invalid number of seconds {value!r}") from None
    if number < minimum:
        raise ConfigError(f"{_label(name)}: {number:g} is below the minimum {minimum:g}")
    return number


#: The longest --mqtt-session-expiry: ten years (``never`` for none).
MAX_EXPIRY = 3650 * 86400


def parse_expiry(name: str, value: Any) -> int | None:
    """A duration (``parse_duration``) in seconds, or None for ``never``/``off``. (Not 0: in
    MQTT 5 and RabbitMQ a session expiry of 0 means "ends with the connection".)"""
    text = str(value).strip().lower()
    if text in ("never", "off", "none", "infinity"):
        return None
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise ConfigError(f"{_label(name)}: {exc}, or never") from None
    if seconds > MAX_EXPIRY:  # (a float clock loses whole seconds far beyond it)
        raise ConfigError(f"{_label(name)}: {value!r} is over the maximum 3650d;"
                          " use never for no expiry")
    return seconds


def parse_bind(name: str, value: Any) -> str:
    text = str(value).strip()
    if text in ("localhost", ""):
        return "127.0.0.1" if text == "" else text
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise ConfigError(f"{_label(name)}: invalid address {value!r} (an IPv4 or IPv6 address)") \
            from None
    return text


def parse_routes(name: str, value: Any) -> list[str]:
    items = [value] if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in items:
        out.extend(part.strip() for part in str(item).split(",") if part.strip())
    return out


def _byte_parser(parse: Callable[[str], int]) -> Callable[[str, Any], int]:
    """Wrap a ``sizes`` parser: ints pass through, errors name the option."""

    def parse_option(name: str, value: Any) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse(str(value))
        except ValueError as exc:
            raise ConfigError(f"{_label(name)}: {exc}") from None

    return parse_option


def _path(name: str, value: Any) -> Path:
    text = str(value).strip()
    if not text:
        raise ConfigError(f"{_label(name)}: empty path")
    return Path(text).expanduser()


def _optional_path(name: str, value: Any) -> Path | None:
    return None if str(value).strip() == "" else _path(name, value)


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    text = str(value).strip().lower()
    if text not in choices:
        raise ConfigError(f"{_label(name)}: invalid value {value!r} (one of {', '.join(choices)})")
    return text


_PARSERS: dict[str, Any] = {
    "data": _path,
    "bind": parse_bind,
    "mqtt_port": parse_port,
    "amqp_port": parse_port,
    "mqtt_tls_port": parse_port,
    "amqp_tls_port": parse_port,
    "tls_cert": _optional_path,
    "tls_key": _optional_path,
    "tls_ca": _optional_path,
    "tls_min_version": lambda n, v: _choice(n, v, ("1.2", "1.3")),
    "tls_verify_client": lambda n, v: _choice(n, v, ("none", "optional", "required")),
    "tls_identity_as_username": parse_bool,
    "tls_handshake_timeout": parse_positive_int,
    "tls_max_handshakes": parse_positive_int,
    "mqtt_persist": parse_bool,
    "ingest": parse_routes,
    "mqtt_max_packet_size": lambda n, v: parse_positive_int(n, v, 64),
    "mqtt_queue_limit": parse_positive_int,
    "mqtt_queue_bytes": _byte_parser(parse_size),
    "mqtt_retained_max": lambda n, v: parse_positive_int(n, v, 0),
    "mqtt_retained_bytes": _byte_parser(parse_size),
    "mqtt_max_sessions": parse_positive_int,
    "mqtt_session_expiry": lambda n, v: parse_expiry(n, v),
    "mqtt_max_subscriptions": parse_positive_int,
    "mqtt_max_subscription_levels": parse_positive_int,
    "mqtt_max_topic_levels": parse_positive_int,
    "mqtt_max_topic_length": parse_positive_int,
    "mqtt_max_connect_size": _byte_parser(parse_size),
    "mqtt_connect_timeout": parse_positive_int,
    "amqp_queue_limit": parse_positive_int,
    "amqp_heartbeat": lambda n, v: parse_positive_int(n, v, 0),
    "amqp_frame_max": lambda n, v: parse_positive_int(n, v, 4096),
    "amqp_channel_max": parse_positive_int,
    "amqp_max_message_size": _byte_parser(parse_size),
    "amqp_queue_bytes": _byte_parser(parse_size),
    "amqp_max_queues": parse_positive_int,
    "amqp_max_exchanges": parse_positive_int,
    "amqp_max_bindings": parse_positive_int,
    "amqp_max_arguments_bytes": _byte_parser(parse_size),
    "amqp_max_queues_per_connection": parse_positive_int,
    "amqp_max_consumers_per_connection": parse_positive_int,
    "amqp_preauth_max_size": lambda n, v: _at_least(n, _byte_parser(parse_size)(n, v), 4096),
    "amqp_handshake_timeout": lambda n, v: parse_seconds(n, v),
    "memory_high_watermark": _byte_parser(parse_memory_watermark),
    "disk_free_limit": _byte_parser(parse_size),
    "password_file": _optional_path,
    "allow_anonymous": parse_optional_bool,
    "device_id": lambda _n, v: str(v).strip(),
    "config_file": _optional_path,
    "max_connections": parse_positive_int,
    "max_connections_per_source": parse_positive_int,
    "login_hash_threads": lambda n, v: parse_positive_int(n, v, 1),
    "login_delay_max": lambda n, v: parse_seconds(n, v, 0.0),
    "login_track_max": lambda n, v: parse_positive_int(n, v, 16),
    "blocked_keepalive": parse_keepalive,
    "busy_poll_us": lambda n, v: _at_most(n, parse_positive_int(n, v, 0), 1000),
}
