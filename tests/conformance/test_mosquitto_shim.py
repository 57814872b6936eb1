"""The Mosquitto shim's translation of a mosquitto.conf into ``oxiedge serve`` flags
(``tests/conformance/overlays/mosquitto_shim.py``): what a script's configuration means in
Mosquitto 2 has to mean the same to oxiedge, or the script tests something else."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.overlays.mosquitto_shim import from_config


def _translate(tmp_path: Path, *lines: str) -> tuple[list[str], int | None]:
    conf = tmp_path / "test.conf"
    conf.write_text("".join(f"{ln}\n" for ln in lines))
    args: list[str] = []
    port, _persistence, _pfile = from_config(conf, args)
    return args, port


def test_a_listener_without_allow_anonymous_refuses_anonymous_clients(tmp_path: Path) -> None:
    # Mosquitto 2 refuses anonymous clients once a configuration defines a listener, unless
    # it says allow_anonymous true; oxiedge with no users would admit them.
    for first in ("listener 1888", "port 1888"):
        args, port = _translate(tmp_path, first)
        assert port == 1888
        assert args == ["--no-allow-anonymous"]


def test_allow_anonymous_is_translated_as_given(tmp_path: Path) -> None:
    assert _translate(tmp_path, "listener 1888", "allow_anonymous true")[0] == \
        ["--allow-anonymous"]
    assert _translate(tmp_path, "allow_anonymous false", "listener 1888")[0] == \
        ["--no-allow-anonymous"]


def test_a_configuration_without_a_listener_keeps_oxiedges_default(tmp_path: Path) -> None:
    assert _translate(tmp_path, "max_keepalive 100")[0] == ["--mqtt-max-keepalive", "100"]


def test_max_connections_and_per_listener_settings_with_one_listener(tmp_path: Path) -> None:
    args, _ = _translate(tmp_path, "per_listener_settings true", "listener 1888",
                         "allow_anonymous true", "max_connections 10")
    assert args == ["--allow-anonymous", "--max-connections", "10"]


def test_a_directive_without_equivalent_ends_the_start(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as stop:
        _translate(tmp_path, "listener 1888", "message_size_limit 1")
    assert stop.value.code == 3
    with pytest.raises(SystemExit):
        _translate(tmp_path, "listener 1888", "listener 1889")
