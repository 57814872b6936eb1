"""One login attempt over a raw socket, from a chosen loopback source address, for the
hostile tests: ``mqtt_login`` returns the CONNACK return code, ``amqp_login`` 0 for
connection.tune (accepted) or the reply code of the connection.close (403 refused); both
return -1 when the server closed the connection without an answer."""

from __future__ import annotations

import socket
import time

from bench.mqttwire import connect_packet
from oxiedge.amqp import codec, spec
from oxiedge.amqp.codec import Command, FrameParser

TIMEOUT = 15.0


def open_from(port: int, source: str = "127.0.0.1", timeout: float = TIMEOUT) -> socket.socket:
    """A TCP connection to 127.0.0.1:port whose source address is ``source`` (any 127/8)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                    source_address=(source, 0))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return buf
        buf += chunk
    return buf


def mqtt_login(port: int, username: str | None, password: str | None,
               source: str = "127.0.0.1", client_id: str = "") -> int:
    try:
        with open_from(port, source) as sock:
            sock.sendall(connect_packet(client_id, keepalive=60, username=username,
                                        password=password))
            connack = _recv_exact(sock, 4)
    except (ConnectionResetError, BrokenPipeError):
        return -1
    if len(connack) < 4:
        return -1
    assert connack[0] == 0x20, connack.hex()
    return connack[3]


def amqp_login(port: int, username: str, password: str, source: str = "127.0.0.1") -> int:
    try:
        with open_from(port, source) as sock:
            sock.sendall(codec.PROTOCOL_HEADER)
            parser = FrameParser(0, expect_header=False)

            def command() -> Command | None:
                deadline = time.monotonic() + TIMEOUT
                while True:
                    ev = parser.next_event()
                    if isinstance(ev, Command):
                        return ev
                    if ev is not None:
                        continue
                    sock.settimeout(max(0.01, deadline - time.monotonic()))
                    data = sock.recv(65536)
                    if not data:
                        return None
                    parser.feed(data)

            start = command()
            assert start is not None and isinstance(start.method, spec.ConnectionStart)
            response = b"\x00" + username.encode() + b"\x00" + password.encode()
            sock.sendall(codec.encode_method(0, spec.ConnectionStartOk({}, "PLAIN", response)))
            reply = command()
    except (ConnectionResetError, BrokenPipeError):
        return -1
    if reply is None:
        return -1
    if isinstance(reply.method, spec.ConnectionTune):
        return 0
    assert isinstance(reply.method, spec.ConnectionClose), reply
    return int(reply.method.reply_code)
