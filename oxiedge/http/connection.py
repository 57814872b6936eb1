"""One HTTP/1.1 connection: h11 on a trio stream, with the listener's bounds.

Theory of operation
-------------------
h11 parses and frames; this module only moves bytes and keeps time. Each request cycle:

1. **Wait for a request.** The first request of a connection must complete its headers
   within ``HEADER_TIMEOUT`` of the accept; later ones may idle ``IDLE_TIMEOUT`` (keep-alive)
   before their first byte, then have ``HEADER_TIMEOUT`` for their headers. A slowloris
   client trickling header bytes is therefore cut off at the header deadline, not kept alive
   by each byte. h11's ``max_incomplete_event_size`` bounds the header block
   (``MAX_HEADER_BYTES``; 431 above it).
2. **Read the body** (``MAX_BODY`` bytes, ``BODY_TIMEOUT`` for all of it; a declared
   ``Content-Length`` over the bound is refused with 413 before a byte of it is read).
3. **Answer** through the router (``routes.py``, sans-IO) after the credentials check
   (``credentials.py``). Writes have ``WRITE_TIMEOUT``: a client that does not read is cut off.
4. **Keep alive** unless h11 says the connection must close, or the connection has served
   ``MAX_REQUESTS`` (the last answer carries ``Connection: close``).

A request to a WebSocket path (``/mqtt``, ``/ws``) goes to the listener's ``websocket``
endpoint (``oxiedge.ws``): a refusal is answered like any error and closes; an accepted
upgrade is answered ``101`` and the stream, with what h11 read past the request, becomes
an MQTT connection until it ends.

A protocol error is answered with a small JSON 400/431 written directly (h11 refuses to frame
anything after one) and the connection closes. Every bound counts what it cut off in the
listener's counters (``oxiedge status`` -> ``http``). Before closing with unread input, the
connection half-closes and drains briefly (``LINGER``), so the client reads the answer instead
of a reset.
"""

from __future__ import annotations

import dataclasses
import logging
from http import HTTPStatus
from typing import Any, NoReturn, Protocol
from urllib.parse import quote

import h11
import orjson
import trio

from ..gcpolicy import ANSWERS
from ..ws.handshake import Refusal
from .access import CredentialCache, Need, Principal, refusal
from .bounds import (
    BODY_TIMEOUT,
    HEADER_TIMEOUT,
    IDLE_TIMEOUT,
    MAX_BODY,
    MAX_HEADER_BYTES,
    MAX_REQUESTS,
    WRITE_TIMEOUT,
)
from .credentials import Credentials
from .loopback import foreign_page
from .messages import BadRequest, Request, Response, error_response, not_authorised
from .routes import Router
from .sessions import foreign_origin

RECEIVE_SIZE = 65536
#: After the last answer with input unread: how long and how much to drain before closing.
LINGER = 1.0
LINGER_BYTES = 1 << 20

_TIMEOUT = object()
#: Who a request that needs no credentials runs as.
NOBODY = Principal("", ())
_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 413: b"Content Too Large",
            431: b"Request Header Fields Too Large"}


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


def _session_refusal(response: Response, authorization: str | None) -> Response:
    """A refusal of a request that ran as a console session (no Authorization header) is a
    403 without the Basic challenge: the user is known, and a challenge would make the
    browser prompt for Basic credentials over the console."""
    if response.status != 401 or authorization is not None:
        return response
    headers = [h for h in response.headers if h[0] != "www-authenticate"]
    return Response(403, response.body, response.content_type, headers, response.chunks)


class WebSocketHost(Protocol):
    """The MQTT over WebSocket endpoint (``oxiedge.ws.endpoint.WebSocketEndpoint``)."""

    paths: frozenset[str]

    def decide(self, method: str, headers: dict[str, str]) -> Any: ...

    async def serve(self, stream: trio.abc.Stream, trailing: bytes,
                    tls_identity: str | None = None) -> None: ...


class ConnectionHost(Protocol):
    """What a connection uses of its listener (``listener.HttpServer``)."""

    router: Router
    credentials: Credentials
    counters: dict[str, int]
    log: logging.Logger
    websocket: WebSocketHost | None


class _Close(Exception):
    """End this connection (after the answer, if one was written)."""


class HttpConnection:
    """Serves requests on one stream until a bound or the client ends it."""

    def __init__(self, server: ConnectionHost, stream: trio.abc.Stream, accepted_at: float,
                 tls_identity: str | None = None) -> None:
        self.server = server
        self.stream = stream
        self.tls_identity = tls_identity  # a verified client certificate's (MQTT over wss)
        self.accepted_at = accepted_at
        self.counters = server.counters
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        self.cache = CredentialCache()
        self.served = 0
        self.secure = isinstance(stream, trio.SSLStream)

    async def serve(self) -> None:
        try:
            while True:
                request = await self._read_request()
                if request is None:
                    return
                websocket = self.server.websocket
                if websocket is not None and request.path in websocket.paths:
                    await self._websocket(websocket, request)
                    return
                with ANSWERS.held():  # no collection while an answer is built and sent
                    response = await self._answer(request)
                    await self._respond(request.method, response)
                if not self._next_cycle():
                    return
        except _Close:
            return
        except h11.RemoteProtocolError as exc:
            status = exc.error_status_hint
            key = "header_too_large" if status == 431 else "bad_requests"
            self.counters[key] += 1
            await self._raw_error(status, "bad_request", str(exc) or "malformed request")

    # ------------------------------------------------------------------ reading
    async def _event(self, deadline: float) -> Any:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            with trio.move_on_at(deadline):
                data = await self.stream.receive_some(RECEIVE_SIZE)
                self.h11.receive_data(bytes(data))
                continue
            return _TIMEOUT

    async def _read_request(self) -> Request | None:
        event: Any = h11.NEED_DATA
        if self.served:
            event = self.h11.next_event()  # a pipelined request may be buffered already
            if event is h11.NEED_DATA:  # keep-alive: idle until the next request starts
                with trio.move_on_after(IDLE_TIMEOUT) as idle:
                    data = await self.stream.receive_some(RECEIVE_SIZE)
                    self.h11.receive_data(bytes(data))
                if idle.cancelled_caught:
                    self.counters["idle_closed"] += 1
                    return None
            deadline = trio.current_time() + HEADER_TIMEOUT
        else:
            deadline = self.accepted_at + HEADER_TIMEOUT
        if event is h11.NEED_DATA:
            event = await self._event(deadline)
        if event is _TIMEOUT:
            self.counters["header_timeouts"] += 1
            await self._raw_error(408, "request_timeout",
                                  f"request headers not complete within {HEADER_TIMEOUT:g} s")
            return None
        if not isinstance(event, h11.Request):  # ConnectionClosed: the client is done
            return None
        return await self._read_body(event)

    async def _read_body(self, head: h11.Request) -> Request | None:
        # h11 bounds a header block only while it is incomplete: one that arrived whole in
        # one read is measured here.
        size = len(head.target) + sum(len(k) + len(v) + 4 for k, v in head.headers)
        if size > MAX_HEADER_BYTES:
            self.counters["header_too_large"] += 1
            await self._raw_error(431, "bad_request",
                                  f"request headers larger than {MAX_HEADER_BYTES} bytes")
            raise _Close
        headers: dict[str, str] = {}
        for name, value in head.headers:
            key = name.decode("latin-1")
            text = value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
            await self._too_large()
        if self.h11.they_are_waiting_for_100_continue:
            await self._send(self.h11.send(h11.InformationalResponse(status_code=100, headers=[])))
        body = bytearray()
        deadline = trio.current_time() + BODY_TIMEOUT
        while True:
            event = await self._event(deadline)
            if event is _TIMEOUT:
                self.counters["body_timeouts"] += 1
                await self._raw_error(408, "request_timeout",
                                      f"request body not complete within {BODY_TIMEOUT:g} s")
                return None
            if isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_BODY:
                    await self._too_large()
            elif isinstance(event, h11.EndOfMessage):
                break
            else:  # ConnectionClosed in the middle of the body
                return None
        target = head.target.decode("latin-1")
        try:
            request = Request.parse(head.method.decode("latin-1"), target, headers, bytes(body))
            return dataclasses.replace(request, secure=True) if self.secure else request
        except BadRequest as exc:
            self.counters["bad_requests"] += 1
            await self._respond(head.method.decode("latin-1"),
                                error_response(400, exc.error, exc.reason), close=True)
            raise _Close from None

    async def _too_large(self) -> NoReturn:
        self.counters["body_too_large"] += 1
        await self._respond("POST", error_response(
            413, "bad_request", f"request body larger than {MAX_BODY} bytes"), close=True)
        await self._linger()
        raise _Close

    # ------------------------------------------------------------------ answering
    async def _answer(self, request: Request) -> Response:
        server = self.server
        self.counters["requests"] += 1
        found = server.router.route(request)
        if isinstance(found, Response):
            return found
        route, args = found
        who = NOBODY
        if route.need is not Need.NOTHING:
            header = request.headers.get("authorization")
            found_who = await server.credentials.principal(header, self.cache,
                                                           request.headers.get("cookie"))
            if isinstance(found_who, str):
                self.counters["auth_failures"] += 1
                if route.page and header is None:  # a browser: the console's login form
                    return Response(303, b"", "text/plain; charset=utf-8", [
                        ("location", "/console/login?next=" + quote(request.target, safe="/")),
                        ("cache-control", "no-store")])
                return not_authorised(found_who)
            who = found_who
            if who.anonymous and server.credentials.users.open_by_loopback:
                page = foreign_page(request.headers)  # DNS rebinding, another site's page
                if page is not None:
                    self.counters["auth_failures"] += 1
                    return error_response(403, "access_refused", page)
            if request.method not in ("GET", "HEAD"):
                # a write from a browser must come from this origin, whoever it runs as: a
                # session, Basic credentials the browser remembers, or anonymous
                foreign = foreign_origin(request.headers)
                if foreign is not None:
                    self.counters["auth_failures"] += 1
                    return error_response(403, "access_refused", foreign)
            why = refusal(who, route.need)
            if why is not None:
                self.counters["auth_failures"] += 1
                return _session_refusal(not_authorised(why), header)
        try:
            answer = await server.router.call(route, request, who, args)
        except Exception as exc:  # a bug must cost one 500, never the connection or broker
            server.log.exception("HTTP %s %s failed", request.method, request.path)
            return error_response(500, "internal_error", type(exc).__name__)
        return answer if who is NOBODY or who.anonymous else _session_refusal(answer, header)

    async def _websocket(self, websocket: WebSocketHost, request: Request) -> None:
        """An upgrade to MQTT over WebSocket: refused (and closed) or served here."""
        self.counters["requests"] += 1
        page = foreign_page(request.headers) if self.server.credentials.users.open_by_loopback \
            else None  # a web page's WebSocket to the open loopback default
        answer = Refusal(403, page) if page is not None \
            else websocket.decide(request.method, request.headers)
        if isinstance(answer, Refusal):
            response = error_response(answer.status, "access_refused" if answer.status == 403
                                      else "bad_request", answer.reason)
            response.headers.extend(answer.headers)
            await self._respond(request.method, response, close=True)
            return
        await self._send(self.h11.send(h11.InformationalResponse(
            status_code=101, headers=list(answer.headers), reason=b"Switching Protocols")))
        trailing, _closed = self.h11.trailing_data
        await websocket.serve(self.stream, bytes(trailing), self.tls_identity)

    async def _respond(self, method: str, response: Response, close: bool = False) -> None:
        self.served += 1
        if self.served >= MAX_REQUESTS and not close:
            self.counters["request_limit_closed"] += 1
            close = True
        headers = response.header_list()
        if response.status in (204, 304):  # no body, no length (RFC 9110 8.6)
            headers = [h for h in headers if h[0] != "content-type"]
        elif response.chunks is None:  # (streamed: chunked, or close-delimited for HTTP/1.0)
            headers.append(("content-length", str(len(response.body))))
        if close:
            headers.append(("connection", "close"))
        klass = f"responses_{response.status // 100}xx"
        if klass in self.counters:
            self.counters[klass] += 1
        data = self.h11.send(h11.Response(status_code=response.status, headers=headers,
                                          reason=_reason(response.status)))
        if method != "HEAD" and response.chunks is not None:
            for chunk in response.chunks:  # produced between turns of the event loop
                await self._send(data)
                await trio.lowlevel.checkpoint()
                ANSWERS.check()  # (a slow reader does not keep the collector paused)
                data = self.h11.send(h11.Data(data=chunk))
        elif method != "HEAD" and response.body:
            data += self.h11.send(h11.Data(data=response.body))
        data += self.h11.send(h11.EndOfMessage())
        await self._send(data)

    def _next_cycle(self) -> bool:
        conn = self.h11
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
            return True
        return False  # MUST_CLOSE (Connection: close, HTTP/1.0, the request limit) or an
        # answer given before the request's body was read

    # ------------------------------------------------------------------ writing
    async def _send(self, data: bytes | None) -> None:
        if not data:
            return
        with trio.move_on_after(WRITE_TIMEOUT) as scope:
            await self.stream.send_all(data)
        if scope.cancelled_caught:
            self.counters["write_timeouts"] += 1
            raise _Close

    async def _raw_error(self, status: int, error: str, reason: str) -> None:
        """An error answer written without h11 (after a protocol error it frames nothing)."""
        body = orjson.dumps({"error": error, "reason": reason[:200]})
        head = (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                b"connection: close\r\n\r\n" % (status, _REASONS.get(status, b"Error"),
                                                  len(body)))
        self.counters["responses_4xx"] += 1
        try:
            await self._send(head + body)
        except (_Close, trio.BrokenResourceError, trio.ClosedResourceError):
            return
        await self._linger()

    async def _linger(self) -> None:
        """Half-close, then discard what the client still sends for a moment."""
        stream = self.stream
        try:
            if isinstance(stream, trio.SocketStream):
                await stream.send_eof()
            drained = 0
            with trio.move_on_after(LINGER):
                while drained < LINGER_BYTES:
                    chunk = await stream.receive_some(RECEIVE_SIZE)
                    if not chunk:
                        break
                    drained += len(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
