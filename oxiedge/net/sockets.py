"""The kernel socket under a stream (``net.blocked``'s watch, ``tls.peer_name``, TCP options).

A ``trio.SocketStream`` holds its socket; a ``trio.SSLStream`` (TLS, ``oxiedge.tls``) wraps a
``SocketStream`` whose socket carries the encrypted records; any other stream (an in-memory
one in tests) has none. A stream on top of another names it ``transport_stream``, as
``trio.SSLStream`` does (a WebSocket stream, ``oxiedge.ws.stream``, over plain or TLS): the
socket is looked up under it.
"""

from __future__ import annotations

import socket

import trio


def transport_socket(stream: trio.abc.Stream) -> socket.socket | trio.socket.SocketType | None:
    """The TCP socket under a plain, TLS or WebSocket stream, or None."""
    inner: object = stream
    while (under := getattr(inner, "transport_stream", None)) is not None:
        inner = under
    sock = getattr(inner, "socket", None)
    # A trio.SocketStream's socket is a trio.socket.SocketType, not a socket.socket.
    return sock if isinstance(sock, (socket.socket, trio.socket.SocketType)) else None
