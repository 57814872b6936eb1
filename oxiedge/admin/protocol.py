"""Wire format of the admin socket.

A client connects, sends one JSON object and a newline: ``{"op": "find", "args": {...}}``.
The server answers with one JSON line: ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": "message"}``, then closes. Requests are capped at 1 MiB.
"""

from __future__ import annotations

import json
from typing import Any

MAX_REQUEST = 1 << 20


class AdminError(RuntimeError):
    """The server refused an admin request; the message is meant for the operator."""


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
