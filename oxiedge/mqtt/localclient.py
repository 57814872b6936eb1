"""An MQTT client inside the server process: what ``oxiedge pub`` and ``oxiedge sub`` use
through the admin socket (no network listener needed).

Theory of operation
-------------------
``local_client`` opens a socket pair. One end is served by a real
:class:`~oxiedge.mqtt.connection.Connection`, exactly as if a client had connected to the
listener: the same protocol object, login (the local administrator, whom no permission rule
restricts, unless a user name and password are given), permissions, topic and packet bounds,
resource alarms and durability - a QoS 1 PUBLISH is acknowledged once it is on disk, so
``publish`` returns then. The other end is :class:`LocalClient`, a small MQTT 3.1.1 client
on the broker's own sans-IO codec.

Keep-alive is 0 (a subscriber may wait for hours without a deadline; the socket pair
cannot die silently). When the client's end closes, the connection ends as when a network
client hangs up: a clean session goes with it. When the broker ends the connection (a
protocol error, a refused login), the error names the broker's reason.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import trio

from oxiedge.access.grants import LOCAL_ADMIN
from oxiedge.mqtt.codec import Decoder, ProtocolError, encode
from oxiedge.mqtt.connection import Connection, ConnectionHost
from oxiedge.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
)

#: The peer name the connection logs (``MQTT admin-socket (client ...)``).
PEER = "admin-socket"
#: Largest packet this client accepts from the broker.
MAX_INBOUND_PACKET = 256 << 20
_CONNACK_REASONS = {1: "unacceptable protocol version", 2: "client identifier rejected",
                    3: "server unavailable (--mqtt-max-sessions reached)",
                    4: "bad user name or password", 5: "not authorized"}


class LocalClientError(Exception):
    """The broker refused or ended the local client's connection; the text says why."""


class LocalClient:
    """The client end of the socket pair (see the module docstring)."""

    def __init__(self, stream: trio.SocketStream, conn: Connection) -> None:
        self.stream = stream
        self.conn = conn
        self.decoder = Decoder(MAX_INBOUND_PACKET)
        self._next_id = 0
        #: PUBLISH / PUBREL packets that arrived while an acknowledgement was awaited (a
        #: resumed session's queued messages come before the SUBACK); ``receive`` hands
        #: them on first. At most the broker's in-flight window.
        self._held: list[Packet] = []

    def _packet_id(self) -> int:
        self._next_id = self._next_id % 65535 + 1
        return self._next_id

    async def send(self, packet: Packet) -> None:
        try:
            await self.stream.send_all(encode(packet))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise self.ended() from None

    def ended(self) -> LocalClientError:
        reason = self.conn.protocol.close_reason or "closed"
        return LocalClientError(f"the broker closed the connection: {reason}")

    async def read(self) -> Packet:
        """The next packet from the broker."""
        while True:
            try:
                packet = self.decoder.next_packet()
            except ProtocolError as exc:
                raise LocalClientError(f"bad packet from the broker: {exc}") from None
            if packet is not None:
                return packet
            try:
                data = await self.stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                raise self.ended()
            self.decoder.feed(data)

    async def _expect(self, kind: type[Packet], packet_id: int | None = None) -> Packet:
        """Read until a ``kind`` packet (with ``packet_id``) arrives; a message that
        arrives meanwhile is held for ``receive`` (neither acknowledged nor lost)."""
        while True:
            packet = await self.read()
            if isinstance(packet, kind) and (
                    packet_id is None or getattr(packet, "packet_id", None) == packet_id):
                return packet
            if isinstance(packet, (Publish, Pubrel)):
                self._held.append(packet)

    async def _acknowledge(self, p: Publish) -> None:
        if p.qos == 1 and p.packet_id is not None:
            await self.send(Puback(p.packet_id))
        elif p.qos == 2 and p.packet_id is not None:
            await self.send(Pubrec(p.packet_id))

    async def connect(self, client_id: str, clean: bool, username: str | None,
                      password: bytes | None) -> bool:
        """CONNECT; returns the session-present flag."""
        await self.send(Connect(client_id, clean, 0, username, password))
        ack = await self._expect(Connack)
        assert isinstance(ack, Connack)
        if ack.return_code:
            why = _CONNACK_REASONS.get(ack.return_code, f"code {ack.return_code}")
            raise LocalClientError(f"the broker refused the connection: {why}")
        return ack.session_present

    async def publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> None:
        """Publish; returns once the broker acknowledged it (QoS 1: PUBACK, QoS 2:
        PUBCOMP), i.e. once it is durable."""
        pid = self._packet_id() if qos else None
        await self.send(Publish(topic, payload, qos, retain, False, pid))
        if qos == 1 and pid is not None:
            await self._expect(Puback, pid)
        elif qos == 2 and pid is not None:
            await self._expect(Pubrec, pid)
            await self.send(Pubrel(pid))
            await self._expect(Pubcomp, pid)

    async def subscribe(self, filters: list[tuple[str, int]]) -> tuple[int, ...]:
        pid = self._packet_id()
        await self.send(Subscribe(pid, tuple(filters)))
        ack = await self._expect(Suback, pid)
        assert isinstance(ack, Suback)
        return ack.return_codes

    async def receive(self, deliver: Callable[[Publish], Awaitable[None]],
                      count: int | None = None) -> int:
        """Hand each message to ``deliver`` (then acknowledge it) until ``count`` were
        delivered (None: until cancelled); returns how many."""
        delivered = 0
        while count is None or delivered < count:
            packet = self._held.pop(0) if self._held else await self.read()
            if isinstance(packet, Publish):
                await deliver(packet)
                delivered += 1
                await self._acknowledge(packet)
            elif isinstance(packet, Pubrel):
                await self.send(Pubcomp(packet.packet_id))
        return delivered

    async def disconnect(self) -> None:
        await self.send(Disconnect())


@asynccontextmanager
async def local_client(host: ConnectionHost, client_id: str, *, clean: bool = True,
                       username: str | None = None, password: bytes | None = None
                       ) -> AsyncIterator[LocalClient]:
    """A connected :class:`LocalClient`; DISCONNECT at the end of the block (unless it was
    left by an error or a cancellation: then the socket just closes). An error of the
    block, or the broker ending the connection, is raised as it is (not in an exception
    group of the nursery that serves the connection)."""
    ours, theirs = trio.socket.socketpair()
    # Without a user name: the local administrator (``LOCAL_ADMIN``), taken as verified the
    # way a client certificate's name is (the admin socket is the credential).
    conn = Connection(host, trio.SocketStream(theirs), LOCAL_ADMIN if username is None else None,
                      PEER)
    stream = trio.SocketStream(ours)
    failure: Exception | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.serve)
        client = LocalClient(stream, conn)
        try:
            await client.connect(client_id, clean, username, password)
            try:
                yield client
            except Exception as exc:
                failure = exc
            else:
                await client.disconnect()
                await _drain(stream)  # the broker closes after DISCONNECT
                if conn.protocol.ended_by_broker:  # (it refused what was sent before)
                    failure = client.ended()
        except Exception as exc:
            failure = exc
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()
    if failure is not None:
        raise failure


async def _drain(stream: trio.SocketStream) -> None:
    with trio.move_on_after(5):
        try:
            while await stream.receive_some(65536):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
