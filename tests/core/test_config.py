from __future__ import annotations

from pathlib import Path

import pytest

from oxiedge.config import Config, ConfigError


def test_defaults_match_the_contract() -> None:
    cfg = Config.resolve({}, env={})
    assert cfg.data == Path("oxiedge-data")
    assert (cfg.bind, cfg.mqtt_port, cfg.amqp_port) == ("127.0.0.1", 1883, 5672)
    assert cfg.mqtt_persist is True and cfg.ingest == []
    assert cfg.mqtt_queue_limit == 10_000_000 and cfg.mqtt_max_packet_size == 1 << 20
    assert cfg.users_path == Path("oxiedge-data/passwd")
    assert cfg.busy_poll_us == 0
    assert Config.resolve({}, env={"OXIEDGE_BUSY_POLL_US": "50"}).busy_poll_us == 50
    assert cfg.blocked_keepalive == (60, 20, 3)
    env = {"OXIEDGE_BLOCKED_KEEPALIVE": "10, 5, 2"}
    assert Config.resolve({}, env=env).blocked_keepalive == (10, 5, 2)


def test_env_then_flags_win() -> None:
    env = {"OXIEDGE_DATA": "/srv/x", "OXIEDGE_MQTT_PORT": "off", "OXIEDGE_AMQP_PORT": "0",
           "OXIEDGE_MQTT_PERSIST": "0", "OXIEDGE_MQTT_INGEST": "a/#:x, b/+:y",
           "OXIEDGE_BIND": "0.0.0.0"}
    cfg = Config.resolve({}, env=env)
    assert cfg.data == Path("/srv/x") and cfg.mqtt_port is None and cfg.amqp_port == 0
    assert cfg.mqtt_persist is False and cfg.ingest == ["a/#:x", "b/+:y"]
    cfg = Config.resolve({"data": Path("/d"), "mqtt_port": "1884", "mqtt_persist": True,
                          "ingest": ["c/#:z"]}, env=env)
    assert cfg.data == Path("/d") and cfg.mqtt_port == 1884 and cfg.mqtt_persist is True
    assert cfg.ingest == ["c/#:z"]


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        ({"mqtt_port": "70000"}, "--mqtt-port"),
        ({"amqp_port": "abc"}, "--amqp-port"),
        ({"bind": "not-an-ip"}, "--bind"),
        ({"mqtt_persist": "maybe"}, "OXIEDGE_MQTT_PERSIST"),
        ({"mqtt_queue_limit": "0"}, "--mqtt-queue-limit"),
        ({"busy_poll_us": "-1"}, "--busy-poll-us"),
        ({"busy_poll_us": "1001"}, "--busy-poll-us.*above the maximum 1000"),
        ({"busy_poll_us": "50us"}, "--busy-poll-us"),
        ({"blocked_keepalive": "60,20"}, "--blocked-keepalive.*IDLE,INTERVAL,COUNT"),
        ({"blocked_keepalive": "60,0,3"}, "--blocked-keepalive.*at least 1"),
        ({"blocked_keepalive": "60,20,500"}, "--blocked-keepalive.*127 probes"),
    ],
)
def test_bad_values_name_the_option(flags: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        Config.resolve(flags, env={})
