"""Settings of the listeners: data directory, bind address, ports and TLS (docs/tls.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .declare import Bound, option
from .kinds import ADDRESS, MAYBE_PATH, PATH, PORT, SWITCH, choice, count


@dataclass(frozen=True)
class ListenerSettings:
    """Where ``oxiedge serve`` keeps its data and how clients reach it."""

    data: Path = option(
        PATH, "./oxiedge-data",
        "data directory",
        metavar="DIR",
        limits=None)
    bind: str = option(
        ADDRESS, "127.0.0.1",
        "address the listeners bind to",
        limits=None)
    mqtt_port: int | None = option(
        PORT, "1883",
        "MQTT port; 0 = any free port (logged); off = no MQTT listener",
        limits=None)
    amqp_port: int | None = option(
        PORT, "5672",
        "AMQP port; 0 = any free port (logged); off = no AMQP listener",
        limits=None)
    mqtt_tls_port: int | None = option(
        PORT, "off",
        "MQTT over TLS port (8883 is usual); 0 = any free port; off = none",
        limits=None)
    amqp_tls_port: int | None = option(
        PORT, "off",
        "AMQPS port (5671 is usual); 0 = any free port; off = none",
        limits=None)
    http_port: int | None = option(
        PORT, "15672",
        "HTTP port: health checks, Prometheus metrics, RabbitMQ's management API "
        "(docs/http.md); 0 = any free port (logged); off = no HTTP listener",
        limits=None)
    http_tls_port: int | None = option(
        PORT, "off",
        "HTTPS port (15671 is usual), the same endpoints over TLS; 0 = any free port; "
        "off = none",
        limits=None)
    tls_cert: Path | None = option(
        MAYBE_PATH, "",
        "PEM server certificate (chain) for the TLS ports; re-read on SIGHUP",
        limits=None)
    tls_key: Path | None = option(
        MAYBE_PATH, "",
        "PEM private key of --tls-cert",
        shown_default="the --tls-cert file",
        limits=None)
    tls_ca: Path | None = option(
        MAYBE_PATH, "",
        "PEM CA bundle that signs client certificates (for --tls-verify-client)",
        limits=None)
    tls_min_version: str = option(
        choice("1.2", "1.3", metavar="V"), "1.2",
        "oldest TLS version accepted: 1.2 or 1.3",
        limits=None)
    tls_verify_client: str = option(
        choice("none", "optional", "required"), "none",
        "client certificates: none, optional (verified if sent) or required",
        limits=None)
    tls_identity_as_username: bool = option(
        SWITCH, "0",
        "a verified client certificate's CN (or first SAN) is the user name (1/0)",
        limits=None)
    tls_handshake_timeout: int = option(
        count(metavar="S"), "10",
        "seconds a new TLS connection has to complete its handshake",
        limits=Bound("TLS", "time to finish the TLS handshake",
                     "connection closed (the broker's own deadlines start after the handshake)",
                     "`tls.handshake_timeouts`",
                     default="10 s"))
    tls_max_handshakes: int = option(
        count(), "256",
        "TLS handshakes in progress at once; more new connections are closed",
        limits=Bound("TLS", "TLS handshakes in progress",
                     "a new connection is closed at once",
                     "`tls.handshakes_refused` (gauge `tls.handshakes_in_progress`)"))
