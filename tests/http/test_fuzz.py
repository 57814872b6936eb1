"""Garbage in, never a 500 or an exception out: random methods, paths, queries and bodies
through the whole route table (sans-IO, hypothesis), and random bytes at a real listener."""

from __future__ import annotations

import socket
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oxiedge.http.access import ANONYMOUS
from oxiedge.http.api import api_routes
from oxiedge.http.definitions import definition_routes
from oxiedge.http.imports import import_routes
from oxiedge.http.local_api import local_routes
from oxiedge.http.messages import BadRequest, Request, Response
from oxiedge.http.nodes import node_routes, user_routes
from oxiedge.http.routes import Router, health_routes, metrics_routes
from oxiedge.http.writes import write_routes
from tests.conftest import ServerProcess
from tests.http.test_sansio import FakeView

WORDS = ["api", "queues", "exchanges", "bindings", "%2F", "e", "q", "contents", "health",
         "checks", "port-listener", "protocol-listener", "definitions", "users", "mqtt",
         "sessions", "retained", "connections", "nodes", "metrics", "per-object", "x", "",
         "%ff", "..", "%00", "a%2Fb", "123456", "amq.topic", "permissions", "oxiedge"]


def _router() -> Router:
    router, view = Router(), FakeView()
    for add in (health_routes, metrics_routes, api_routes, node_routes, user_routes,
                write_routes, definition_routes, import_routes, local_routes):
        add(router, view)
    return router


ROUTER = _router()


def _answer(method: str, target: str, body: bytes) -> Response:
    try:
        request = Request.parse(method, target, {}, body)
    except BadRequest as exc:
        return Response(exc.status, orjson.dumps({"error": exc.error, "reason": exc.reason}))
    found = ROUTER.route(request)
    if isinstance(found, Response):
        return found
    route, args = found
    coro = ROUTER.call(route, request, ANONYMOUS, args)
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    raise AssertionError("a handler waited")


SCALARS = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=10)
bodies = st.one_of(st.binary(max_size=200),
                   st.builds(lambda v: orjson.dumps(v), st.recursive(
                       SCALARS,
                       lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.sampled_from(
                           ["name", "durable", "type", "arguments", "queues", "users",
                            "bindings", "vhost", "routing_key", "tags", "exchanges"]),
                           inner, max_size=5), max_leaves=12)))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(method=st.sampled_from(["GET", "PUT", "POST", "DELETE", "HEAD", "PATCH"]),
       path=st.lists(st.sampled_from(WORDS), max_size=7),
       query=st.dictionaries(st.sampled_from(["page", "page_size", "name", "use_regex",
                                              "sort", "columns", "if-unused", "all",
                                              "topic", "older_than", "offline"]),
                             st.text(max_size=6), max_size=4),
       body=bodies)
def test_route_table_never_fails(method: str, path: list[str], query: dict[str, str],
                                 body: bytes) -> None:
    from urllib.parse import quote

    target = "/" + "/".join(path)
    if query:
        target += "?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items())
    r = _answer(method, target, body)
    assert r.status in (200, 201, 204, 400, 401, 403, 404, 405, 503), (target, r.status)
    if r.status >= 400:
        error = orjson.loads(r.body)
        assert set(error) == {"error", "reason"}
    elif r.chunks is not None:
        b"".join(r.chunks)


def test_random_bytes_at_a_real_listener(http_server: ServerProcess) -> None:
    import random

    rng = random.Random(38)
    port = http_server.http_port
    assert port
    for _ in range(40):
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
            s.sendall(junk + b"\r\n\r\n")
            s.shutdown(socket.SHUT_WR)
            answer = b""
            try:
                while chunk := s.recv(65536):
                    answer += chunk
            except ConnectionResetError:
                pass
        assert answer == b"" or answer.startswith(b"HTTP/1.1 4"), answer[:80]
    status: Any = http_server.cli("status", "--json").stdout
    assert orjson.loads(status)["http"]["responses_5xx"] == 0
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 200 ")
