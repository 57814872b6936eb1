"""Wire format of the admin socket.

A client connects, sends one JSON object and a newline: ``{"op": "find", "args": {...}}``.
The server answers with one JSON line: ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": "message", "kind": KIND}``, then closes (``kind``: one of
``oxiedge.operations.KINDS``, what sort of refusal it is). Requests are capped at 1 MiB.

A streaming operation (``oxiedge sub``) answers with any number of
``{"event": ...}`` lines before its final line.
"""

from __future__ import annotations

import json
from typing import Any

MAX_REQUEST = 1 << 20


class AdminError(RuntimeError):
    """The server refused an admin request; the message is meant for the operator,
    ``kind`` says what sort of refusal (``oxiedge.operations.KINDS``; "" if not known)."""

    def __init__(self, message: str, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


def encode(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), default=str).encode() + b"\n"


def decode_request(line: bytes) -> tuple[str, dict[str, Any]]:
    try:
        req = json.loads(line)
    except ValueError as exc:
        raise AdminError(f"bad request: {exc}") from None
    if not isinstance(req, dict) or not isinstance(req.get("op"), str):
        raise AdminError("bad request: expected {\"op\": NAME, \"args\": {...}}")
    args = req.get("args") or {}
    if not isinstance(args, dict):
        raise AdminError("bad request: args must be an object")
    return req["op"], args
