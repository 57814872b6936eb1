"""MQTT bounds against a real server, as a hostile client would probe them (issue 14):
topic levels/length, the topic caches, retained messages, sessions, offline queue bytes,
and the pre-authentication CONNECT size and deadline. Each test measures an innocent
client's PINGREQ round trip (own process, under 100 ms) and the broker's RSS."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

from oxiedge.mqtt.codec import encode
from oxiedge.mqtt.packets import Connect, Publish, Subscribe
from tests.conftest import ServerProcess
from tests.hostile.conftest import InnocentClient, PingStats, rss_of, server_status
from tests.hostile.mqtt_retry import fresh, responsive_in_some_run
from tests.mqtt.rawclient import RawClient, RawSession


def _port(srv: ServerProcess) -> int:
    assert srv.mqtt_port is not None
    return srv.mqtt_port


def test_topic_level_and_length_limits(
        hostile_server: Callable[..., ServerProcess], tmp_path: Path,
        innocent: Callable[..., InnocentClient]) -> None:
    """65,535 levels: a PUBLISH closes the connection, a SUBSCRIBE gets 0x80 for that
    filter only; Mosquitto's 200 separators still pass."""

    fresh_server = fresh(hostile_server, tmp_path)

    def run() -> PingStats:
        srv = fresh_server()
        port = _port(srv)
        with innocent(port, interval=0.02) as client:
            time.sleep(0.2)
            sub = RawSession(port)
            sub.connect("levels")
            codes = sub.subscribe(1, ("/" * 65535, 0), ("/" * 200, 0), ("a/" * 201 + "b", 1),
                                  ("x" * 5000, 0), ("ok/#", 1))  # fmt: skip
            assert codes == (0x80, 0, 0x80, 0x80, 1)
            for topic in ("/" * 65535, "x" * 5000):
                pub = RawClient(port)
                pub.connect("deep")
                pub.send(encode(Publish(topic, b"x", 1, packet_id=1)))
                assert pub.closed(), "over-limit PUBLISH must close the connection"
            fine = RawSession(port)
            fine.connect("fine")
            fine.publish("/" * 200, b"deep but allowed", 1, pid=1)
            assert sub.receive().payload == b"deep but allowed"
        stats = client.stop()
        status = server_status(srv)["mqtt"]
        assert status["topics_refused"] >= 5  # 3 filters + 2 PUBLISH
        assert (status["max_topic_levels"], status["max_topic_length"]) == (200, 4096)
        print(f"broker RSS start {srv.rss.baseline >> 20} MiB, "  # type: ignore[attr-defined]
              f"peak {srv.rss.peak >> 20} MiB")  # type: ignore[attr-defined]
        return stats

    responsive_in_some_run(run)


def test_distinct_long_topics_do_not_pin_memory(
        hostile_server: Callable[..., ServerProcess], tmp_path: Path,
        innocent: Callable[..., InnocentClient]) -> None:
    """The issue's case: 400 QoS 0 publishes to distinct 60 KB topics (allowed here by a
    raised length limit), no subscriber. The topic caches are bounded in bytes: nothing
    stays pinned after the client left."""

    fresh_server = fresh(hostile_server, tmp_path)

    def run() -> PingStats:
        srv = fresh_server("--mqtt-max-topic-length", "65535")
        port = _port(srv)
        with innocent(port, interval=0.02) as client:
            time.sleep(0.3)
            before = srv.rss.mark()  # type: ignore[attr-defined]
            pub = RawClient(port)
            pub.connect("longtopics")
            for i in range(400):
                pub.send(encode(Publish(f"{i:05d}/" + "t" * 60_000, b"v")))
            pub.send(b"\xc0\x00")
            assert pub.recv_packet(30) == b"\xd0\x00"
            pub.send(b"\xe0\x00")
            pub.close()
            time.sleep(0.5)
        stats = client.stop()
        assert srv.proc is not None
        after = rss_of(srv.proc.pid)
        status = server_status(srv)["mqtt"]
        assert status["topic_cache_bytes"] <= 1 << 20
        assert after - before < 16 << 20, f"+{(after - before) >> 20} MiB pinned"
        print(f"broker RSS start {srv.rss.baseline >> 20} MiB, "  # type: ignore[attr-defined]
              f"peak {srv.rss.peak >> 20} MiB")  # type: ignore[attr-defined]
        return stats

    responsive_in_some_run(run)


def test_retained_count_and_bytes_bounds(
        hostile_server: Callable[..., ServerProcess], tmp_path: Path,
        innocent: Callable[..., InnocentClient]) -> None:
    """A client filling the retained store: beyond --mqtt-retained-max (or -bytes) messages
    are delivered but not retained, and counted."""

    fresh_server = fresh(hostile_server, tmp_path)

    def run() -> PingStats:
        srv = fresh_server("--mqtt-retained-max", "100", "--mqtt-retained-bytes", "64KiB")
        port = _port(srv)
        with innocent(port, interval=0.02) as client:
            time.sleep(0.2)
            pub = RawSession(port)
            pub.connect("filler")
            for i in range(300):
                pub.publish(f"fill/{i}", b"p" * 100, 1, pid=i + 1, retain=True)
            for i in range(20):  # 20 x 10 KB: the byte bound (64 KiB) is hit first
                pub.publish(f"big/{i}", b"B" * 10_000, 1, pid=i + 1, retain=True)
            pub.disconnect()
        stats = client.stop()
        status = server_status(srv)["mqtt"]
        assert status["retained"] <= 100
        assert status["retained_bytes"] <= 64 << 10
        assert status["retained_refused"] >= 200
        assert len(srv.cli("retained", "--json").stdout.splitlines()) == status["retained"]
        print(f"broker RSS start {srv.rss.baseline >> 20} MiB, "  # type: ignore[attr-defined]
              f"peak {srv.rss.peak >> 20} MiB")  # type: ignore[attr-defined]
        return stats

    responsive_in_some_run(run)


def test_session_count_bound(
        hostile_server: Callable[..., ServerProcess], tmp_path: Path,
        innocent: Callable[..., InnocentClient]) -> None:
    """A client cycling persistent client ids: past --mqtt-max-sessions a new id gets
    CONNACK 3 (server unavailable); known ids still connect."""

    fresh_server = fresh(hostile_server, tmp_path)

    def run() -> PingStats:
        srv = fresh_server("--mqtt-max-sessions", "21")
        port = _port(srv)
        with innocent(port, interval=0.02) as client:  # session 1 of 21
            time.sleep(0.2)
            codes = []
            for i in range(40):
                raw = RawClient(port)
                connack = raw.connect(f"cycler-{i}", clean=False, expect=None)
                codes.append(connack[3])
                raw.send(b"\xe0\x00")
                raw.close()
            again = RawClient(port)
            again.connect("cycler-0", clean=False, expect=b"\x20\x02\x01\x00")  # session present
            again.close()
        stats = client.stop()
        assert codes == [0] * 20 + [3] * 20
        status = server_status(srv)["mqtt"]
        assert status["sessions_refused"] == 20
        print(f"broker RSS start {srv.rss.baseline >> 20} MiB, "  # type: ignore[attr-defined]
              f"peak {srv.rss.peak >> 20} MiB")  # type: ignore[attr-defined]
        return stats

    responsive_in_some_run(run)


def test_offline_queue_bytes_bound(
        hostile_server: Callable[..., ServerProcess], tmp_path: Path,
        innocent: Callable[..., InnocentClient]) -> None:
    """A publisher flooding an offline persistent session with 100 KB messages: the queue
    keeps the newest --mqtt-queue-bytes, the oldest are dropped and counted, in memory and
    on disk (a restart recovers no more than the bound)."""

    fresh_server = fresh(hostile_server, tmp_path)

    def run() -> PingStats:
        srv = fresh_server("--mqtt-queue-bytes", "1MiB")
        port = _port(srv)
        sub = RawSession(port)
        sub.connect("offline", clean=False)
        sub.subscribe(1, ("q/#", 1))
        sub.disconnect()
        with innocent(port, interval=0.02) as client:
            time.sleep(0.2)
            pub = RawSession(port)
            pub.connect("flooder")
            for i in range(100):
                pub.publish("q/x", i.to_bytes(4, "big") + b"Q" * 100_000, 1, pid=i + 1)
            pub.disconnect()
        stats = client.stop()
        status = server_status(srv)["mqtt"]
        assert status["queued_bytes"] <= 1 << 20
        assert status["dropped_queue_bytes"] >= 89
        srv.restart()
        sub = RawSession(srv.mqtt_port)
        sub.connect("offline", clean=False, expect=b"\x20\x02\x01\x00")
        got = [int.from_bytes(sub.receive().payload[:4], "big") for _ in range(10)]
        assert got == list(range(90, 100))  # the newest ten (10 x ~100 KB = the bound)
        sub.ping()  # nothing more was queued
        print(f"broker RSS start {srv.rss.baseline >> 20} MiB, "  # type: ignore[attr-defined]
              f"peak {srv.rss.peak >> 20} MiB")  # type: ignore[attr-defined]
        return stats

    responsive_in_some_run(run)


def test_oversized_and_slow_connects_before_authentication(
        hostile_server: Callable[..., ServerProcess], tmp_path: Path,
        innocent: Callable[..., InnocentClient]) -> None:
    """50 sockets announcing a 1 MiB CONNECT are closed from the header (64 KiB bound),
    before any body is buffered; sockets that send nothing are closed at the deadline."""

    fresh_server = fresh(hostile_server, tmp_path)

    def run() -> PingStats:
        srv = fresh_server("--mqtt-connect-timeout", "1")
        port = _port(srv)
        with innocent(port, interval=0.02) as client:
            time.sleep(0.2)
            srv.rss.mark()  # type: ignore[attr-defined]
            big = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
            for s in big:
                s.sendall(b"\x10\x80\x80\x40" + b"\x00" * 1000)  # remaining length 1 MiB
            silent = [RawClient(port) for _ in range(20)]
            start = time.monotonic()
            assert all(RawClient.closed(_wrap(s), timeout=5) for s in big)
            assert all(c.closed(timeout=5) for c in silent)
            waited = time.monotonic() - start
            ok = RawClient(port)
            ok.send(encode(Connect("legit")) + encode(Subscribe(1, (("a", 0),))))
            assert ok.recv_packet()[:1] == b"\x20"
        stats = client.stop()
        status = server_status(srv)["mqtt"]
        assert status["connect_too_large"] == 50
        assert status["connect_timeouts"] == 20
        assert status["max_connect_size"] == 64 << 10
        assert 0.5 < waited < 4.0
        print(f"broker RSS start {srv.rss.baseline >> 20} MiB, "  # type: ignore[attr-defined]
              f"peak {srv.rss.peak >> 20} MiB")  # type: ignore[attr-defined]
        return stats

    responsive_in_some_run(run)


def _wrap(sock: socket.socket) -> RawClient:
    c = RawClient.__new__(RawClient)
    c.sock, c.buf = sock, b""
    return c


def test_a_packet_dribbled_a_byte_at_a_time_does_not_hold_the_keep_alive(
        server: ServerProcess) -> None:
    """A logged-in client that sends a PUBLISH one byte every 0.3 s, never finishing it,
    is closed 1.5x its keep-alive (1 s) after its CONNECT - bytes of an unfinished packet
    do not restart the keep-alive, complete packets do (MQTT-3.1.2-24, as Mosquitto)."""
    port = _port(server)
    pinger = RawSession(port)
    pinger.connect("pinger", keepalive=1)
    dribbler = RawClient(port)
    dribbler.connect("dribbler", keepalive=1)
    start = time.monotonic()
    publish = encode(Publish("slow/x", b"p" * 100, qos=1, packet_id=1))
    closed_at = None
    for i, byte in enumerate(publish[:-1]):
        try:
            dribbler.send(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            closed_at = time.monotonic() - start
            break
        if dribbler.closed(timeout=0.3):
            closed_at = time.monotonic() - start
            break
        if i % 2:
            pinger.ping()  # complete packets every 0.6 s: this one stays open
    assert closed_at is not None, "the dribbling client was never closed"
    assert 1.3 < closed_at < 3.5, closed_at
    pinger.ping()
    assert not pinger.closed(timeout=0.1)
    # The broker ended it: one log line says who and why (info level, as AMQP's).
    line = server.wait_for_line("MQTT 127.0.0.1:", timeout=5)
    assert "(client 'dribbler', user None): connection closed: keep-alive timeout (1s x 1.5)" \
        in line, line


def test_connections_the_broker_ends_are_logged_ordinary_ends_are_not(
        server: ServerProcess) -> None:
    """A protocol error and a take-over each log one line naming the client and the
    reason; a DISCONNECT and a client closing its socket log nothing at info level."""
    port = _port(server)
    polite = RawSession(port)
    polite.connect("polite")
    polite.disconnect()
    gone = RawSession(port)
    gone.connect("gone")
    gone.close()
    bad = RawSession(port)
    bad.connect("bad")
    bad.send(b"\x30\x03\x00\x01+")  # a wildcard in a PUBLISH topic (MQTT-3.3.2-2)
    assert bad.closed()
    first = RawSession(port)
    first.connect("twin")
    second = RawSession(port)
    second.connect("twin")
    assert first.closed()
    server.wait_for_line("MQTT 127.0.0.1:", timeout=5)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = [ln for ln in server.log_lines if ln.startswith("MQTT 127.0.0.1:")]
        if len(lines) >= 2:
            break
        time.sleep(0.05)
    assert len(lines) == 2, lines
    assert any("(client 'bad', user None): connection closed: protocol error: wildcard" in ln
               for ln in lines), lines
    assert any("(client 'twin', user None): connection closed: session taken over" in ln
               for ln in lines), lines
    second.disconnect()


def test_a_huge_client_id_makes_no_huge_log_line(server: ServerProcess) -> None:
    """A 63 KB client id (21,000 zero-width spaces: 6 characters each when escaped) used
    to make a 126 KB close line; the client-chosen parts of a line are cut short."""
    huge = "\u200b" * 21_000
    bad = RawSession(_port(server))
    bad.connect(huge)
    bad.send(b"\x00\x00")  # reserved packet type 0: the broker closes
    assert bad.closed()
    line = server.wait_for_line("MQTT 127.0.0.1:", timeout=5)
    assert "connection closed: protocol error: reserved packet type 0" in line, line[:300]
    assert len(line) < 600 and "...(126002 chars)" in line, line[:300]


def test_a_flood_of_bad_connections_does_not_flood_the_log(server: ServerProcess) -> None:
    """300 connections closed for a protocol error log at most the burst (50) and the
    rate; the next line after a pause says how many were held back; every one is counted."""
    port = _port(server)
    for i in range(300):
        c = RawSession(port)
        c.connect(f"bad{i}")
        c.send(b"\x30\x03\x00\x01#")  # a wildcard in a PUBLISH topic
        assert c.closed()
        c.close()
    time.sleep(0.5)
    logged = [ln for ln in server.log_lines if "connection closed: protocol error" in ln]
    assert 50 <= len(logged) <= 50 + 10 * 20, len(logged)  # (at most ~20 s of the rate)
    status = server_status(server)
    assert status["mqtt"]["protocol_errors"] == 300
    assert status["connections"]["close_lines_suppressed"] == 300 - len(logged)
    time.sleep(1.0)  # the bucket refills
    c = RawSession(port)
    c.connect("after")
    c.send(b"\x30\x03\x00\x01#")
    assert c.closed()
    line = server.wait_for_line("MQTT 127.0.0.1:", timeout=5)  # (the first one)
    assert line
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        last = [ln for ln in server.log_lines if "'after'" in ln]
        if last:
            break
        time.sleep(0.05)
    assert last and "similar lines suppressed)" in last[0], last
