"""A connection's output (``oxiedge.net.output.Output``) on its own: order, the count of
bytes not yet sent, and the framing hook every byte to the client passes (where WebSocket
framing goes), over a real socket pair and trio's in-memory streams."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import trio
import trio.testing

from oxiedge.net.actions import StreamProtocol
from oxiedge.net.output import Output
from tests.net.test_loop import read_until, stream_pair


class Listener:
    """What the output tells its protocol."""

    def __init__(self) -> None:
        self.sent = 0
        self.lost: list[str] = []

    def on_sent(self) -> bool:
        self.sent += 1
        return False

    def connection_lost(self, reason: str) -> None:
        self.lost.append(reason)


def _output(stream: trio.abc.Stream, frame: Callable[[bytes], bytes] | None = None
            ) -> tuple[Output, Listener, list[str]]:
    ended: list[str] = []
    sock = getattr(stream, "socket", None)
    fd = sock.fileno() if sock is not None else -1
    out = Output(stream, fd, pause_at=1 << 20, kick=lambda: None,
                 end=lambda: ended.append("end"), frame=frame)
    listener = Listener()
    out.protocol = cast(StreamProtocol, listener)
    return out, listener, ended


async def test_plain_socket_sends_directly_in_order() -> None:
    client, server = stream_pair("socket")
    out, listener, _ = _output(server)
    out.send_now(b"one ")  # nothing buffered or in transit: a direct write
    assert out.writes == 1 and out.out_bytes == 0
    out.write(b"two ")  # (outside a burst: for the writer)
    out.write(b"three\n")
    assert out.out_bytes == 10 and out.busy
    async with trio.open_nursery() as nursery:
        nursery.start_soon(out.run_writer)
        assert await read_until(client, b"three\n") == b"one two three\n"
        await trio.testing.wait_all_tasks_blocked()
        assert out.out_bytes == 0 and not out.busy and listener.sent == 1
        out.finish()


async def test_a_frame_hook_frames_every_send_once() -> None:
    # A framed output never writes to the descriptor itself (half a frame could be left
    # behind): every byte goes through send_all, each send framed once, as a whole.
    client, server = stream_pair("socket")
    out, _, _ = _output(server, frame=lambda data: b"<" + data + b">")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(out.run_writer)
        out.send_now(b"reply")  # not direct: to the writer
        out.write(b"+more")  # coalesced with it into one send
        assert await read_until(client, b">") == b"<reply+more>"
        await trio.testing.wait_all_tasks_blocked()
        assert not out.busy  # (the reader sends directly only then)
        await out.send_direct(b"small")
        assert await read_until(client, b">") == b"<small>"
        await trio.testing.wait_all_tasks_blocked()
        assert out.out_bytes == 0  # (counted in the protocols' bytes, unframed)
        out.finish()


async def test_abort_drops_unsent_bytes_and_ends_the_connection() -> None:
    _client, server = stream_pair("memory")
    out, _, ended = _output(server)
    out.write(b"never sent")
    out.abort()
    assert ended == ["end"] and not out.busy
    out.send_now(b"nor this")  # (no direct write after an abort: buffered, never sent)


async def test_a_peer_gone_ends_the_connection() -> None:
    client, server = stream_pair("socket")
    out, listener, ended = _output(server)
    await client.aclose()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(out.run_writer)
        out.write(b"x" * (1 << 20))  # more than the socket buffers: the send fails
    assert ended == ["end"] and listener.lost
