"""Trickled bytes before authentication (issue 14, item 4): 300 connections over both
protocols each send a large first packet a few bytes at a time. The size bound before login
(MQTT ``--mqtt-max-connect-size``, AMQP ``--amqp-preauth-max-size``, owned by those
protocols) refuses a header announcing more at once; a packet under it that never completes
is cut by the deadline (``--mqtt-connect-timeout``, ``--amqp-handshake-timeout``). Together
with the per-source bound this holds what such sockets cost to a few MiB, where the issue
measured a possible 1 MiB each (500 MB for 500)."""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

from bench.mqttwire import remaining_length
from oxiedge.amqp import codec
from tests.conftest import ServerProcess
from tests.hostile.conftest import InnocentClient, PingStats, server_status
from tests.hostile.mqtt_retry import fresh, responsive_in_some_run
from tests.hostile.rawlogin import open_from

MiB = 1 << 20
TRICKLING = 300  # sockets trickling a 60 KB first packet, half MQTT, half AMQP


def _trickle(socks: list[socket.socket], seconds: float, chunk: bytes = b"\x00" * 200,
             every: float = 0.5) -> tuple[int, float]:
    """Send ``chunk`` to every open socket every ``every`` seconds until the server has
    closed them all (or ``seconds`` pass); returns (how many it closed, when the last one
    went)."""
    start = time.monotonic()
    open_ = {s.fileno(): s for s in socks}
    closed, last = 0, 0.0
    for s in socks:
        s.setblocking(False)
    next_send = start
    while open_ and time.monotonic() - start < seconds:
        readable, _, _ = select.select(list(open_.values()), [], [], 0.05)
        for s in readable:
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data:
                del open_[s.fileno()]
                closed += 1
                last = time.monotonic() - start
        if time.monotonic() < next_send:
            continue
        next_send += every
        for s in list(open_.values()):
            try:
                s.send(chunk)
            except BlockingIOError:
                pass
            except OSError:
                pass  # reset: recv sees it next round
    return closed, last


def test_trickled_first_packets_are_cut_and_cost_little(
        hostile_server: Callable[..., ServerProcess],
        innocent: Callable[..., InnocentClient], tmp_path: Path) -> None:
    start_fresh = fresh(hostile_server, tmp_path)

    def run() -> PingStats:
        return _one_run(start_fresh, innocent)

    # Up to 5 fresh runs on a loaded machine (tests/hostile/mqtt_retry.py says why); every
    # run's own assertions hold.
    responsive_in_some_run(run)


def _one_run(hostile_server: Callable[..., ServerProcess],
             innocent: Callable[..., InnocentClient]) -> PingStats:
    srv = hostile_server("--mqtt-connect-timeout", "2", "--amqp-handshake-timeout", "2")
    mqtt_port, amqp_port = srv.mqtt_port or 0, srv.amqp_port or 0
    client = innocent(mqtt_port, interval=0.02)
    before = srv.rss.mark()  # type: ignore[attr-defined]
    socks: list[socket.socket] = []
    # From 5 source addresses (the per-source bound is 100); 60 KB announced, under the
    # 64 KiB bound before login, so only the deadline ends them.
    for i in range(TRICKLING):
        if i % 50 == 49:
            # Waves of 50, 0.25 s apart, as sockets trickle in. (500 deadlines expiring in
            # the same instant are 500 closes in one loop batch: ~0.5 s of a loaded 2-core
            # VM's loop, measured with tests/hostile/test_core_preauth.py at TRICKLING=500.)
            time.sleep(0.25)
        source = f"127.0.3.{i % 5 + 1}"
        if i % 2:
            s = open_from(mqtt_port, source)
            s.sendall(b"\x10" + remaining_length(60_000) + b"\x00\x04MQTT\x04\x02")
        else:
            s = open_from(amqp_port, source)
            s.sendall(codec.PROTOCOL_HEADER)
            s.sendall(struct.pack(">BHI", 1, 0, 60_000) + b"\x00\x0a\x00\x0b")
        socks.append(s)
    # 100 more announce 1 MiB: refused from the header, at once.
    for i in range(100):
        source = f"127.0.4.{i % 5 + 1}"
        if i % 2:
            s = open_from(mqtt_port, source)
            s.sendall(b"\x10" + remaining_length(MiB))
        else:
            s = open_from(amqp_port, source)
            s.sendall(codec.PROTOCOL_HEADER + struct.pack(">BHI", 1, 0, MiB))
        socks.append(s)
    try:
        closed, last = _trickle(socks, 15)
    finally:
        for s in socks:
            s.close()
    stats = client.stop()
    grew = (srv.rss.peak - before) / MiB  # type: ignore[attr-defined]
    print(f"{TRICKLING} + 100 sockets: {closed} closed by the server, the last after {last:.1f}s; "
          f"innocent {stats}; RSS +{grew:.1f} MiB")
    assert closed == TRICKLING + 100, closed
    # The deadline (2 s), the AMQP close handshake's linger (3 s) and slack for a busy VM.
    assert last < 2 + 3 + 5, last
    mqtt, amqp = server_status(srv)["mqtt"], server_status(srv)["amqp"]
    half = TRICKLING // 2
    assert mqtt["connect_timeouts"] == half and mqtt["connect_too_large"] == 50, mqtt
    assert amqp["handshake_timeouts"] == half and amqp["preauth_too_large"] == 50, amqp
    assert grew < 48, grew
    return stats
