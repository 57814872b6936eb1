"""Wire format of the admin socket.

A client connects, sends one JSON object and a newline: ``{"op": "find", "args": {...}}``.
The server answers with one JSON line: ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": "message", "kind": KIND}``, then closes (``kind``: one of
``oxiedge.operations.KINDS``, what sort of refusal it is). Requests are capped at 1 MiB.

A streaming operation (``oxiedge sub``) answers with any number of
``{"event": ...}`` lines before its final line.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from ..operations import BAD_REQUEST, UNAVAILABLE, OperationError

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


async def call_handler(handlers: Mapping[str, Callable[[dict[str, Any]], Any]], name: str,
                       args: dict[str, Any], off: str, named: bool = True) -> Any:
    """Run the handler ``name`` of an admin handler table (sync or async) for a caller that
    is not the admin socket (the HTTP API, the definitions import): a missing handler is
    ``UNAVAILABLE`` (``off`` says why), and the older handlers' refusals (``AdminError``,
    ``ValueError``, ``KeyError``, ``TypeError``) become ``BAD_REQUEST`` (their text after
    the handler's name when ``named``)."""
    handler = handlers.get(name)
    if handler is None:
        raise OperationError(f"{name}: {off}", UNAVAILABLE)
    try:
        result = handler(args)
        if inspect.isawaitable(result):
            result = await result
    except OperationError:
        raise
    except (AdminError, ValueError, KeyError, TypeError) as exc:
        raise OperationError(f"{name}: {exc}" if named else str(exc), BAD_REQUEST) from None
    return result
