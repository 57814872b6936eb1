"""MQTT over WebSocket against a real server: paho over ws:// and wss://, the paths, exact
frames (a packet split over frames, several packets in one frame, text frames, an oversize
message, ping, the close handshake), bad upgrades, and QoS 1 across SIGKILL."""

from __future__ import annotations

import socket
from collections.abc import Callable

import paho.mqtt.client as mqtt
import pytest

from oxiedge.mqtt.codec import encode
from oxiedge.mqtt.packets import Connect, Publish, Subscribe
from tests.conftest import ServerProcess
from tests.http.conftest import raw_exchange
from tests.mqtt.conftest import Client
from tests.ws.conftest import RawWebSocket, upgrade_request

CONNACK_OK = b"\x20\x02\x00\x00"


class MqttOverRaw:
    """MQTT packets read from a RawWebSocket's binary frames, whatever their split."""

    def __init__(self, ws: RawWebSocket) -> None:
        self.ws = ws
        self.data = b""

    def packet(self) -> bytes:
        while True:
            if len(self.data) >= 2:
                n, mult, i = 0, 1, 1
                while i < len(self.data):
                    b = self.data[i]
                    n += (b & 0x7F) * mult
                    mult *= 128
                    i += 1
                    if not b & 0x80:
                        end = i + n
                        if len(self.data) >= end:
                            out, self.data = self.data[:end], self.data[end:]
                            return out
                        break
            self.data += self.ws.recv_mqtt()


@pytest.mark.parametrize("path", ["/mqtt", "/ws"])
def test_paho_over_ws_both_paths(ws_server: ServerProcess, ws_clients: Callable[..., Client],
                                 path: str) -> None:
    sub = ws_clients(ws_server.http_port, "ws-sub", path=path)
    sub.connect()
    assert sub.subscribe(("ws/#", 1)) == [1]
    pub = ws_clients(ws_server.http_port, "ws-pub", path=path)
    pub.connect()
    pub.publish("ws/a", b"hello", qos=1)
    pub.publish("ws/b", b"x" * 100_000, qos=0)  # several frames' worth on the wire
    got = sub.get_n(2)
    assert [(m.topic, len(m.payload), m.qos) for m in got] == [("ws/a", 5, 1),
                                                              ("ws/b", 100_000, 0)]
    st = ws_server.cli("status", "--json", check=True)
    assert '"websocket"' in st.stdout


def test_tcp_and_ws_clients_meet(ws_server: ServerProcess, ws_clients: Callable[..., Client],
                                 clients: Callable[..., Client]) -> None:
    tcp = clients(ws_server.mqtt_port, "tcp-sub")
    tcp.connect()
    tcp.subscribe(("mix/#", 1))
    ws = ws_clients(ws_server.http_port, "ws-pub2")
    ws.connect()
    ws.subscribe(("mix/back", 0))
    ws.publish("mix/there", b"from-ws", qos=1)
    assert tcp.get().payload == b"from-ws"
    tcp.publish("mix/back", b"from-tcp")
    assert ws.get().payload == b"from-tcp"


def test_paho_over_wss(ws_server: ServerProcess, ws_clients: Callable[..., Client]) -> None:
    sub = ws_clients(ws_server.http_tls_port, "wss-sub", tls=True)
    sub.connect()
    sub.subscribe(("wss/#", 1))
    pub = ws_clients(ws_server.http_tls_port, "wss-pub", tls=True, path="/ws")
    pub.connect()
    pub.publish("wss/t", b"secret", qos=1, retain=True)
    m = sub.get()
    assert (m.topic, m.payload, m.qos) == ("wss/t", b"secret", 1)
    late = ws_clients(ws_server.http_tls_port, "wss-late", tls=True)
    late.connect()
    late.subscribe(("wss/t", 0))
    assert late.get().retain


def test_packet_split_over_frames_and_packets_sharing_a_frame(ws_server: ServerProcess) -> None:
    ws = RawWebSocket(ws_server.http_port)
    mq = MqttOverRaw(ws)
    connect = encode(Connect("raw-ws", True, 60, None, None, None))
    # CONNECT in three frames of one fragmented message, then more in separate messages
    ws.send(2, connect[:3], fin=False)
    ws.send(0, connect[3:7], fin=False)
    ws.send(0, connect[7:], fin=True)
    assert mq.packet() == CONNACK_OK
    # SUBSCRIBE + two PUBLISHes + PINGREQ in one frame
    both = (encode(Subscribe(1, (("raw/#", 0),))) + encode(Publish("raw/x", b"1", 0, False,
            False, None)) + encode(Publish("raw/y", b"2", 0, False, False, None)) + b"\xc0\x00")
    ws.send_binary(both)
    # (deliveries go out before the burst's own replies, as over TCP)
    got = [mq.packet() for _ in range(4)]
    assert b"\x90\x03\x00\x01\x00" in got  # SUBACK
    assert [p[-6:] for p in got if p[0] == 0x30] == [b"raw/x1", b"raw/y2"]
    assert got[-1] == b"\xd0\x00"  # PINGRESP
    # a packet's header and body in two separate messages
    pub = encode(Publish("raw/z", b"zz", 0, False, False, None))
    ws.send_binary(pub[:1])
    ws.send_binary(pub[1:])
    assert mq.packet().endswith(b"raw/zzz")
    # a WebSocket ping is answered with its payload; then the close handshake
    ws.send(9, b"are-you-there")
    assert ws.recv_frame() == (10, b"are-you-there")
    ws.send(8, b"\x03\xe8")
    assert ws.close_code() == 1000
    assert ws.closed()


def test_text_frame_closes_with_1003(ws_server: ServerProcess) -> None:
    ws = RawWebSocket(ws_server.http_port)
    ws.send(1, b"hello")
    assert ws.close_code() == 1003
    assert ws.closed()


def test_oversize_message_closes_with_1009(start_server: Callable[..., ServerProcess]) -> None:
    srv = start_server("--http-port", "0", "--mqtt-max-packet-size", "1024")
    ws = RawWebSocket(srv.http_port)
    mq = MqttOverRaw(ws)
    ws.send_binary(encode(Connect("big-ws", True, 60, None, None, None)))
    assert mq.packet() == CONNACK_OK
    # a PUBLISH of 1003 bytes (under the MQTT bound) begun in one frame: 701 bytes so far
    ws.send(2, b"\x30\xe8\x07\x00\x01a" + b"p" * 695, fin=False)
    ws.send(0, b"p" * 400, fin=False)  # the message at 1101 bytes: over it
    assert ws.close_code() == 1009
    assert ws.closed()
    st = srv.cli("status", "--json", check=True)
    assert '"closed_message_too_big": 1' in st.stdout.replace('":1', '": 1')


def test_broker_close_sends_a_close_frame(ws_server: ServerProcess) -> None:
    """A DISCONNECT ends the connection: the server sends close 1000, then closes TCP."""
    ws = RawWebSocket(ws_server.http_port, path="/ws")
    mq = MqttOverRaw(ws)
    ws.send_binary(encode(Connect("bye-ws", True, 60, None, None, None)))
    assert mq.packet() == CONNACK_OK
    ws.send_binary(b"\xe0\x00")
    assert ws.close_code() == 1000
    assert ws.closed()


@pytest.mark.parametrize(("request_bytes", "status"), [
    (upgrade_request(protocol="chat"), 400),  # a subprotocol that is not MQTT
    (upgrade_request(key="short"), 400),  # Sec-WebSocket-Key is not 16 bytes
    (upgrade_request().replace(b"Version: 13", b"Version: 8"), 426),
    (b"GET /mqtt HTTP/1.1\r\nHost: localhost\r\n\r\n", 426),  # no Upgrade
    (upgrade_request().replace(b"GET", b"POST", 1).replace(
        b"\r\n\r\n", b"\r\nContent-Length: 0\r\n\r\n"), 400),
])
def test_bad_upgrades_are_refused(ws_server: ServerProcess, request_bytes: bytes,
                                  status: int) -> None:
    answer = raw_exchange(ws_server.http_port or 0, request_bytes)
    assert answer.startswith(b"HTTP/1.1 %d " % status), answer[:200]
    assert b"connection: close" in answer.lower()


def test_subprotocol_mqttv31_and_none_are_accepted(ws_server: ServerProcess) -> None:
    for protocol, echoed in (("mqttv3.1", b"sec-websocket-protocol: mqttv3.1"),
                             ("chat, mqtt", b"sec-websocket-protocol: mqtt"),
                             (None, None)):
        with socket.create_connection(("127.0.0.1", ws_server.http_port or 0), 10) as s:
            s.sendall(upgrade_request(protocol=protocol))
            head = s.recv(4096).lower()
            assert head.startswith(b"http/1.1 101"), head
            assert (echoed in head) if echoed else b"sec-websocket-protocol" not in head


def test_qos1_over_ws_survives_sigkill(ws_server: ServerProcess,
                                       ws_clients: Callable[..., Client]) -> None:
    sub = ws_clients(ws_server.http_port, "ws-durable", clean=False)
    sub.connect()
    sub.subscribe(("dur/#", 1))
    sub.disconnect()
    pub = ws_clients(ws_server.http_port, "ws-durable-pub")
    pub.connect()
    for i in range(20):
        pub.publish("dur/t", f"m{i}".encode(), qos=1)  # PUBACKed: durable
    ws_server.kill()
    ws_server.restart()
    again = ws_clients(ws_server.http_port, "ws-durable", clean=False)
    assert again.connect() is True
    got = again.get_n(20)
    assert [m.payload for m in got] == [f"m{i}".encode() for i in range(20)]


def test_connection_limits_count_websockets(start_server: Callable[..., ServerProcess]) -> None:
    """A WebSocket stays in the HTTP listener's connection guard: per-source bound applies."""
    srv = start_server("--http-port", "0", "--max-connections-per-source", "2")
    first = RawWebSocket(srv.http_port)
    second = RawWebSocket(srv.http_port)
    with socket.create_connection(("127.0.0.1", srv.http_port or 0), 10) as s:
        s.sendall(upgrade_request())
        try:
            answer = s.recv(4096)
        except ConnectionResetError:
            answer = b""  # closed before a byte was read: our request makes it a reset
        assert answer == b""
    first.close()
    second.close()


def test_mqtt5_over_ws(ws_server: ServerProcess, ws_clients: Callable[..., Client]) -> None:
    """The subprotocol is ``mqtt`` for MQTT 5 too: the CONNECT's level decides."""
    sub = ws_clients(ws_server.http_port, "ws5-sub", protocol=mqtt.MQTTv5, clean=None)
    sub.c.connect("127.0.0.1", ws_server.http_port or 0)
    sub.c.loop_start()
    assert sub.connack.get(timeout=10)[0] == 0
    sub.subscribe(("v5/#", 1))
    sub.publish("v5/t", b"five", qos=1)
    m = sub.get()
    assert (m.topic, m.payload, m.qos) == ("v5/t", b"five", 1)
