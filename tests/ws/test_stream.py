"""``oxiedge.ws.stream.WebSocketStream`` on trio's in-memory streams, with wsproto's client
side as the peer: frames in, MQTT bytes out, and the control frames it answers."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing
from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, Pong, TextMessage

from oxiedge.net.sockets import transport_socket
from oxiedge.ws.stream import WebSocketStream


def pair(max_message: int = 1000) -> tuple[WebSocketStream, trio.abc.Stream, Connection]:
    ours, theirs = trio.testing.memory_stream_pair()
    counters: dict[str, int] = {}
    return (WebSocketStream(ours, max_message=max_message, counters=counters), theirs,
            Connection(ConnectionType.CLIENT))


async def events_from(stream: trio.abc.Stream, client: Connection) -> list[object]:
    client.receive_data(await stream.receive_some(65536))
    return list(client.events())


async def test_payloads_of_binary_frames_are_one_byte_stream() -> None:
    ws, peer, client = pair()
    await peer.send_all(client.send(BytesMessage(b"\x10\x02", message_finished=False))
                        + client.send(BytesMessage(b"ab", message_finished=True))
                        + client.send(BytesMessage(b"cd")))
    got = b""
    while len(got) < 6:
        got += await ws.receive_some(65536)
    assert got == b"\x10\x02abcd"


async def test_a_ping_is_answered_and_a_pong_ignored() -> None:
    ws, peer, client = pair()
    await peer.send_all(client.send(Ping(b"hi")) + client.send(Pong(b"x"))
                        + client.send(BytesMessage(b"z")))
    assert await ws.receive_some(65536) == b"z"
    assert await events_from(peer, client) == [Pong(b"hi")]


async def test_text_frame_closes_with_1003() -> None:
    ws, peer, client = pair()
    await peer.send_all(client.send(TextMessage("hello")))
    with pytest.raises(trio.BrokenResourceError, match="1003"):
        await ws.receive_some(65536)
    [event] = await events_from(peer, client)
    assert isinstance(event, CloseConnection) and event.code == 1003
    assert ws.counters == {"closed_text_frame": 1}


async def test_message_over_the_bound_closes_with_1009() -> None:
    ws, peer, client = pair(max_message=10)
    await peer.send_all(client.send(BytesMessage(b"x" * 8, message_finished=False)))
    assert await ws.receive_some(65536) == b"x" * 8
    await peer.send_all(client.send(BytesMessage(b"y" * 3, message_finished=True)))
    with pytest.raises(trio.BrokenResourceError, match="1009"):
        await ws.receive_some(65536)
    [event] = await events_from(peer, client)
    assert isinstance(event, CloseConnection) and event.code == 1009


async def test_peer_close_is_answered_and_ends_input() -> None:
    ws, peer, client = pair()
    await peer.send_all(client.send(CloseConnection(1000)))
    assert await ws.receive_some(65536) == b""
    [event] = await events_from(peer, client)
    assert isinstance(event, CloseConnection) and event.code == 1000


async def test_output_is_framed_and_aclose_sends_1000() -> None:
    ws, peer, client = pair()
    await ws.send_all(ws.frame(b"\x20\x02\x00\x00"))
    assert await events_from(peer, client) == [BytesMessage(b"\x20\x02\x00\x00", True, True)]
    await ws.aclose()
    [event] = await events_from(peer, client)
    assert isinstance(event, CloseConnection) and event.code == 1000
    assert ws.frame(b"late") == b""  # nothing is framed after the close


async def test_the_socket_is_found_under_a_websocket() -> None:
    """The blocked-connection watch and the peer's address look under the WebSocket."""
    a, b = socket.socketpair()
    with a, b:
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(a))
        ws = WebSocketStream(stream, max_message=10)
        assert transport_socket(ws) is stream.socket
