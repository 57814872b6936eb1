"""One HTTP request and its response as plain values (sans-IO: no h11, no trio).

``server.py`` turns h11's events into a :class:`Request` and a :class:`Response` back into
h11 events; everything between (routing, authorisation, the endpoints) sees only these.
Error bodies are JSON in the management API's shape, ``{"error": ..., "reason": ...}``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import orjson

JSON = "application/json"
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
REALM = 'Basic realm="oxiedge"'


class BadRequest(ValueError):
    """Input a handler cannot use: answered 400 with ``reason`` naming the field."""

    def __init__(self, reason: str, status: int = 400, error: str = "bad_request") -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.error = error


@dataclass(frozen=True, slots=True)
class Request:
    """A complete request: method, decoded path segments, query, headers, body."""

    method: str
    target: str
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names
    body: bytes = b""
    path: str = ""
    segments: tuple[str, ...] = ()
    query: dict[str, str] = field(default_factory=dict)
    #: it came over TLS (the listener sets it: a session cookie is then ``Secure``)
    secure: bool = False

    @classmethod
    def parse(cls, method: str, target: str, headers: dict[str, str],
              body: bytes = b"") -> Request:
        """Split ``target`` into the path (its segments percent-decoded one by one, so
        ``/api/queues/%2F/a%2Fb`` is ``("api", "queues", "/", "a/b")``) and the query; a
        target that is not an absolute path raises :class:`BadRequest`."""
        if not target.startswith("/"):
            raise BadRequest(f"request target {target[:80]!r} is not an absolute path")
        try:
            parts = urlsplit(target)
        except ValueError:  # ("//[x/...": a bracket it takes for an IPv6 host)
            raise BadRequest(f"request target {target[:80]!r} does not parse") from None
        raw = parts.path
        try:
            segments = tuple(unquote(s, errors="strict") for s in raw.split("/")[1:] if s)
        except UnicodeDecodeError:
            raise BadRequest("path: a percent-encoded segment is not UTF-8") from None
        try:
            query = dict(parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False,
                                   errors="strict", max_num_fields=64))
        except ValueError as exc:
            raise BadRequest(f"query string: {exc}") from None
        return cls(method, target, headers, body, raw, segments, query)

    def int_param(self, name: str, default: int, low: int, high: int) -> int:
        """The query parameter ``name`` as an integer in [low, high]; 400 naming it else."""
        raw = self.query.get(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise BadRequest(f"{name}: {raw[:40]!r} is not an integer") from None
        if not low <= value <= high:
            raise BadRequest(f"{name}: {value} is not between {low} and {high}")
        return value


#: Items of a large JSON list per piece of a streamed answer (each piece is produced between
#: two turns of the event loop: a few milliseconds at most on a Pi).
JSON_SLICE = 250


@dataclass(slots=True)
class Response:
    """Status, headers (beyond the framing ones) and a complete body - or ``chunks``: the
    body produced piece by piece while it is sent (the connection yields to the event loop
    between pieces, so a large answer never holds it for long)."""

    status: int
    body: bytes = b""
    content_type: str = JSON
    headers: list[tuple[str, str]] = field(default_factory=list)
    chunks: Iterable[bytes] | None = None

    def header_list(self) -> list[tuple[str, str]]:
        return [("content-type", self.content_type), *self.headers]


def json_response(value: Any, status: int = 200) -> Response:
    return Response(status, orjson.dumps(value))


def json_list_response(items: list[Any], convert: Callable[[Any], Any] | None = None,
                       status: int = 200) -> Response:
    """A JSON list of ``items`` (each passed through ``convert`` first, if given), streamed
    ``JSON_SLICE`` items at a time when it is long."""
    if len(items) <= JSON_SLICE:
        return json_response(items if convert is None else [convert(i) for i in items], status)

    def pieces() -> Iterator[bytes]:
        for start in range(0, len(items), JSON_SLICE):
            part = items[start:start + JSON_SLICE]
            done = part if convert is None else [convert(i) for i in part]
            yield (b"[" if start == 0 else b",") + b",".join(orjson.dumps(i) for i in done)
        yield b"]"

    return Response(status, chunks=pieces())


def error_response(status: int, error: str, reason: str) -> Response:
    """The management API's error body; 401 carries the Basic challenge."""
    out = Response(status, orjson.dumps({"error": error, "reason": reason}))
    if status == 401:
        out.headers.append(("www-authenticate", REALM))
    return out


def not_authorised(reason: str) -> Response:
    return error_response(401, "not_authorised", reason)


def not_found(reason: str = "Not Found") -> Response:
    return error_response(404, "Object Not Found", reason)


def text_response(text: str, status: int = 200,
                  content_type: str = "text/plain; charset=utf-8") -> Response:
    return Response(status, text.encode(), content_type)
