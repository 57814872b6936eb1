"""A WebSocket (RFC 6455) as a ``trio.abc.Stream`` of MQTT bytes, for the transport loop.

Theory of operation
-------------------
After the ``101`` (``handshake.py``) the MQTT connection runs on ``net.loop.Transport``
exactly as over TCP; this stream sits between that loop and the HTTP listener's stream
(plain or TLS) and is the only place that knows about frames:

* **In** (``receive_some``): wsproto (sans-IO) turns wire bytes into events. The payload of
  binary messages is handed to the MQTT protocol as one byte stream: MQTT-6.0.0-2, a packet
  may span frames and messages and one frame may hold several packets - the MQTT decoder
  already reassembles packets from any split. wsproto delivers a data frame's payload as it
  arrives, so nothing here buffers a whole frame.
* **Out**: the transport's output side (``net.output.Output``) frames every send itself
  with the hook :meth:`WebSocketStream.frame` (one binary frame per coalesced send, server
  frames are not masked) and hands the framed bytes to :meth:`send_all`, which writes them
  as they are. Control frames (pong, close) go the same way, under one lock, so a pong never
  lands in the middle of a delivery's frame.
* **Rules and bounds.** A text frame closes with 1003 (MQTT-6.0.0-1: binary only); a message
  larger than ``max_message`` (the MQTT packet limit, ``--mqtt-max-packet-size``) closes with
  1009 as soon as its size is known; bad framing (an unmasked client frame, a bad opcode,
  a fragmented control frame) closes with wsproto's code (1002). Each is counted
  (``oxiedge status`` -> ``websocket``). Such a close ends the MQTT connection as lost
  (``trio.BrokenResourceError``: its will is published, as for a dropped TCP connection).
* **Ping/pong**: a ping is answered at once with its payload; a pong is ignored.
* **Close handshake**: the peer's close frame is answered with the same code and reads
  end (MQTT sees end-of-stream). When the broker ends the connection (``aclose``: a
  DISCONNECT read, a protocol error, the keep-alive, a take-over) it sends a close frame
  (1000) - shielded and bounded by ``CLOSE_TIMEOUT``, because the transport closes streams
  forcefully - then closes the underlying stream; the server closes TCP first (RFC 6455 7.1.1).

The stream keeps the one below as ``transport_stream`` (as ``trio.SSLStream`` does), so the
socket under it - for the peer's address and the blocked-connection watch - is found the
same way for TCP, TLS and WebSocket (``net.sockets.transport_socket``).
"""

from __future__ import annotations

import trio
from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage

RECEIVE_SIZE = 65536
#: Seconds the closing frame may take to leave when the broker ends a connection.
CLOSE_TIMEOUT = 1.0
#: RFC 6455 7.4.1 status codes we send.
NORMAL, UNSUPPORTED_DATA, MESSAGE_TOO_BIG = 1000, 1003, 1009

_LOST = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class WebSocketStream(trio.abc.Stream):
    """MQTT bytes over one server-side WebSocket (see the module docstring).

    ``trailing``: bytes read after the upgrade request (the client may send its first
    frames without waiting for the ``101``); ``counters``: the endpoint's, updated here."""

    def __init__(self, transport_stream: trio.abc.Stream, *, max_message: int,
                 trailing: bytes = b"", counters: dict[str, int] | None = None) -> None:
        self.transport_stream = transport_stream
        self.max_message = max_message
        self.counters = counters if counters is not None else {}
        self._ws = Connection(ConnectionType.SERVER, trailing_data=trailing)
        self._send_lock = trio.Lock()
        self._pending = bytearray()  # de-framed MQTT bytes not yet taken by the reader
        self._message = 0  # bytes of the binary message being received so far
        self._eof = False  # no more input: the peer closed, or we did

    # ---------------------------------------------------------------- output
    def frame(self, data: bytes) -> bytes:
        """The output side's hook: one binary frame around ``data``. After a close frame
        was sent or received nothing more is framed (the bytes are dropped: the
        connection is ending)."""
        ws = self._ws
        if ws.state is not ConnectionState.OPEN:
            return b""
        return ws.send(BytesMessage(data=data))

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Write framed bytes (from :meth:`frame` or a control frame) as they are."""
        if data:
            async with self._send_lock:
                await self.transport_stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    # ---------------------------------------------------------------- input
    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The next MQTT bytes (``b""``: the WebSocket was closed by the peer)."""
        pending = self._pending
        while not pending:
            if self._eof:
                return b""
            await self._fill()
        if max_bytes is None or max_bytes >= len(pending):
            out = bytes(pending)
            pending.clear()
        else:
            out = bytes(pending[:max_bytes])
            del pending[:max_bytes]
        return out

    async def _fill(self) -> None:
        """Handle what wsproto has, then (if that gave no MQTT bytes) one read."""
        await self._handle_events()
        if self._pending or self._eof:
            return
        data = await self.transport_stream.receive_some(RECEIVE_SIZE)
        self._ws.receive_data(bytes(data) if data else None)  # None: 1006, abnormal close
        await self._handle_events()

    async def _handle_events(self) -> None:
        ws, counters = self._ws, self.counters
        for event in ws.events():
            if isinstance(event, BytesMessage):
                size = self._message + len(event.data)
                if size > self.max_message:
                    _count(counters, "closed_message_too_big")
                    await self._fail(MESSAGE_TOO_BIG,
                                     f"message over {self.max_message} bytes")
                self._message = 0 if event.message_finished else size
                self._pending += event.data
            elif isinstance(event, Ping):
                _count(counters, "pings")
                await self._send_control(ws.send(event.response()))
            elif isinstance(event, TextMessage):
                _count(counters, "closed_text_frame")
                await self._fail(UNSUPPORTED_DATA, "MQTT is carried in binary frames only")
            elif isinstance(event, CloseConnection):
                state = ws.state
                if state is ConnectionState.REMOTE_CLOSING:  # the peer's close: answer it
                    _count(counters, "closed_by_peer")
                    self._eof = True
                    await self._send_control(ws.send(event.response()))
                elif state is ConnectionState.OPEN:  # bad framing found by wsproto
                    _count(counters, "closed_protocol_error")
                    await self._fail(event.code, event.reason or "bad framing")
                else:  # our close answered, or the TCP connection ended (1006)
                    self._eof = True
                return
            # (a Pong: nothing to do)

    async def _send_control(self, data: bytes) -> None:
        try:
            await self.send_all(data)
        except _LOST:
            self._eof = True

    async def _fail(self, code: int, reason: str) -> None:
        """Close with ``code`` and end the MQTT connection as lost."""
        self._eof = True
        self._pending.clear()
        if self._ws.state is ConnectionState.OPEN:
            await self._send_control(self._ws.send(CloseConnection(code=code,
                                                                   reason=reason[:100])))
        raise trio.BrokenResourceError(f"WebSocket closed with {code}: {reason}")

    # ---------------------------------------------------------------- close
    async def aclose(self) -> None:
        """Send a close frame (1000) if none was sent, then close the stream below."""
        try:
            if self._ws.state is ConnectionState.OPEN:
                data = self._ws.send(CloseConnection(code=NORMAL))
                with trio.CancelScope(shield=True, deadline=trio.current_time() + CLOSE_TIMEOUT):
                    try:
                        await self.send_all(data)
                    except (*_LOST, trio.BusyResourceError):
                        pass
        finally:
            await self.transport_stream.aclose()


def _count(counters: dict[str, int], key: str) -> None:
    counters[key] = counters.get(key, 0) + 1
