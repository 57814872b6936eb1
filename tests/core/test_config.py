from __future__ import annotations

import os
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
        ({"max_backlog_bytes": "1.5"}, "--max-backlog-bytes.*a fraction like 0.5"),
        ({"max_backlog_bytes": "64KiB"}, "--max-backlog-bytes.*below the 1 MB minimum"),
        ({"max_backlog_bytes": "lots"}, "--max-backlog-bytes"),
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


def test_max_backlog_bytes_is_a_fraction_of_the_data_filesystem_or_a_size(tmp_path: Path
                                                                          ) -> None:
    from oxiedge.sizes import backlog_budget

    assert Config.resolve({"max_backlog_bytes": "8GB"}, env={}).max_backlog_bytes == "8GB"
    assert backlog_budget("8GB", tmp_path) == (8_000_000_000, "--max-backlog-bytes")
    st = os.statvfs(tmp_path)
    budget, source = backlog_budget("0.25", tmp_path / "not" / "yet")  # nearest existing dir
    assert budget == int(st.f_blocks * st.f_frsize * 0.25)
    assert source.startswith("0.25 of the data filesystem (")
