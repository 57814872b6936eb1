"""Operator operations: the one definition the admin socket, the CLI and the HTTP API share.

Theory of operation
-------------------
Each thing an operator may do to a running server (declare a queue, close a connection,
delete an MQTT session...) is written once, as a typed method of the broker's operations
object (``amqp/operations.py``, ``mqtt/operations.py``) that returns typed result rows
(frozen dataclasses). It goes through the broker's own code paths (a queue declared here
gets the same checks and durable record as a client's ``queue.declare``) and returns once
what it changed is durable.

:class:`Operation` names such a method for the request tables: a name (``queue.declare``),
one line of help, and an adapter that reads the request's JSON arguments with
:class:`Args` (a missing or mistyped field is a ``bad_request`` naming it). The admin
socket's handler table is built from them (``Operation.handler``); the HTTP API may call
the typed methods directly or go through the same table. Nothing here knows of typer,
rich or HTTP: a refusal is an :class:`OperationError` whose ``kind`` each front end maps
to its own answer (an exit code, a status code). ``docs/operations.md`` lists the table.

A leaf module: it imports nothing of the project, so the brokers' operation modules and
the front ends import it without importing each other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

#: The kinds of refusal (``OperationError.kind``) and what each front end makes of them.
BAD_REQUEST = "bad_request"  # malformed or missing arguments (CLI exit 2, HTTP 400)
NOT_FOUND = "not_found"  # the named object does not exist (CLI exit 1, HTTP 404)
REFUSED = "refused"  # a precondition or a bound refused it (CLI exit 1, HTTP 400/406)
FORBIDDEN = "forbidden"  # reserved names, permissions (CLI exit 1, HTTP 403)
UNAVAILABLE = "unavailable"  # that part of the server is off (CLI exit 1, HTTP 503)
KINDS = (BAD_REQUEST, NOT_FOUND, REFUSED, FORBIDDEN, UNAVAILABLE)


class OperationError(Exception):
    """An operation refused; ``str(exc)`` is meant for the operator, ``kind`` is one of
    :data:`KINDS`."""

    def __init__(self, message: str, kind: str = REFUSED) -> None:
        super().__init__(message)
        self.kind = kind


def jsonable(value: Any) -> Any:
    """Result rows (dataclasses), lists and dicts of them as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return value


class Args:
    """The JSON arguments of one request, read field by field with their types."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw

    def _get(self, key: str, kinds: type | tuple[type, ...], what: str, default: Any,
             required: bool) -> Any:
        value = self.raw.get(key)
        if value is None:
            if required:
                raise OperationError(f"missing argument {key!r}", BAD_REQUEST)
            return default
        # (bool is an int in Python: an int field refuses it explicitly)
        if not isinstance(value, kinds) or (kinds is int and isinstance(value, bool)):
            raise OperationError(f"argument {key!r} must be {what}, not {value!r}",
                                 BAD_REQUEST)
        return value

    def text(self, key: str, default: str | None = None, *, required: bool = False,
             empty: bool = True) -> str:
        value: str = self._get(key, str, "a string", default, required or default is None)
        if not empty and not value:
            raise OperationError(f"argument {key!r} must not be empty", BAD_REQUEST)
        return value

    def optional_text(self, key: str) -> str | None:
        value: str | None = self._get(key, str, "a string", None, False)
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        value: bool = self._get(key, bool, "true or false", default, False)
        return value

    def number(self, key: str, default: float | None = None, *, low: float = 0) -> float | None:
        value: float | None = self._get(key, (int, float), "a number", default, False)
        if value is not None and (isinstance(value, bool) or value < low):
            raise OperationError(f"argument {key!r} must be a number >= {low:g}", BAD_REQUEST)
        return value

    def integer(self, key: str, default: int, *, low: int = 0, high: int | None = None) -> int:
        value: int = self._get(key, int, "an integer", default, False)
        if value < low or (high is not None and value > high):
            bound = f"{low}..{high}" if high is not None else f">= {low}"
            raise OperationError(f"argument {key!r} must be {bound}, not {value}", BAD_REQUEST)
        return value

    def table(self, key: str) -> dict[str, Any]:
        value: dict[str, Any] = self._get(key, dict, "an object", {}, False)
        return value


#: An operation's adapter: the request's arguments in, a result (rows) out; may be async.
Adapter = Callable[[Args], Any]
#: How a streaming operation hands on one event (awaits the front end's back-pressure).
Emit = Callable[[Any], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Streamed:
    """An answer that is a stream of events (``oxiedge sub``): the front end calls
    ``run(emit)``, which emits each event and returns the final result (or is cancelled
    when the front end's client goes away)."""

    run: Callable[[Emit], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Operation:
    """One entry of the operation table (see the module docstring)."""

    name: str
    summary: str
    adapter: Adapter
    #: True when it changes state (the HTTP API asks the administrator tag for those).
    writes: bool = False

    def handler(self) -> Callable[[dict[str, Any]], Any]:
        """The admin socket's handler: JSON arguments in, JSON result out (an awaitable
        one for an async operation; a listing answers at once, so a synchronous caller
        such as the HTTP API's view can read it too)."""

        def handle(raw: dict[str, Any]) -> Any:
            result = self.adapter(Args(raw))
            if isinstance(result, Streamed):
                return result  # (the admin server streams it)
            if isinstance(result, Awaitable):
                return _finish(result)
            return jsonable(result)

        return handle


async def _finish(result: Awaitable[Any]) -> Any:
    return jsonable(await result)


def handlers(operations: list[Operation]) -> dict[str, Callable[[dict[str, Any]], Any]]:
    """The admin socket's handler table for ``operations``."""
    return {op.name: op.handler() for op in operations}
