"""Minimal AMQP 0-9-1 client framing and a raw blocking connection for load generation.

Only what the scenarios need: the connection handshake (PLAIN), one channel, confirm
mode, basic.qos/consume/publish/ack, and a frame scanner.  Publishes are pre-encoded
(method + content header + body frames are identical for every message), so the
generator's cost per message is a slice and a counter.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Iterator

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = b"\xce"

BASIC_ACK = (60, 80)
BASIC_NACK = (60, 120)
BASIC_DELIVER = (60, 60)
CONNECTION_CLOSE = (10, 50)
CHANNEL_CLOSE = (20, 40)

_FRAME_HDR = struct.Struct(">BHI")
_METHOD_IDS = struct.Struct(">HH")


def shortstr(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return bytes([len(b)]) + b


def longstr(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


EMPTY_TABLE = struct.pack(">I", 0)


def frame(ftype: int, channel: int, payload: bytes) -> bytes:
    """One frame (AMQP 0-9-1 section 4.2.3): type, channel, size, payload, 0xCE."""
    return _FRAME_HDR.pack(ftype, channel, len(payload)) + payload + FRAME_END


def method(channel: int, class_id: int, method_id: int, args: bytes = b"") -> bytes:
    return frame(FRAME_METHOD, channel, _METHOD_IDS.pack(class_id, method_id) + args)


def publish_frames(
    channel: int, exchange: str, routing_key: str, body: bytes, persistent: bool = True,
    expiration: str | None = None,
) -> bytes:
    """basic.publish + content header (+ delivery-mode 2 when persistent, + ``expiration``:
    a per-message TTL in ms) + one body frame."""
    m = method(channel, 60, 40, struct.pack(">H", 0) + shortstr(exchange) + shortstr(routing_key)
               + b"\x00")
    # Property flags: bit 12 is delivery-mode, bit 8 expiration (content-type is bit 15).
    flags = (0x1000 if persistent else 0) | (0x0100 if expiration is not None else 0)
    props = (struct.pack(">H", flags) + (b"\x02" if persistent else b"")
             + (b"" if expiration is None else shortstr(expiration)))
    header = frame(FRAME_HEADER, channel, struct.pack(">HHQ", 60, 0, len(body)) + props)
    return m + header + frame(FRAME_BODY, channel, body)


def ack_frame(channel: int, tag: int, multiple: bool = False) -> bytes:
    return method(channel, 60, 80, struct.pack(">QB", tag, 1 if multiple else 0))


class AmqpError(Exception):
    """The broker closed the channel or connection (reply code and text)."""


class RawAmqp:
    """A blocking AMQP connection with channel 1 open."""

    def __init__(
        self,
        host: str,
        port: int,
        user: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        timeout: float = 10.0,
    ) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.buf = bytearray()
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self.expect(10, 10)  # connection.start
        resp = b"\x00" + user.encode() + b"\x00" + password.encode()
        self.sock.sendall(method(0, 10, 11, EMPTY_TABLE + shortstr("PLAIN") + longstr(resp)
                                 + shortstr("en_US")))
        tune = self.expect(10, 30)
        channel_max, frame_max, _hb = struct.unpack_from(">HIH", tune)
        self.frame_max = frame_max or 131072
        # Heartbeat 0: a benchmark connection is never idle long enough to need one.
        self.sock.sendall(method(0, 10, 31, struct.pack(">HIH", channel_max, self.frame_max, 0)))
        self.sock.sendall(method(0, 10, 40, shortstr(vhost) + shortstr("") + b"\x00"))
        self.expect(10, 41)
        self.sock.sendall(method(1, 20, 10, shortstr("")))
        self.expect(20, 11)

    # -- frame reading -------------------------------------------------------------

    def fill(self, timeout: float) -> None:
        self.sock.settimeout(timeout)
        chunk = self.sock.recv(1 << 18)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        self.buf += chunk

    def frames(self) -> Iterator[tuple[int, int, bytes]]:
        """Yield every complete frame in the buffer and drop it afterwards."""
        buf = self.buf
        off = 0
        n = len(buf)
        try:
            while n - off >= 7:
                ftype, ch, size = _FRAME_HDR.unpack_from(buf, off)
                end = off + 7 + size
                if end + 1 > n:
                    break
                payload = bytes(buf[off + 7 : end])
                # Consume the frame before yielding: a caller that stops iterating (expect)
                # must not see it again, nor lose the frames after it.
                off = end + 1
                yield ftype, ch, payload
        finally:
            del buf[:off]

    def expect(self, class_id: int, method_id: int, timeout: float = 10.0) -> bytes:
        """Read until the given method arrives; returns its argument bytes."""
        deadline = time.monotonic() + timeout
        while True:
            for ftype, _ch, payload in self.frames():
                if ftype != FRAME_METHOD:
                    continue
                cm = _METHOD_IDS.unpack_from(payload)
                if cm == (class_id, method_id):
                    return payload[4:]
                if cm in (CONNECTION_CLOSE, CHANNEL_CLOSE):
                    raise AmqpError(describe_close(payload[4:]))
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no AMQP method {class_id}.{method_id} within {timeout:.1f}s")
            self.fill(left)

    # -- channel setup ----------------------------------------------------------------

    def confirm_select(self) -> None:
        self.sock.sendall(method(1, 85, 10, b"\x00"))
        self.expect(85, 11)

    def qos(self, prefetch: int) -> None:
        self.sock.sendall(method(1, 60, 10, struct.pack(">IHB", 0, prefetch, 0)))
        self.expect(60, 11)

    def consume(self, queue: str, tag: str = "bench", no_ack: bool = False,
                arguments: bytes = EMPTY_TABLE) -> None:
        """basic.consume; ``arguments`` an encoded field table."""
        bits = 0x02 if no_ack else 0
        self.sock.sendall(method(1, 60, 20, struct.pack(">H", 0) + shortstr(queue) + shortstr(tag)
                                 + bytes([bits]) + arguments))
        self.expect(60, 21)

    def close(self) -> None:
        try:
            self.sock.sendall(method(0, 10, 50, struct.pack(">H", 200) + shortstr("bye")
                                     + struct.pack(">HH", 0, 0)))
            with contextlib.suppress(TimeoutError, ConnectionError, AmqpError, OSError):
                self.expect(10, 51, timeout=2.0)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            self.sock.close()


def describe_close(args: bytes) -> str:
    code = struct.unpack_from(">H", args)[0]
    text = args[3 : 3 + args[2]].decode(errors="replace")
    return f"{code} {text}"


class ConfirmTracker:
    """Counts distinct confirmed delivery tags from basic.ack / basic.nack (multiple aware)."""

    def __init__(self) -> None:
        self.floor = 0  # every tag <= floor is settled
        self.singles: set[int] = set()
        self.acked = 0
        self.nacked = 0

    def settle(self, tag: int, multiple: bool, nack: bool) -> None:
        if multiple:
            if tag <= self.floor:
                return
            above = [s for s in self.singles if s <= tag]
            newly = tag - self.floor - len(above)
            for s in above:
                self.singles.discard(s)
            self.floor = tag
        else:
            if tag <= self.floor or tag in self.singles:
                return
            self.singles.add(tag)
            newly = 1
            while self.floor + 1 in self.singles:
                self.floor += 1
                self.singles.discard(self.floor)
        if nack:
            self.nacked += newly
        else:
            self.acked += newly

    @property
    def settled(self) -> int:
        return self.acked + self.nacked
