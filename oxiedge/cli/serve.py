"""``oxiedge serve``: every option of ``config.py`` as a flag; the brokers, trio and RocksDB
are imported only once the settings are valid."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..config import Config, ConfigError
from .base import app, err


def _flag_help(name: str) -> str:
    from ..config import OPTIONS_BY_NAME

    opt = OPTIONS_BY_NAME[name]
    return f"{opt.help} [env: {opt.env}; default: {opt.default or 'none'}]"


@app.command()
def serve(
    data: Annotated[Path | None, typer.Option("--data", help=_flag_help("data"))] = None,
    bind: Annotated[str | None, typer.Option("--bind", help=_flag_help("bind"))] = None,
    mqtt_port: Annotated[str | None, typer.Option("--mqtt-port", help=_flag_help("mqtt_port"))] = None,  # noqa: E501
    amqp_port: Annotated[str | None, typer.Option("--amqp-port", help=_flag_help("amqp_port"))] = None,  # noqa: E501
    mqtt_tls_port: Annotated[str | None, typer.Option("--mqtt-tls-port", help=_flag_help("mqtt_tls_port"))] = None,  # noqa: E501
    amqp_tls_port: Annotated[str | None, typer.Option("--amqp-tls-port", help=_flag_help("amqp_tls_port"))] = None,  # noqa: E501
    tls_cert: Annotated[Path | None, typer.Option("--tls-cert", help=_flag_help("tls_cert"))] = None,  # noqa: E501
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help=_flag_help("tls_key"))] = None,
    tls_ca: Annotated[Path | None, typer.Option("--tls-ca", help=_flag_help("tls_ca"))] = None,
    tls_min_version: Annotated[str | None, typer.Option("--tls-min-version", help=_flag_help("tls_min_version"))] = None,  # noqa: E501
    tls_verify_client: Annotated[str | None, typer.Option("--tls-verify-client", help=_flag_help("tls_verify_client"))] = None,  # noqa: E501
    tls_identity_as_username: Annotated[bool | None, typer.Option("--tls-identity-as-username/--no-tls-identity-as-username", help=_flag_help("tls_identity_as_username"))] = None,  # noqa: E501
    tls_handshake_timeout: Annotated[int | None, typer.Option("--tls-handshake-timeout", help=_flag_help("tls_handshake_timeout"))] = None,  # noqa: E501
    tls_max_handshakes: Annotated[int | None, typer.Option("--tls-max-handshakes", help=_flag_help("tls_max_handshakes"))] = None,  # noqa: E501
    mqtt_persist: Annotated[bool | None, typer.Option("--mqtt-persist/--no-mqtt-persist", help=_flag_help("mqtt_persist"))] = None,  # noqa: E501
    ingest: Annotated[list[str] | None, typer.Option("--ingest", help=_flag_help("ingest"))] = None,
    mqtt_max_packet_size: Annotated[int | None, typer.Option(help=_flag_help("mqtt_max_packet_size"))] = None,  # noqa: E501
    mqtt_queue_limit: Annotated[int | None, typer.Option(help=_flag_help("mqtt_queue_limit"))] = None,  # noqa: E501
    mqtt_queue_bytes: Annotated[str | None, typer.Option(help=_flag_help("mqtt_queue_bytes"))] = None,  # noqa: E501
    mqtt_retained_max: Annotated[int | None, typer.Option(help=_flag_help("mqtt_retained_max"))] = None,  # noqa: E501
    mqtt_retained_bytes: Annotated[str | None, typer.Option(help=_flag_help("mqtt_retained_bytes"))] = None,  # noqa: E501
    mqtt_max_sessions: Annotated[int | None, typer.Option(help=_flag_help("mqtt_max_sessions"))] = None,  # noqa: E501
    mqtt_session_expiry: Annotated[str | None, typer.Option(help=_flag_help("mqtt_session_expiry"))] = None,  # noqa: E501
    mqtt_max_subscriptions: Annotated[int | None, typer.Option(help=_flag_help("mqtt_max_subscriptions"))] = None,  # noqa: E501
    mqtt_max_subscription_levels: Annotated[int | None, typer.Option(help=_flag_help("mqtt_max_subscription_levels"))] = None,  # noqa: E501
    mqtt_max_topic_levels: Annotated[int | None, typer.Option(help=_flag_help("mqtt_max_topic_levels"))] = None,  # noqa: E501
    mqtt_max_topic_length: Annotated[int | None, typer.Option(help=_flag_help("mqtt_max_topic_length"))] = None,  # noqa: E501
    mqtt_max_connect_size: Annotated[str | None, typer.Option(help=_flag_help("mqtt_max_connect_size"))] = None,  # noqa: E501
    mqtt_connect_timeout: Annotated[int | None, typer.Option(help=_flag_help("mqtt_connect_timeout"))] = None,  # noqa: E501
    amqp_queue_limit: Annotated[int | None, typer.Option(help=_flag_help("amqp_queue_limit"))] = None,  # noqa: E501
    amqp_heartbeat: Annotated[int | None, typer.Option(help=_flag_help("amqp_heartbeat"))] = None,
    amqp_frame_max: Annotated[int | None, typer.Option(help=_flag_help("amqp_frame_max"))] = None,
    amqp_channel_max: Annotated[int | None, typer.Option(help=_flag_help("amqp_channel_max"))] = None,  # noqa: E501
    amqp_max_message_size: Annotated[str | None, typer.Option(help=_flag_help("amqp_max_message_size"))] = None,  # noqa: E501
    amqp_queue_bytes: Annotated[str | None, typer.Option(help=_flag_help("amqp_queue_bytes"))] = None,  # noqa: E501
    amqp_max_queues: Annotated[int | None, typer.Option(help=_flag_help("amqp_max_queues"))] = None,
    amqp_max_exchanges: Annotated[int | None, typer.Option(help=_flag_help("amqp_max_exchanges"))] = None,  # noqa: E501
    amqp_max_bindings: Annotated[int | None, typer.Option(help=_flag_help("amqp_max_bindings"))] = None,  # noqa: E501
    amqp_max_arguments_bytes: Annotated[str | None, typer.Option(help=_flag_help("amqp_max_arguments_bytes"))] = None,  # noqa: E501
    amqp_max_queues_per_connection: Annotated[int | None, typer.Option(help=_flag_help("amqp_max_queues_per_connection"))] = None,  # noqa: E501
    amqp_max_consumers_per_connection: Annotated[int | None, typer.Option(help=_flag_help("amqp_max_consumers_per_connection"))] = None,  # noqa: E501
    amqp_preauth_max_size: Annotated[str | None, typer.Option(help=_flag_help("amqp_preauth_max_size"))] = None,  # noqa: E501
    amqp_handshake_timeout: Annotated[str | None, typer.Option(help=_flag_help("amqp_handshake_timeout"))] = None,  # noqa: E501
    memory_high_watermark: Annotated[
        str | None, typer.Option(help=_flag_help("memory_high_watermark"))] = None,
    disk_free_limit: Annotated[str | None, typer.Option(help=_flag_help("disk_free_limit"))] = None,
    password_file: Annotated[Path | None, typer.Option(help=_flag_help("password_file"))] = None,
    allow_anonymous: Annotated[bool | None, typer.Option("--allow-anonymous/--no-allow-anonymous", help=_flag_help("allow_anonymous"))] = None,  # noqa: E501
    device_id: Annotated[str | None, typer.Option("--device-id", help=_flag_help("device_id"))] = None,  # noqa: E501
    config_file: Annotated[Path | None, typer.Option("--config", help=_flag_help("config_file"))] = None,  # noqa: E501
    max_connections: Annotated[int | None, typer.Option(help=_flag_help("max_connections"))] = None,
    max_connections_per_source: Annotated[int | None, typer.Option(help=_flag_help("max_connections_per_source"))] = None,  # noqa: E501
    login_hash_threads: Annotated[int | None, typer.Option(help=_flag_help("login_hash_threads"))] = None,  # noqa: E501
    login_delay_max: Annotated[float | None, typer.Option(help=_flag_help("login_delay_max"))] = None,  # noqa: E501
    login_track_max: Annotated[int | None, typer.Option(help=_flag_help("login_track_max"))] = None,
    blocked_keepalive: Annotated[str | None, typer.Option(help=_flag_help("blocked_keepalive"))] = None,  # noqa: E501
    busy_poll_us: Annotated[int | None, typer.Option(help=_flag_help("busy_poll_us"))] = None,
) -> None:
    """Run the broker (MQTT + AMQP + document store) in the foreground."""
    try:
        cfg = Config.resolve(locals())
    except ConfigError as exc:
        err.print(f"oxiedge: error: {exc}", highlight=False, markup=False)
        raise typer.Exit(2) from None
    from .. import server  # the brokers, trio and RocksDB: only once the settings are valid

    raise typer.Exit(server.run(cfg))

