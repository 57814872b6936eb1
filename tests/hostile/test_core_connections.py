"""Connection floods (issue 14, item 4): the total and per-source bounds close extra
connections at once, are counted, release their slots, and never stall an innocent client."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from bench.mqttwire import connect_packet
from oxiedge.connections import MAX_WAITING
from tests.conftest import ServerProcess
from tests.hostile.conftest import InnocentClient, server_status
from tests.hostile.rawlogin import amqp_login, mqtt_login, open_from


def _closed_at_once(sock: socket.socket, timeout: float = 5.0) -> bool:
    """True if the server closed ``sock`` without sending anything."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_per_source_limit(hostile_server: Callable[..., ServerProcess],
                          innocent: Callable[..., InnocentClient]) -> None:
    srv = hostile_server("--max-connections-per-source", "20")
    mqtt_port, amqp_port = srv.mqtt_port or 0, srv.amqp_port or 0
    client = innocent(mqtt_port, interval=0.02)  # from 127.0.0.1
    held = [open_from(port, "127.0.0.2") for port in [mqtt_port, amqp_port] * 10]
    extra: list[socket.socket] = []
    try:
        time.sleep(0.3)  # let the server accept them all
        extra = [open_from(port, "127.0.0.2") for port in [mqtt_port, amqp_port] * 20]
        assert all(_closed_at_once(s) for s in extra)
        # Another address is not affected, on either protocol.
        assert mqtt_login(mqtt_port, None, None, source="127.0.0.3") == 0
        assert amqp_login(amqp_port, "guest", "guest", source="127.0.0.3") == 0
        conns = server_status(srv)["connections"]
        assert conns["refused_max_per_source"] == 40, conns
        assert conns["max_per_source"] == 20 and conns["open"] >= 21, conns
    finally:
        for s in held + extra:
            s.close()
    # Closed connections free their slots.
    deadline = time.monotonic() + 10
    while mqtt_login(mqtt_port, None, None, source="127.0.0.2") != 0:
        assert time.monotonic() < deadline, server_status(srv)["connections"]
        time.sleep(0.1)
    stats = client.stop()
    stats.assert_responsive(limit_ms=100)


def test_total_limit_under_a_flood(hostile_server: Callable[..., ServerProcess],
                                   innocent: Callable[..., InnocentClient]) -> None:
    srv = hostile_server("--max-connections", "60", "--max-connections-per-source", "1000")
    mqtt_port, amqp_port = srv.mqtt_port or 0, srv.amqp_port or 0
    client = innocent(mqtt_port, interval=0.02)  # holds one of the 60
    srv.rss.mark()  # type: ignore[attr-defined]
    flood: list[socket.socket] = []
    try:
        for i in range(400):  # 400 connections from 8 addresses, none sends a byte
            port = mqtt_port if i % 2 else amqp_port
            flood.append(open_from(port, f"127.0.1.{i % 8 + 1}"))
        time.sleep(0.5)
        conns = server_status(srv)["connections"]
        assert conns["open"] <= 60 and conns["refused_max_connections"] >= 400 - 60, conns
        closed = sum(_closed_at_once(s, timeout=0.05) for s in flood)
        assert closed >= 400 - 60, closed
    finally:
        for s in flood:
            s.close()
    deadline = time.monotonic() + 10
    while mqtt_login(mqtt_port, None, None) != 0:  # room again once the flood is gone
        assert time.monotonic() < deadline, server_status(srv)["connections"]
        time.sleep(0.1)
    # Connection churn: 500 connect/close cycles in a row.
    for i in range(500):
        open_from(amqp_port if i % 2 else mqtt_port, "127.0.2.1").close()
    stats = client.stop()
    grew = (srv.rss.peak - srv.rss.baseline) >> 20  # type: ignore[attr-defined]
    print(f"flood of 400 + churn of 500: innocent {stats}; RSS +{grew} MiB")
    stats.assert_responsive(limit_ms=100)
    conns = server_status(srv)["connections"]
    assert conns["peak"] <= 60, conns


def _mqtt_connect(port: int, client_id: str) -> tuple[socket.socket, int]:
    """An MQTT connection from 127.0.0.1 and its CONNACK code (-1: closed without one)."""
    sock = open_from(port)
    try:
        sock.sendall(connect_packet(client_id, keepalive=60))
        connack = b""
        while len(connack) < 4:
            chunk = sock.recv(4 - len(connack))
            if not chunk:
                return sock, -1
            connack += chunk
    except (ConnectionResetError, BrokenPipeError):
        return sock, -1
    return sock, connack[3]


def test_reconnect_at_the_bound_gets_in(hostile_server: Callable[..., ServerProcess]) -> None:
    # Mosquitto's 01-connect-max-connections: close every client at the bound and reconnect
    # them at once. The old connections may still be in cleanup when the new ones arrive;
    # the new ones wait a short grace for the slots instead of being refused.
    srv = hostile_server("--max-connections", "10", "--max-connections-per-source", "1000")
    port = srv.mqtt_port or 0
    held = [_mqtt_connect(port, f"c{i}") for i in range(10)]
    try:
        assert [code for _, code in held] == [0] * 10
        for _round in range(5):
            for sock, _ in held:
                sock.close()
            held = [_mqtt_connect(port, f"c{i}") for i in range(10)]
            assert [code for _, code in held] == [0] * 10, server_status(srv)["connections"]
        conns = server_status(srv)["connections"]
        assert conns["refused_max_connections"] == 0 and conns["peak"] <= 10, conns
        # The bound still holds: an 11th connection waits out the grace and is refused.
        extra, code = _mqtt_connect(port, "eleventh")
        extra.close()
        assert code == -1
        assert server_status(srv)["connections"]["refused_max_connections"] == 1
    finally:
        for sock, _ in held:
            sock.close()


def test_flood_at_the_bound_waits_bounded(hostile_server: Callable[..., ServerProcess],
                                          innocent: Callable[..., InnocentClient]) -> None:
    # A flood at a full bound: every extra connection is refused and counted once, at most
    # MAX_WAITING of them wait for a slot at a time, and an innocent client is not stalled.
    srv = hostile_server("--max-connections", "11", "--max-connections-per-source", "1000")
    mqtt_port, amqp_port = srv.mqtt_port or 0, srv.amqp_port or 0
    client = innocent(mqtt_port, interval=0.02)  # holds one of the 11
    held = [open_from(mqtt_port, "127.0.3.1") for _ in range(10)]
    flood: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 60  # the server has accepted the held ones
        while server_status(srv)["connections"]["open"] < 11:
            assert time.monotonic() < deadline, server_status(srv)["connections"]
            time.sleep(0.05)
        for i in range(200):
            flood.append(open_from(amqp_port if i % 2 else mqtt_port, f"127.0.3.{i % 8 + 2}"))
        assert all(_closed_at_once(s) for s in flood)
        conns = server_status(srv)["connections"]
        assert conns["refused_max_connections"] == 200, conns
        assert 1 <= conns["waiting_peak"] <= MAX_WAITING and conns["waiting"] == 0, conns
        assert conns["admitted_after_wait"] == 0 and conns["peak"] <= 11, conns
    finally:
        for s in held + flood:
            s.close()
    stats = client.stop()
    print(f"flood of 200 at a full bound of 11: innocent {stats}")
    stats.assert_responsive(limit_ms=100)
    stats.assert_responsive(limit_ms=100)
