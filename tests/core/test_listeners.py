"""The table of listeners (oxiedge/listeners.py): one entry per listening socket, each a
port option of the configuration; which are on follows the configuration alone."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from oxiedge.config import Config
from oxiedge.listeners import LISTENERS, any_tls, port_of, wanted


def test_every_entry_names_a_port_option_and_a_unique_endpoint() -> None:
    fields = {f.name for f in dataclasses.fields(Config)}
    assert all(s.port_option in fields for s in LISTENERS)
    assert len({s.endpoint for s in LISTENERS}) == len(LISTENERS)
    assert len({s.label for s in LISTENERS}) == len(LISTENERS)
    for s in LISTENERS:  # a TLS twin is named after its plain listener
        assert s.tls == s.label.endswith(" TLS") == s.endpoint.endswith("_tls")


def test_which_listeners_are_on(tmp_path: Path) -> None:
    config = Config(data=tmp_path, mqtt_port=0, mqtt_tls_port=None, amqp_port=None,
                    amqp_tls_port=5671, http_port=None, http_tls_port=None)
    assert [s.label for s in wanted(config, "mqtt")] == ["MQTT"]
    assert [s.label for s in wanted(config, "amqp")] == ["AMQP TLS"]
    assert wanted(config, "http") == []
    assert any_tls(config)
    assert port_of(config, wanted(config, "amqp")[0]) == 5671
    assert not any_tls(dataclasses.replace(config, amqp_tls_port=None))
