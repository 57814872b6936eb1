"""Not anonymous on the network by default (issue 14, item 7; Mosquitto 2.x's rule).

Only loopback is a test target, so the "network" listener is ``--bind 0.0.0.0`` (all
interfaces, a non-loopback listener) reached through 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable

from tests.conftest import ServerProcess
from tests.hostile.conftest import server_status
from tests.hostile.rawlogin import amqp_login, mqtt_login


def test_all_interfaces_without_users_refuses_anonymous(
        hostile_server: Callable[..., ServerProcess]) -> None:
    srv = hostile_server("--bind", "0.0.0.0")
    mqtt_port, amqp_port = srv.mqtt_port or 0, srv.amqp_port or 0
    for label in ("MQTT", "AMQP"):
        line = srv.line(f"{label} on 0.0.0.0:")
        assert line is not None and "anonymous clients refused" in line, srv.log_lines
    assert mqtt_login(mqtt_port, None, None) == 5  # CONNACK 5: not authorized
    assert mqtt_login(mqtt_port, "guest", "guest") == 4  # no such user
    assert amqp_login(amqp_port, "guest", "guest") == 403
    assert "refused" in server_status(srv)["logins"]["mode"]
    # A user opens the broker to that user only ...
    srv.cli("user", "add", "alice", "--password-stdin", input="pw-alice\n")
    assert mqtt_login(mqtt_port, "alice", "pw-alice") == 0
    assert amqp_login(amqp_port, "alice", "pw-alice") == 0
    assert mqtt_login(mqtt_port, None, None) == 5
    # ... and removing the last user does not reopen it.
    removed = srv.cli("user", "remove", "alice").stdout
    assert "no user left" in removed and "--allow-anonymous" in removed, removed
    assert mqtt_login(mqtt_port, None, None) == 5
    assert amqp_login(amqp_port, "guest", "guest") == 403
    assert mqtt_login(mqtt_port, "alice", "pw-alice") == 4
    assert srv.line("users reloaded: anonymous clients refused: non-loopback") is not None


def test_allow_anonymous_on_all_interfaces_is_explicit_and_loud(
        hostile_server: Callable[..., ServerProcess]) -> None:
    srv = hostile_server("--bind", "0.0.0.0", "--allow-anonymous")
    line = srv.line("MQTT on 0.0.0.0:")
    assert line is not None and "allowed (--allow-anonymous)" in line and "WARNING" in line
    assert mqtt_login(srv.mqtt_port or 0, None, None) == 0
    assert amqp_login(srv.amqp_port or 0, "guest", "guest") == 0


def test_loopback_without_users_stays_open(hostile_server: Callable[..., ServerProcess]) -> None:
    srv = hostile_server()  # --bind 127.0.0.1: this board only
    line = srv.line("MQTT on 127.0.0.1:")
    assert line is not None and "anonymous clients allowed (loopback" in line
    assert mqtt_login(srv.mqtt_port or 0, None, None) == 0
    assert amqp_login(srv.amqp_port or 0, "guest", "guest") == 0
