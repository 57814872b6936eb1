"""The kernel socket under a stream (``net.blocked``'s watch, ``tls.peer_name``, TCP options).

A ``trio.SocketStream`` holds its socket; a ``trio.SSLStream`` (TLS, ``oxiedge.tls``) wraps a
``SocketStream`` whose socket carries the encrypted records; any other stream (an in-memory
one in tests, a WebSocket stream later) may have none.
"""

from __future__ import annotations

import socket

import trio


def transport_socket(stream: trio.abc.Stream) -> socket.socket | trio.socket.SocketType | None:
    """The TCP socket under a plain or a TLS stream, or None."""
    inner = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    sock = getattr(inner, "socket", None)
    # A trio.SocketStream's socket is a trio.socket.SocketType, not a socket.socket.
    return sock if isinstance(sock, (socket.socket, trio.socket.SocketType)) else None
