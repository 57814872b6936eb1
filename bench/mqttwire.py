"""Minimal MQTT 3.1.1 and MQTT 5 client-side packet encoding and a raw blocking socket
client (``level``: 4 is 3.1.1, 5 is MQTT 5; MQTT 5 packets carry an empty property block,
and a persistent session asks for a Session Expiry Interval of 0xFFFFFFFF).

This is the load generator's own code, independent of oxiedge's codec, so that the
benchmark measures any broker the same way.  Throughput scenarios pre-encode their
PUBLISH packets once and then only slice a buffer, so the Python cost per message on
the client side is a few hundred nanoseconds.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time

CONNACK = 0x20
PUBLISH = 0x30
PUBACK = 0x40
SUBACK = 0x90

PUBACK_LEN = 4  # 0x40 0x02 <packet id>


def remaining_length(n: int) -> bytes:
    """Encode the fixed-header Remaining Length (MQTT 2.2.3: 7 bits a byte)."""
    out = bytearray()
    while True:
        digit = n % 128
        n //= 128
        if n:
            digit |= 0x80
        out.append(digit)
        if not n:
            return bytes(out)


def _str(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack(">H", len(b)) + b


def connect_packet(
    client_id: str,
    clean: bool = True,
    keepalive: int = 0,
    username: str | None = None,
    password: str | None = None,
    level: int = 4,
) -> bytes:
    """CONNECT: protocol "MQTT" level 4 (3.1.1) or 5."""
    flags = 0x02 if clean else 0
    payload = _str(client_id)
    if username is not None:
        flags |= 0x80
        payload += _str(username)
        if password is not None:
            flags |= 0x40
            payload += _str(password)
    props = b""
    if level == 5:  # a persistent session must ask to outlive the connection (3.1.2.11.2)
        props = b"\x00" if clean else b"\x05\x11\xff\xff\xff\xff"
    body = (_str("MQTT") + bytes([level, flags]) + struct.pack(">H", keepalive) + props
            + payload)
    return bytes([0x10]) + remaining_length(len(body)) + body


def subscribe_packet(packet_id: int, topic: str, qos: int, level: int = 4) -> bytes:
    """SUBSCRIBE with one filter (MQTT-3.8.1-1: fixed header flags 0b0010)."""
    props = b"\x00" if level == 5 else b""
    body = struct.pack(">H", packet_id) + props + _str(topic) + bytes([qos])
    return bytes([0x82]) + remaining_length(len(body)) + body


def publish_packet(topic: str, payload: bytes, qos: int = 0, packet_id: int = 0,
                   level: int = 4) -> bytes:
    """PUBLISH; the packet id is present only for QoS > 0 (MQTT 3.3.2.2)."""
    body = _str(topic)
    if qos:
        body += struct.pack(">H", packet_id)
    if level == 5:
        body += b"\x00"  # no properties
    body += payload
    return bytes([0x30 | (qos << 1)]) + remaining_length(len(body)) + body


def puback_packet(packet_id: int) -> bytes:
    return struct.pack(">BBH", 0x40, 2, packet_id)


DISCONNECT = b"\xe0\x00"


def qos1_ring(topic: str, payload: bytes, level: int = 4) -> tuple[bytes, int]:
    """All 65535 QoS 1 PUBLISH packets (ids 1..65535) back to back, and one packet's size.

    Every packet has the same length, so packet ``i`` (0-based, id ``i + 1``) starts at
    ``i * size``; a pipelined sender slices this buffer instead of encoding.
    """
    first = publish_packet(topic, payload, 1, 1, level)
    size = len(first)
    tail = (b"\x00" if level == 5 else b"") + payload
    head = first[: size - len(tail) - 2]
    parts = [head + struct.pack(">H", pid) + tail for pid in range(1, 65536)]
    return b"".join(parts), size



class RingSender:
    """Sends the next ``k`` packets of a pre-encoded ring (``qos1_ring``: ``slots`` packets
    of ``size`` bytes, packet ids 1..slots) on ``sock``, wrapping around; ``sent`` counts
    every packet sent."""

    def __init__(self, sock: socket.socket, ring: bytes, size: int,
                 slots: int = 65535) -> None:
        self.sock, self.view, self.size, self.slots = sock, memoryview(ring), size, slots
        self.sent = 0

    def send(self, k: int) -> None:
        size = self.size
        while k:
            start = self.sent % self.slots
            take = min(k, self.slots - start)
            self.sock.sendall(self.view[start * size : (start + take) * size])
            self.sent += take
            k -= take

    def release(self) -> None:
        self.view.release()

def count_packets(pending: bytearray) -> int:
    """Whole packets of under 130 bytes at the start of ``pending`` (MQTT 5 PUBACKs: 4
    bytes, or more with a reason code); removes them, leaves a partial one."""
    end = len(pending)
    whole = end - end % 4
    n = whole // 4
    if n and pending.count(b"\x40\x02", 0, whole) == n and pending[1:whole:4].count(2) == n:
        del pending[:whole]  # (all short-form PUBACKs, the common case: counted in C)
        if end == whole:
            return n
        return n + count_packets(pending)
    i = n = 0
    while i + 2 <= end:
        nxt = i + 2 + pending[i + 1]
        if nxt > end:
            break
        i = nxt
        n += 1
    del pending[:i]
    return n


class RawMqtt:
    """A blocking MQTT connection on a plain socket (TCP_NODELAY)."""

    def __init__(self, host: str, port: int, timeout: float = 10.0, level: int = 4) -> None:
        self.level = level
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.buf = bytearray()

    def read_packet(self, timeout: float = 10.0) -> tuple[int, bytes]:
        """Read one whole packet: (first byte, body)."""
        deadline = time.monotonic() + timeout
        while True:
            parsed = self._parse_one()
            if parsed is not None:
                return parsed
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no MQTT packet within {timeout:.1f}s")
            self.sock.settimeout(left)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            self.buf += chunk

    def _parse_one(self) -> tuple[int, bytes] | None:
        buf = self.buf
        if len(buf) < 2:
            return None
        mult, length, i = 1, 0, 1
        while True:
            if i >= len(buf):
                return None
            d = buf[i]
            length += (d & 0x7F) * mult
            mult *= 128
            i += 1
            if not d & 0x80:
                break
        if len(buf) < i + length:
            return None
        first = buf[0]
        body = bytes(buf[i : i + length])
        del buf[: i + length]
        return first, body

    def connect(
        self,
        client_id: str,
        clean: bool = True,
        username: str | None = None,
        password: str | None = None,
    ) -> bool:
        """CONNECT and wait for CONNACK; returns the session-present flag."""
        self.sock.sendall(connect_packet(client_id, clean, 0, username, password, self.level))
        first, body = self.read_packet()
        if first & 0xF0 != CONNACK or len(body) < 2 or (len(body) > 2) != (self.level == 5):
            raise ConnectionError(f"expected CONNACK, got 0x{first:02x}")
        if body[1] != 0:
            raise ConnectionError(f"CONNACK refused, return code {body[1]}")
        return bool(body[0] & 1)

    def subscribe(self, topic: str, qos: int, packet_id: int = 1) -> None:
        self.sock.sendall(subscribe_packet(packet_id, topic, qos, self.level))
        while True:
            first, body = self.read_packet()
            if first & 0xF0 == SUBACK:
                code = body[2 + (1 + body[2] if self.level == 5 else 0)]
                if code >= 0x80:
                    raise ConnectionError(f"SUBACK refused {topic}")
                return

    def disconnect(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(DISCONNECT)
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
