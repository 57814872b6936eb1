"""Talk to a running server's admin socket (blocking; used by the CLI)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .protocol import AdminError, encode


class ServerNotRunning(ConnectionError):
    """No server answers on the data dir's admin socket."""


#: Seconds ``call`` waits for an answer unless told otherwise (``oxiedge --timeout``).
DEFAULT_TIMEOUT = 60.0


def call(socket_path: Path, op: str, args: dict[str, Any] | None = None,
         timeout: float | None = None) -> Any:
    """Send one request; return its result or raise ``AdminError`` / ``ServerNotRunning``
    (``TimeoutError`` after ``timeout`` seconds, default :data:`DEFAULT_TIMEOUT`)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(DEFAULT_TIMEOUT if timeout is None else timeout)
    try:
        try:
            sock.connect(str(socket_path))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise ServerNotRunning(str(socket_path)) from exc
        except PermissionError as exc:
            raise AdminError(
                f"permission denied on {socket_path}: run as the oxiedge user, root, or a member"
                " of the oxiedge group") from exc
        sock.sendall(encode({"op": op, "args": args or {}}))
        chunks = []
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        sock.close()
    data = b"".join(chunks)
    if not data:
        raise AdminError("the server closed the admin connection without answering")
    reply = json.loads(data)
    if not reply.get("ok"):
        raise AdminError(reply.get("error", "request failed"), reply.get("kind") or "")
    return reply.get("result")


def call_stream(socket_path: Path, op: str, args: dict[str, Any],
                on_event: Callable[[Any], None], timeout: float | None = None) -> Any:
    """A streaming request (``oxiedge sub``): ``on_event(event)`` for each event line as it
    arrives, then the final result (or ``AdminError``). ``timeout``: for the whole call
    (None: none). Closing the connection (``KeyboardInterrupt``) ends the operation."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            sock.connect(str(socket_path))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise ServerNotRunning(str(socket_path)) from exc
        except PermissionError as exc:
            raise AdminError(f"permission denied on {socket_path}") from exc
        sock.sendall(encode({"op": op, "args": args}))
        sock.settimeout(timeout)
        reader = sock.makefile("rb")
        for line in reader:
            reply = json.loads(line)
            if "event" in reply:
                on_event(reply["event"])
                continue
            if not reply.get("ok"):
                raise AdminError(reply.get("error", "request failed"), reply.get("kind") or "")
            return reply.get("result")
        raise AdminError("the server closed the admin connection without answering")
    finally:
        sock.close()
