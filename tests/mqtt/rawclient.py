"""A blocking raw-socket MQTT client for black-box tests (exact bytes in, exact bytes out)."""

from __future__ import annotations

import socket
import time

from oxiedge.mqtt.codec import decode_all, encode
from oxiedge.mqtt.packets import (
    Connect,
    Packet,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Will,
)

TIMEOUT = 10.0


class RawClient:
    def __init__(self, port: int | None) -> None:
        assert port is not None, "server has no MQTT port"
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def connect(
        self,
        client_id: str,
        clean: bool = True,
        keepalive: int = 60,
        will: tuple[str, bytes, int] | None = None,
        expect: bytes | None = b"\x20\x02\x00\x00",
        username: str | None = None,
        password: bytes | None = None,
    ) -> bytes:
        w = Will(will[0], will[1], will[2], False) if will else None
        self.send(encode(Connect(client_id, clean, keepalive, username, password, w)))
        connack = self.recv_packet()
        if expect is not None:
            assert connack[:1] == b"\x20" and connack[3:] == expect[3:], connack
        return connack

    def _fill(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"waited for {n} bytes, have {len(self.buf)}")
            self.sock.settimeout(left)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed by the server")
            self.buf += chunk

    def recv_packet(self, timeout: float = TIMEOUT) -> bytes:
        """One complete packet (fixed header included)."""
        self._fill(2, timeout)
        i, length, shift = 1, 0, 0
        while True:
            self._fill(i + 1, timeout)
            b = self.buf[i]
            length |= (b & 0x7F) << shift
            i += 1
            if not b & 0x80:
                break
            shift += 7
        self._fill(i + length, timeout)
        packet, self.buf = self.buf[: i + length], self.buf[i + length :]
        return packet

    def closed(self, timeout: float = TIMEOUT) -> bool:
        """True once the server closed the connection (unread packets are skipped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                return True
            except TimeoutError:
                return False
            if not chunk:
                return True
        return False

    def close(self) -> None:
        self.sock.close()


def decode(packet: bytes) -> Packet:
    """Decode one complete packet with the codec (its own tests pin it to byte vectors)."""
    [p] = decode_all(packet)
    return p


class RawSession(RawClient):
    """RawClient with the QoS handshakes spelled out (each step explicit in the test)."""

    def next(self, timeout: float = TIMEOUT) -> Packet:
        return decode(self.recv_packet(timeout))

    def subscribe(self, pid: int, *filters: tuple[str, int]) -> tuple[int, ...]:
        self.send(encode(Subscribe(pid, tuple(filters))))
        ack = self.next()
        assert isinstance(ack, Suback) and ack.packet_id == pid, ack
        return ack.return_codes

    def publish(self, topic: str, payload: bytes, qos: int, pid: int | None = None,
                retain: bool = False, dup: bool = False) -> None:  # fmt: skip
        """Publish and complete the QoS flow (PUBACK, or PUBREC/PUBREL/PUBCOMP)."""
        self.send(encode(Publish(topic, payload, qos, retain, dup, pid if qos else None)))
        if qos == 1:
            assert self.next() == Puback(pid or 0)
        elif qos == 2:
            assert self.next() == Pubrec(pid or 0)
            self.send(encode(Pubrel(pid or 0)))
            assert self.next() == Pubcomp(pid or 0)

    def receive(self, ack: bool = True) -> Publish:
        """The next PUBLISH. With ``ack`` its QoS flow is answered: PUBACK, or PUBREC now
        and PUBCOMP when its PUBREL arrives (the server pipelines, so PUBRELs come
        interleaved with later PUBLISHes)."""
        while True:
            p = self.next()
            if isinstance(p, Pubrel):
                self.send(encode(Pubcomp(p.packet_id)))
                continue
            assert isinstance(p, Publish), p
            if ack and p.qos == 1:
                self.send(encode(Puback(p.packet_id or 0)))
            elif ack and p.qos == 2:
                self.send(encode(Pubrec(p.packet_id or 0)))
            return p

    def ping(self) -> None:
        """PINGREQ, answering PUBRELs, until PINGRESP; fails if a PUBLISH comes first
        (proves nothing else was pending)."""
        self.send(b"\xc0\x00")
        while True:
            p = self.next()
            if isinstance(p, Pubrel):
                self.send(encode(Pubcomp(p.packet_id)))
                continue
            assert p == Pingresp(), f"unexpected {p}"
            return

    def disconnect(self) -> None:
        self.send(b"\xe0\x00")
        assert self.closed()


def offline_subscriber(port: int, client_id: str, topic_filter: str, qos: int = 1) -> None:
    """A persistent session subscribed to ``topic_filter`` that went offline with a
    DISCONNECT: what matches from now on is queued for it (on disk)."""
    sub = RawSession(port)
    sub.connect(client_id, clean=False)
    sub.subscribe(1, (topic_filter, qos))
    sub.disconnect()
