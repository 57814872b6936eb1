"""A publisher held by a resource alarm that hangs up (or dies) is released during the alarm.

While an alarm is on, a publishing connection's socket is not read (``net.loop``,
``BLOCKED``); ``net.blocked`` watches it for the peer's FIN, a reset, or - with TCP
keep-alive probes - a peer that vanished silently, without reading its input. Every test
raises a disk alarm with ``oxiedge limits --disk-free-limit 1000000TB`` and checks the
connection's state went *during* the alarm: slots, channels and exclusive queues (AMQP),
the session's online state and the will (MQTT); and that the remaining input is handled in
order (a DISCONNECT honoured) when it is small, and discarded unacknowledged when not.

Timers under test stay short (1 s heartbeats and keep-alive); what the tests wait for is
polled from the server's status with ceilings of minutes, and the clients keep their own
I/O going while a CLI call takes seconds on a loaded machine, as a real client's loop would.
"""

from __future__ import annotations

import array
import fcntl
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import termios
import textwrap
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import paho.mqtt.client as mqtt
import pika
import pytest

from bench.mqttwire import publish_packet, remaining_length
from oxiedge.amqp import codec as amqp_codec
from oxiedge.amqp import spec
from tests.amqp.rawclient import RawClient as AmqpRaw
from tests.conftest import ServerProcess
from tests.hostile.conftest import server_status
from tests.mqtt.conftest import Client
from tests.tls.conftest import make_pki

# Each test makes a dozen CLI calls; on a loaded machine (load average 20) one takes seconds.
pytestmark = pytest.mark.timeout(600)

ALARM_ON = ("limits", "--disk-free-limit", "1000000TB")
ALARM_OFF = ("limits", "--disk-free-limit", "1MB")
PINGREQ, PINGRESP, DISCONNECT = b"\xc0\x00", b"\xd0\x00", b"\xe0\x00"
CEILING = 120.0  # seconds: how long a state may take to come on a loaded machine
T = TypeVar("T")


def wait_for(pred: Callable[[], object], what: str, timeout: float = CEILING) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.05)


def rows(srv: ServerProcess, *args: str) -> list[dict[str, Any]]:
    out = srv.cli(*args, "--json").stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def queue_ready(srv: ServerProcess) -> dict[str, int]:
    return {q["name"]: q["ready"] for q in rows(srv, "queues")}


# ----------------------------------------------------------------- raw MQTT


def _str(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack(">H", len(b)) + b


def connect_with_will(client_id: str, will_topic: str, keepalive: int = 60) -> bytes:
    """CONNECT (level 4, clean session) with a QoS 1 will."""
    flags = 0x02 | 0x04 | 0x08
    body = (_str("MQTT") + bytes([4, flags]) + struct.pack(">H", keepalive)
            + _str(client_id) + _str(will_topic) + _str(b"gone:" + client_id.encode()))
    return b"\x10" + remaining_length(len(body)) + body


class RawMqtt:
    """One MQTT connection on a plain socket, for what paho will not do (half-close, a
    pipelined flood, a PINGREQ schedule of our own)."""

    def __init__(self, port: int, client_id: str, keepalive: int = 60,
                 host: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection((host, port), timeout=CEILING)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.sock.sendall(connect_with_will(client_id, f"bd/will/{client_id}", keepalive))
        assert self.packet() == b"\x20\x02\x00\x00", "CONNACK refused"

    def packet(self, timeout: float = CEILING) -> bytes:
        """The next packet from the server (b"" at the end of the stream)."""
        self.sock.settimeout(timeout)
        while True:
            if len(self.buf) >= 2:
                # (every packet a client gets here is short: one-byte remaining length)
                n = 2 + self.buf[1]
                if len(self.buf) >= n:
                    pkt, self.buf = self.buf[:n], self.buf[n:]
                    return pkt
            chunk = self.sock.recv(65536)
            if not chunk:
                return b""
            self.buf += chunk

    def publish(self, pid: int, payload: bytes = b"x", topic: str = "bd/data") -> None:
        self.sock.sendall(publish_packet(topic, payload, qos=1, packet_id=pid))

    def puback(self, pid: int) -> None:
        assert self.packet() == b"\x40\x02" + struct.pack(">H", pid)

    def nothing_within(self, seconds: float) -> None:
        self.sock.settimeout(seconds)
        with pytest.raises(TimeoutError):
            chunk = self.sock.recv(1)
            pytest.fail(f"the server answered a blocked client: {chunk!r}")

    def outq(self) -> int:
        """Bytes this side has sent that the server's kernel has not acknowledged."""
        buf = array.array("i", [0])
        fcntl.ioctl(self.sock.fileno(), termios.TIOCOUTQ, buf)
        return buf[0]


class Pinger:
    """A client's keep-alive in a thread: a PINGREQ every 0.3 s on ``raw`` until
    ``stop()``, which returns how many were sent (the test reads their PINGRESPs)."""

    def __init__(self, raw: RawMqtt) -> None:
        self.raw = raw
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.raw.sock.sendall(PINGREQ)
            self.sent += 1
            self._stop.wait(0.3)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.sent


def block(srv: ServerProcess, client: RawMqtt, blocked: int | None = None) -> None:
    """With the alarm on: a publish, held unread - the first of a connection too.
    ``blocked``: the server's count of blocked publishers before (read from its status
    here unless given: a client with a short keep-alive cannot wait for a CLI call)."""
    if blocked is None:
        blocked = server_status(srv)["mqtt"]["blocked"]
    client.publish(2, b"held")
    wait_for(lambda: server_status(srv)["mqtt"]["blocked"] > blocked, "publisher blocked")
    client.nothing_within(0.3)
    assert server_status(srv)["alarms"]["blocked_connections"] >= 1


def will_watcher(srv: ServerProcess) -> Client:
    sub = Client(srv.mqtt_port, "bd-watcher")
    sub.connect()
    sub.subscribe(("bd/#", 1))
    return sub


def got(sub: Client, wait: float = 0.5) -> list[tuple[str, bytes]]:
    """What comes within ``wait`` seconds (for an absence; see ``received``)."""
    out: list[tuple[str, bytes]] = []
    deadline = time.monotonic() + wait
    while True:
        try:
            m = sub.messages.get(timeout=max(0.01, deadline - time.monotonic()))
        except Exception:
            return out
        out.append((m.topic, bytes(m.payload)))


def received(sub: Client, done: Callable[[list[tuple[str, bytes]]], bool],
             then: float = 0.5) -> list[tuple[str, bytes]]:
    """What comes until ``done(messages)`` holds (or a ceiling passed), and then within
    ``then`` seconds more: anything that must not come after it would show there."""
    out: list[tuple[str, bytes]] = []
    deadline = time.monotonic() + CEILING
    while not done(out) and time.monotonic() < deadline:
        out += got(sub, min(1.0, max(0.01, deadline - time.monotonic())))
    return out + got(sub, then)


def wills(seen: list[tuple[str, bytes]]) -> list[str]:
    return [t for t, _p in seen if t.startswith("bd/will/")]


class Paho:
    """A paho client driven by hand (``loop``, no thread): its unacknowledged QoS 1
    messages would keep paho's loop thread from ever stopping."""

    def __init__(self, port: int | None, client_id: str, will_topic: str,
                 ca_file: Path | None = None) -> None:
        assert port is not None
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                             clean_session=False)
        if ca_file is not None:
            self.c.tls_set(ca_certs=str(ca_file))
        self.c.will_set(will_topic, b"offline", 1, False)
        self.c.connect("127.0.0.1", port, keepalive=60)
        self.pump(self.c.is_connected)

    def pump(self, pred: Callable[[], bool], timeout: float = CEILING) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            assert time.monotonic() < deadline, "paho: not in time"
            self.c.loop(0.02)

    def publish(self, payload: bytes) -> mqtt.MQTTMessageInfo:
        """A QoS 1 publish, sent (not waiting for its PUBACK)."""
        info = self.c.publish("bd/data", payload, qos=1)
        self.c.loop(0.02)
        return info

    def drop(self) -> None:
        """Close the socket without DISCONNECT (what was sent to it is read first: a FIN)."""
        self.c.loop(0.02)
        sock = self.c.socket()
        assert sock is not None
        sock.close()


# ----------------------------------------------------------------------- AMQP


def _pika(srv: ServerProcess, **kw: Any) -> pika.BlockingConnection:
    kw.setdefault("heartbeat", 0)  # only the hang-up watch may notice (no heartbeat write)
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", srv.amqp_port, blocked_connection_timeout=None, socket_timeout=30,
        connection_attempts=1, **kw))


def pumping(conn: pika.BlockingConnection, work: Callable[[], T]) -> T:
    """``work()`` (a CLI call: seconds on a loaded machine) in a thread while pika's I/O
    runs here, so its heartbeats go out meanwhile as a real client's would."""
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(work)
        while not future.done():
            conn.process_data_events(0.1)
        return future.result()


def _hang_up(conn: pika.BlockingConnection, rst: bool) -> None:
    """Close pika's socket under it: a FIN (what it had to read read first) or a reset."""
    sock = conn._impl._transport._sock
    if rst:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    else:
        conn.process_data_events(0)
    sock.close()


def _publish_whole(conn: pika.BlockingConnection, ch: Any, queue: str, body: bytes) -> None:
    """basic.publish with its three frames in one TCP segment. pika writes them one
    by one, so on a loaded machine the server's read may hold only the method frame;
    during an alarm the connection then blocks inside the message, not after it."""
    sock = conn._impl._transport._sock
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
    try:
        ch.basic_publish("", queue, body)  # (flushed to the socket before it returns)
    finally:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)


def test_amqp_blocked_publishers_that_hang_up_are_released(
        hostile_server: Callable[..., ServerProcess]) -> None:
    """20 blocked pika publishers (one also a consumer with 5 unacked messages) hang up,
    half with a FIN, half with a reset: during the alarm their connections, channels and
    exclusive queues go, the unacked messages are back in their durable queue, and the
    per-source slots they held take new connections."""
    n = 20
    srv = hostile_server("--max-connections-per-source", str(n + 1))
    observer = _pika(srv)
    och = observer.channel()
    och.queue_declare("bd-kept", durable=True)
    och.confirm_delivery()
    for i in range(5):  # confirmed: on disk, must survive everything below
        och.basic_publish("", "bd-kept", f"kept-{i}".encode(),
                          pika.BasicProperties(delivery_mode=2))
    pubs: list[tuple[pika.BlockingConnection, Any, str]] = []
    for _ in range(n):
        conn = _pika(srv)
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", q, b"before")  # a publisher now
        pubs.append((conn, ch, q))
    unacked: list[bytes] = []
    pubs[0][1].basic_qos(prefetch_count=5)
    pubs[0][1].basic_consume("bd-kept", lambda _c, _m, _p, body: unacked.append(body))
    wait_for(lambda: pubs[0][0].process_data_events(0.05) or len(unacked) == 5,
             "5 deliveries")
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        _pika(srv)  # every per-source slot is taken
    assert server_status(srv)["connections"]["open"] == n + 1

    srv.cli(*ALARM_ON)
    for conn, ch, q in pubs:
        _publish_whole(conn, ch, q, b"held")  # waits for the alarm, unhandled
    wait_for(lambda: server_status(srv)["alarms"]["blocked_connections"] == n, "all blocked")
    for _conn, ch, q in pubs:
        ch.basic_publish("", q, b"unread")  # unread: the socket is not read any more
    time.sleep(0.3)
    assert all(queue_ready(srv).get(q) == 1 for _c, _ch, q in pubs)

    for i, (conn, _ch, _q) in enumerate(pubs):
        _hang_up(conn, rst=bool(i % 2))
    wait_for(lambda: server_status(srv)["connections"]["open"] == 1, "connections released")
    status = server_status(srv)
    assert status["alarms"]["blocked"] is True, "released during the alarm"
    assert status["alarms"]["blocked_hangups"] == n
    assert status["alarms"]["blocked_hangups_discarded"] == 0
    assert status["amqp"]["connections"] == 1 and status["amqp"]["channels"] == 1
    ready = queue_ready(srv)
    assert not [q for _c, _ch, q in pubs if q in ready], "exclusive queues deleted"
    kept = next(q for q in rows(srv, "queues") if q["name"] == "bd-kept")
    assert kept["ready"] == 5 and kept["unacked"] == 0, kept
    # The slots are free again, for new connections, while the alarm lasts.
    fresh = [_pika(srv) for _ in range(n)]
    for conn in fresh:
        conn.close()

    srv.cli(*ALARM_OFF)
    ch = observer.channel()
    bodies = []
    while (msg := ch.basic_get("bd-kept", auto_ack=True))[0] is not None:
        assert msg[0].redelivered
        bodies.append(msg[2])
    assert sorted(bodies) == [f"kept-{i}".encode() for i in range(5)]
    observer.close()


def test_amqp_blocked_healthy_connection_survives_missed_heartbeats(
        hostile_server: Callable[..., ServerProcess]) -> None:
    """A blocked client's heartbeats sit unread in the socket: it is not dropped for
    missing them (1 s heartbeats, blocked for 5 s), and goes on after the alarm."""
    srv = hostile_server()
    conn = _pika(srv, heartbeat=1)
    ch = conn.channel()
    ch.queue_declare("bd-hb")
    ch.basic_publish("", "bd-hb", b"before")

    def status() -> dict[str, Any]:
        return pumping(conn, lambda: server_status(srv))

    pumping(conn, lambda: srv.cli(*ALARM_ON))
    _publish_whole(conn, ch, "bd-hb", b"held")
    wait_for(lambda: status()["alarms"]["blocked_connections"] == 1, "blocked")
    ch.basic_publish("", "bd-hb", b"unread")
    end = time.monotonic() + 5
    while time.monotonic() < end:
        conn.process_data_events(0.2)  # pika sends its heartbeats (unread by the server)
    assert pumping(conn, lambda: queue_ready(srv)).get("bd-hb") == 1
    assert status()["amqp"]["connections_dropped"] == 0
    pumping(conn, lambda: srv.cli(*ALARM_OFF))
    wait_for(lambda: pumping(conn, lambda: queue_ready(srv)).get("bd-hb") == 3,
             "the held publishes handled after the alarm")
    assert status()["alarms"]["blocked_connections"] == 0
    ch.confirm_delivery()
    ch.basic_publish("", "bd-hb", b"after")  # confirmed: the connection is alive
    assert status()["alarms"]["blocked_hangups"] == 0
    conn.close()


# ----------------------------------------------------------------------- MQTT


def test_mqtt_blocked_clients_that_drop_publish_their_wills(
        hostile_server: Callable[..., ServerProcess]) -> None:
    """10 blocked paho clients with wills and persistent sessions drop their connections
    (no DISCONNECT) during the alarm: every will is published at once, as Mosquitto does
    when it notices a dropped connection, and the sessions go offline."""
    srv = hostile_server()
    sub = will_watcher(srv)
    pubs = []
    for i in range(10):
        c = Paho(srv.mqtt_port, f"bd-paho-{i}", f"bd/will/{i}")
        c.pump(c.publish(b"before").is_published)
        pubs.append(c)
    blocked = server_status(srv)["mqtt"]["blocked"]
    srv.cli(*ALARM_ON)
    # The burst after a publishing one is held unread (and so each next input).
    held = [c.publish(b"held") for c in pubs]
    wait_for(lambda: server_status(srv)["mqtt"]["blocked"] >= blocked + 10, "all blocked")
    for c in pubs:
        c.c.loop(0.02)
    assert not any(h.is_published() for h in held)
    assert server_status(srv)["mqtt"]["connections"] == 11
    for c in pubs:
        c.drop()
    wait_for(lambda: server_status(srv)["mqtt"]["connections"] == 1, "connections released")
    expected = {f"bd/will/{i}" for i in range(10)}
    assert set(wills(received(sub, lambda seen: set(wills(seen)) >= expected))) == expected
    sessions = {s["client"]: s for s in rows(srv, "sessions")}
    assert all(not sessions[f"bd-paho-{i}"]["connected"] for i in range(10))
    status = server_status(srv)
    assert status["alarms"]["blocked"] is True and status["alarms"]["blocked_hangups"] == 10
    srv.cli(*ALARM_OFF)
    sub.disconnect()


@pytest.mark.parametrize("disconnect", [True, False], ids=["DISCONNECT", "no-DISCONNECT"])
def test_mqtt_half_close_while_blocked(hostile_server: Callable[..., ServerProcess],
                                       disconnect: bool) -> None:
    """A blocked client shuts down its sending side (a FIN; it still reads): a FIN is the
    end of the connection (as RabbitMQ has it), but what it sent before - held unread -
    is handled first, in order: the held QoS 1 publish is delivered and PUBACKed to the
    half-closed client, a DISCONNECT among it discards the will (MQTT-3.14.4-3); then
    the server closes."""
    srv = hostile_server()
    sub = will_watcher(srv)
    srv.cli(*ALARM_ON)
    raw = RawMqtt(srv.mqtt_port or 0, "bd-half")
    block(srv, raw)
    if disconnect:
        raw.sock.sendall(DISCONNECT)
    raw.sock.shutdown(socket.SHUT_WR)
    raw.puback(2)  # the held publish, handled once the hang-up was seen
    assert raw.packet() == b"", "the server closes after the last input"
    wait_for(lambda: server_status(srv)["mqtt"]["connections"] == 1, "connection released")
    seen = received(sub, lambda seen: ("bd/data", b"held") in seen
                    and (disconnect or bool(wills(seen))), then=1.0)
    assert ("bd/data", b"held") in seen
    assert wills(seen) == ([] if disconnect else ["bd/will/bd-half"])
    status = server_status(srv)
    assert status["alarms"]["blocked"] is True and status["alarms"]["blocked_hangups"] == 1
    raw.sock.close()
    srv.cli(*ALARM_OFF)
    sub.disconnect()


def test_mqtt_hang_up_with_a_flood_unread_discards_it(
        hostile_server: Callable[..., ServerProcess]) -> None:
    """A blocked client that piles up more than one read (64 KiB) of publishes and hangs
    up cannot get them taken in during the alarm: they are discarded unacknowledged
    (counted), the connection ends as lost and the will goes out."""
    srv = hostile_server()
    sub = will_watcher(srv)
    srv.cli(*ALARM_ON)
    raw = RawMqtt(srv.mqtt_port or 0, "bd-flood")
    block(srv, raw)
    flood = b"".join(publish_packet("bd/flood", b"f" * 1000, qos=1, packet_id=3 + i)
                     for i in range(100))  # ~100 KB
    raw.sock.sendall(flood)
    deadline = time.monotonic() + 5
    while raw.outq():  # all of it in the server's receive buffer, so the FIN goes now
        if time.monotonic() > deadline:
            pytest.skip("this kernel's receive window holds less than 100 KB")
        time.sleep(0.05)
    raw.sock.close()
    wait_for(lambda: server_status(srv)["mqtt"]["connections"] == 1, "connection released")
    alarms = server_status(srv)["alarms"]
    assert alarms["blocked_hangups"] == 1 and alarms["blocked_hangups_discarded"] == 1
    assert alarms["blocked_discarded_bytes"] >= len(flood) - 2000, alarms
    seen = received(sub, lambda seen: bool(wills(seen)), then=1.0)
    assert [t for t, _p in seen if t != "bd/data" or _p != b"x"] == ["bd/will/bd-flood"]
    srv.cli(*ALARM_OFF)
    assert not [t for t, _p in got(sub, 0.5) if t == "bd/flood"]
    sub.disconnect()


def test_mqtt_blocked_healthy_client_survives_its_keepalive(
        hostile_server: Callable[..., ServerProcess]) -> None:
    """Keep-alive 1 s (closed after 1.5 s of silence): blocked for 4 s while its PINGREQs
    sit unread, the client is not dropped; after the alarm the held publish is PUBACKed
    and every PINGREQ answered."""
    srv = hostile_server()
    srv.cli(*ALARM_ON)
    blocked = server_status(srv)["mqtt"]["blocked"]
    raw = RawMqtt(srv.mqtt_port or 0, "bd-alive", keepalive=1)
    block(srv, raw, blocked)  # (the publish right after the CONNACK: no silence to time out)
    pinger = Pinger(raw)  # its PINGREQs go on until the end, unread while it is blocked
    time.sleep(4)
    raw.nothing_within(0.1)
    srv.cli(*ALARM_OFF)  # (seconds on a loaded machine: the pinger keeps the client alive)
    raw.puback(2)
    answered = 0
    while answered < pinger.sent - 1:  # catch up while it pings on
        assert raw.packet() == PINGRESP
        answered += 1
    for _ in range(pinger.stop() - answered):
        assert raw.packet() == PINGRESP
    raw.sock.sendall(PINGREQ)
    assert raw.packet() == PINGRESP
    assert server_status(srv)["alarms"]["blocked_hangups"] == 0
    raw.sock.sendall(DISCONNECT)
    raw.sock.close()


def test_mqtt_tls_blocked_client_drop(hostile_server: Callable[..., ServerProcess],
                                      tmp_path: Path) -> None:
    """The same over TLS: the watch uses the socket under the TLS stream."""
    pki = make_pki(tmp_path / "pki")
    srv = hostile_server(*pki.server_args())
    sub = will_watcher(srv)
    c = Paho(srv.mqtt_tls_port, "bd-tls", "bd/will/tls", ca_file=pki.ca_file)
    c.pump(c.publish(b"before").is_published)
    blocked = server_status(srv)["mqtt"]["blocked"]
    srv.cli(*ALARM_ON)
    held = c.publish(b"held")
    wait_for(lambda: server_status(srv)["mqtt"]["blocked"] > blocked, "blocked")
    c.c.loop(0.02)
    assert not held.is_published()
    c.drop()
    wait_for(lambda: server_status(srv)["mqtt"]["connections"] == 1, "connection released")
    assert wills(received(sub, lambda seen: bool(wills(seen)))) == ["bd/will/tls"]
    assert server_status(srv)["alarms"]["blocked"] is True
    srv.cli(*ALARM_OFF)
    sub.disconnect()


# ------------------------------------------------------- a peer that vanishes


_VANISHING_CLIENT = textwrap.dedent("""
    import socket, struct, sys, time
    sys.path.insert(0, sys.argv[3])
    from tests.hostile.test_blocked_disconnect import RawMqtt
    raw = RawMqtt(int(sys.argv[2]), "bd-vanish", host=sys.argv[1])
    raw.publish(2, b"held")
    print("held", flush=True)
    time.sleep(120)
""")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                    reason="needs root and iproute2 (a network namespace)")
def test_blocked_peer_that_vanishes_without_fin_is_dropped(
        hostile_server: Callable[..., ServerProcess], tmp_path: Path) -> None:
    """A blocked client behind a link that goes dead (no FIN, no reset ever arrives):
    the keep-alive probes of the block (here 1 s idle, 1 s apart, 2 probes) time the
    connection out and its will goes out, during the alarm."""
    ns, host_if, ns_if = f"oxbd{os.getpid() % 100000}", f"oxbd{os.getpid() % 100000}h", \
        f"oxbd{os.getpid() % 100000}n"
    net = 10 + os.getpid() % 200
    host_ip, ns_ip = f"10.251.{net}.1", f"10.251.{net}.2"
    try:
        _ip("netns", "add", ns)
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", ns)
        _ip("addr", "add", f"{host_ip}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("netns", "exec", ns, "ip", "addr", "add", f"{ns_ip}/30", "dev", ns_if)
        _ip("netns", "exec", ns, "ip", "link", "set", ns_if, "up")
    except (subprocess.CalledProcessError, OSError) as exc:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        pytest.skip(f"no network namespace here: {exc}")
    client = None
    try:
        srv = hostile_server("--bind", host_ip, "--amqp-port", "off", "--allow-anonymous",
                             "--blocked-keepalive", "1,1,2")
        srv.cli(*ALARM_ON)
        root = str(Path(__file__).resolve().parents[2])
        client = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-c", _VANISHING_CLIENT, host_ip,
             str(srv.mqtt_port), root], stdout=subprocess.PIPE, text=True)
        assert client.stdout is not None and client.stdout.readline().strip() == "held"
        wait_for(lambda: server_status(srv)["mqtt"]["blocked"] >= 1, "blocked")
        time.sleep(2)  # idle probes to a live peer are answered: still connected
        assert server_status(srv)["mqtt"]["connections"] == 1
        _ip("netns", "exec", ns, "ip", "link", "set", ns_if, "down")  # the link dies
        wait_for(lambda: server_status(srv)["mqtt"]["connections"] == 0,
                 "the dead peer dropped")
        status = server_status(srv)
        assert status["alarms"]["blocked"] is True
        assert status["alarms"]["blocked_hangups"] == 1 and status["mqtt"]["wills"] == 1
    finally:
        if client is not None:
            client.kill()
            client.wait(10)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


# ------------------------------------------- the first publish of a new connection


def test_new_connections_cannot_publish_past_an_alarm(
        hostile_server: Callable[..., ServerProcess]) -> None:
    """During a disk alarm a client that connects anew for every message gets none of
    them taken in: each connection's first publish waits for the alarm too (as RabbitMQ
    holds a publish during an alarm) - no PUBACK, no confirm, nothing queued - while a
    subscriber still connects and subscribes; once the alarm clears the held ones are
    taken in, acknowledged and delivered."""
    srv = hostile_server()
    setup = _pika(srv)
    setup.channel().queue_declare("bd-first", durable=True)
    srv.cli(*ALARM_ON)
    sub = Client(srv.mqtt_port, "bd-first-watcher")  # subscribers get in during the alarm
    sub.connect()
    sub.subscribe(("bd/first", 1))
    raws = []
    for i in range(10):  # MQTT: connect, PUBLISH QoS 1
        raw = RawMqtt(srv.mqtt_port or 0, f"bd-first-{i}")
        raw.publish(1, b"first", topic="bd/first")
        raws.append(raw)
    amqps = []
    for _ in range(5):  # AMQP: connect, a persistent publish in confirm mode
        c = AmqpRaw(srv.amqp_port or 0)
        c.handshake()
        c.open_channel(1)
        c.call(1, spec.ConfirmSelect(), spec.ConfirmSelectOk)
        c.send(amqp_codec.encode_content(1, spec.BasicPublish(exchange="", routing_key="bd-first"),
                                         b"\x10\x00\x02", b"first", 131072))
        amqps.append(c)
    wait_for(lambda: server_status(srv)["alarms"]["blocked_connections"] == 15, "all held")
    for raw in raws:
        raw.nothing_within(0.05)
    assert queue_ready(srv).get("bd-first") == 0
    assert not [m for m in got(sub, 0.2) if m[0] == "bd/first"]
    srv.cli(*ALARM_OFF)
    for raw in raws:
        raw.puback(1)
    for c in amqps:
        assert isinstance(c.recv_command().method, spec.BasicAck)  # type: ignore[union-attr]
    assert queue_ready(srv).get("bd-first") == 5
    seen = received(sub, lambda seen: sum(t == "bd/first" for t, _p in seen) >= 10)
    assert [m for m in seen if m[0] == "bd/first"] == [("bd/first", b"first")] * 10
    assert server_status(srv)["alarms"]["blocked_connections"] == 0
    for raw in raws:
        raw.sock.close()
    for c in amqps:
        c.sock.close()
    sub.disconnect()
    setup.close()
