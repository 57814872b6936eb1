"""The HTTP layer's sans-IO parts: requests, credentials, tags, routing, the management API's
list queries - plain values in, plain values out, no socket and no event loop."""

from __future__ import annotations

import base64
import subprocess
import sys
from typing import Any

import orjson
import pytest

from oxiedge.http.access import (
    ANONYMOUS,
    CACHE_ENTRIES,
    CredentialCache,
    CredentialError,
    Need,
    Principal,
    parse_basic,
    refusal,
)
from oxiedge.http.api import api_routes, binding_json, list_query
from oxiedge.http.messages import BadRequest, Request, Response, error_response
from oxiedge.http.metrics import Snapshot
from oxiedge.http.routes import Router, health_routes
from oxiedge.http.sessions import foreign_origin

SANS_IO = ("oxiedge.http.messages", "oxiedge.http.access", "oxiedge.http.routes",
           "oxiedge.http.api", "oxiedge.http.metrics", "oxiedge.http.bounds",
           "oxiedge.http.nodes", "oxiedge.http.writes", "oxiedge.http.definitions",
           "oxiedge.http.local_api", "oxiedge.http.imports")


def test_sans_io_modules_load_no_io() -> None:
    code = ("import sys\n"
            f"for m in {SANS_IO!r}: __import__(m)\n"
            "bad = [m for m in ('trio', 'h11', 'socket', 'ssl', 'asyncio', 'rocksdict')"
            " if m in sys.modules]\n"
            "print(','.join(bad))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == ""


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize("target, segments, query", [
    ("/api/queues", ("api", "queues"), {}),
    ("/api/queues/%2F/a%2Fb?page=2&name=x", ("api", "queues", "/", "a/b"),
     {"page": "2", "name": "x"}),
    ("/api//queues/", ("api", "queues"), {}),
    ("/metrics?", ("metrics",), {}),
])
def test_request_target_is_split_into_decoded_segments(target: str, segments: tuple[str, ...],
                                                         query: dict[str, str]) -> None:
    req = Request.parse("GET", target, {})
    assert req.segments == segments
    assert req.query == query


@pytest.mark.parametrize("target", ["api/queues", "*", "http://x/api", "/api/%ff%fe",
                                    "//[::1/api"])
def test_bad_targets_are_bad_requests(target: str) -> None:
    with pytest.raises(BadRequest):
        Request.parse("GET", target, {})


@pytest.mark.parametrize("origin", ["http://127.0.0.1:15672", "http://evil.example",
                                    "http://[::1", "garbage"])
def test_a_write_is_let_in_only_from_this_origin(origin: str) -> None:
    why = foreign_origin({"host": "127.0.0.1:15672", "origin": origin})  # (never raises)
    assert (why is None) == (origin == "http://127.0.0.1:15672")


def test_int_param_names_the_field() -> None:
    req = Request.parse("GET", "/api/queues?page=x&page_size=0", {})
    with pytest.raises(BadRequest, match="page: 'x'"):
        req.int_param("page", 1, 1, 10)
    with pytest.raises(BadRequest, match="page_size: 0 is not between 1 and 500"):
        req.int_param("page_size", 100, 1, 500)
    assert req.int_param("absent", 7, 1, 10) == 7


def test_parse_basic() -> None:
    assert parse_basic(_basic("alice", "s:e:cret")) == ("alice", b"s:e:cret")
    assert parse_basic("basic " + base64.b64encode(b"bob:").decode()) == ("bob", b"")
    for bad in ["Bearer abc", "Basic", "Basic !!!", "Basic " + base64.b64encode(b"nocolon")
                .decode(), "Basic " + base64.b64encode(b":pw").decode(),
                "Basic " + base64.b64encode(b"\xff:pw").decode(), "Basic " + "A" * 2000]:
        with pytest.raises(CredentialError):
            parse_basic(bad)


@pytest.mark.parametrize("tags, need, refused", [
    ((), Need.NOTHING, None),
    ((), Need.READ, "Not management user"),
    (("none",), Need.READ, "Not management user"),
    (("monitoring",), Need.READ, None),
    (("management",), Need.READ, None),
    (("monitoring",), Need.ADMIN, "Not administrator user"),
    (("administrator",), Need.ADMIN, None),
    (("administrator",), Need.READ, None),
])
def test_tags_decide(tags: tuple[str, ...], need: Need, refused: str | None) -> None:
    assert refusal(Principal("u", tags), need) == refused


def test_anonymous_is_the_administrator() -> None:
    assert refusal(ANONYMOUS, Need.ADMIN) is None


def test_credential_cache_is_keyed_by_password_and_stored_hash_and_bounded() -> None:
    cache = CredentialCache()
    cache.remember("alice", "hash1", b"pw")
    assert cache.known("alice", "hash1", b"pw")
    assert not cache.known("alice", "hash1", b"other")
    assert not cache.known("alice", "hash2", b"pw")  # the password was changed
    for i in range(CACHE_ENTRIES + 3):
        cache.remember(f"u{i}", "h", b"pw")
    assert len(cache) == CACHE_ENTRIES
    assert not cache.known("alice", "hash1", b"pw")  # the oldest went first


def test_error_response_shape() -> None:
    r = error_response(401, "not_authorised", "Login failed")
    assert orjson.loads(r.body) == {"error": "not_authorised", "reason": "Login failed"}
    assert ("www-authenticate", 'Basic realm="oxiedge"') in r.headers
    assert not any(k == "www-authenticate" for k, _ in error_response(400, "x", "y").headers)


class FakeView:
    """A BrokerView holding plain values (routing tests; the real one is tested against a
    running server in test_listener.py)."""

    node = "oxiedge@test"
    cluster = "test"

    def __init__(self) -> None:
        self.durable: str | None = None
        self.unready: str | None = None
        self.queues: list[dict[str, Any]] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.answers: dict[str, Any] = {}

    def status(self) -> dict[str, Any]:
        return {"amqp": {"ready": 3, "unacked": 1}, "mqtt": {}}

    def rows(self, kind: str) -> list[dict[str, Any]] | None:
        return {"queues": self.queues, "exchanges": [], "bindings": []}.get(kind)

    async def queue_rows(self) -> list[dict[str, Any]] | None:
        return list(self.queues)

    def queue_row(self, name: str) -> dict[str, Any] | None:
        return next((q for q in self.queues if q.get("name") == name), None)

    def snapshot(self) -> Snapshot:
        return Snapshot(self.status(), self.node, self.cluster)

    def durable_problem(self) -> str | None:
        return self.durable

    def not_ready(self) -> str | None:
        return self.unready

    def listeners(self) -> list[dict[str, Any]]:
        return [{"protocol": "amqp", "ip_address": "127.0.0.1", "port": 5672}]

    def users(self) -> list[dict[str, Any]]:
        return [{"name": "alice", "tags": ["administrator"]}, {"name": "bob", "tags": []}]

    def permissions(self) -> dict[str, dict[str, Any]]:
        return {"bob": {"vhosts": {"/": {"configure": "^$", "write": ".*", "read": "q"}}}}

    async def operate(self, name: str, args: dict[str, Any]) -> Any:
        from oxiedge.operations import NOT_FOUND, OperationError

        self.calls.append((name, args))
        if name in self.answers:
            return self.answers[name]
        if args.get("name") == "missing":
            raise OperationError("NOT_FOUND - no queue 'missing' in vhost '/'", NOT_FOUND)
        return {"created": True, "routing_key": args.get("routing_key", ""), "changed": True}

    async def put_user(self, name: str, password: bytes | None, password_hash: str | None
                       ) -> bool:
        self.calls.append(("put_user", {"name": name, "password": password,
                                        "password_hash": password_hash}))
        return name != "alice"

    async def delete_user(self, name: str) -> None:
        from oxiedge.operations import NOT_FOUND, OperationError

        if name not in ("alice", "bob"):
            raise OperationError(f"no user {name!r}", NOT_FOUND)
        self.calls.append(("delete_user", {"name": name}))

    async def pause(self) -> None:
        return None

    def may(self, user: Principal, op: str, name: str) -> bool:
        return not name.startswith("secret")


def _call(router: Router, method: str, target: str, body: bytes = b"") -> Response:
    request = Request.parse(method, target, {}, body)
    found = router.route(request)
    if isinstance(found, Response):
        return found
    route, args = found
    coro = router.call(route, request, ANONYMOUS, args)
    try:  # (FakeView's operations finish at once: one step runs the handler to its end)
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    raise AssertionError("the handler waited for something")


def test_router_404_405_and_head() -> None:
    router, view = Router(), FakeView()
    health_routes(router, view)
    assert _call(router, "GET", "/nope").status == 404
    r = _call(router, "POST", "/healthz")
    assert r.status == 405 and ("allow", "GET") in r.headers
    assert _call(router, "HEAD", "/healthz").status == 200


def test_health_and_ready_follow_the_view() -> None:
    router, view = Router(), FakeView()
    health_routes(router, view)
    assert orjson.loads(_call(router, "GET", "/healthz").body) == {"status": "ok"}
    view.durable, view.unready = "durable writes stopped", "resource alarm: low on disk"
    for path, reason in (("/healthz", view.durable), ("/readyz", view.unready)):
        r = _call(router, "GET", path)
        assert r.status == 503
        assert orjson.loads(r.body) == {"status": "failed", "reason": reason}


def test_api_queue_listing_queries() -> None:
    router, view = Router(), FakeView()
    api_routes(router, view)
    view.queues = [{"name": f"q{i}", "ready": i, "unacked": 0, "durable": i % 2 == 0}
                       for i in range(12)]
    items = orjson.loads(_call(router, "GET", "/api/queues?sort=messages&sort_reverse=true"
                               "&columns=name,messages").body)
    assert items[0] == {"name": "q11", "messages": 11} and len(items) == 12
    page = orjson.loads(_call(router, "GET", "/api/queues/%2F?page=2&page_size=5").body)
    assert (page["page"], page["page_count"], page["item_count"], page["total_count"]) == \
        (2, 3, 5, 12)
    assert [q["name"] for q in orjson.loads(
        _call(router, "GET", "/api/queues?name=q1&use_regex=true").body)] == ["q1", "q10", "q11"]
    one = orjson.loads(_call(router, "GET", "/api/queues/%2F/q3").body)
    assert (one["name"], one["vhost"], one["messages_ready"]) == ("q3", "/", 3)
    assert _call(router, "GET", "/api/queues/%2F/missing").status == 404
    assert _call(router, "GET", "/api/queues/other").status == 404


@pytest.mark.parametrize("query, field", [
    ("page=0", "page"), ("page=abc", "page"), ("page_size=501", "page_size"),
    ("page=9&page_size=5", "page"), ("name=(&use_regex=true", "name"),
    ("columns=,", "columns"),
])
def test_api_bad_queries_are_400_naming_the_field(query: str, field: str) -> None:
    router, view = Router(), FakeView()
    api_routes(router, view)
    view.queues = [{"name": "q"}]
    r = _call(router, "GET", f"/api/queues?{query}")
    assert r.status == 400
    assert orjson.loads(r.body)["reason"].startswith(f"{field}:")


def test_whole_list_queries_convert_in_slices_between_pauses() -> None:
    from oxiedge.http.api import list_answer
    from oxiedge.http.messages import JSON_SLICE

    pauses: list[int] = []

    async def pause() -> None:
        pauses.append(1)

    rows = [{"name": f"q{i:04d}"} for i in range(2 * JSON_SLICE + 1)]
    coro = list_answer(Request.parse("GET", "/x?sort=name&sort_reverse=true", {}), rows,
                       dict, pause)
    try:
        coro.send(None)
    except StopIteration as done:
        r = done.value
    assert len(pauses) == 3
    assert orjson.loads(b"".join(r.chunks))[0] == {"name": f"q{2 * JSON_SLICE:04d}"}


def test_list_query_without_paging_returns_the_list() -> None:
    assert list_query(Request.parse("GET", "/x", {}), [{"name": "a"}]) == [{"name": "a"}]


def test_binding_json_shapes() -> None:
    q = binding_json({"exchange": "amq.topic", "queue": "q", "routing_key": "a.#",
                      "durable": True})
    assert q["destination_type"] == "queue" and q["properties_key"] == "a.%23"
    x = binding_json({"exchange": "src", "queue": None, "destination_exchange": "dst",
                      "routing_key": "", "durable": False})
    assert (x["destination"], x["destination_type"], x["properties_key"]) == \
        ("dst", "exchange", "~")


def _node_router() -> tuple[Router, FakeView]:
    from oxiedge.http.nodes import node_routes, user_routes

    router, view = Router(), FakeView()
    node_routes(router, view)
    user_routes(router, view)
    return router, view


@pytest.mark.parametrize("path, status, body", [
    ("/api/health/checks/alarms", 200, {"status": "ok"}),
    ("/api/health/checks/virtual-hosts", 200, {"status": "ok"}),
    ("/api/health/checks/node-is-quorum-critical", 200, {"status": "ok"}),
    ("/api/health/checks/port-listener/5672", 200, {"status": "ok", "port": 5672}),
    ("/api/health/checks/port-listener/1883", 503,
     {"status": "failed", "reason": "No active listener", "missing": 1883, "ports": [5672]}),
    ("/api/health/checks/protocol-listener/amqp091", 200,
     {"status": "ok", "protocol": "amqp091"}),
    ("/api/health/checks/protocol-listener/mqtt", 503,
     {"status": "failed", "reason": "No active listener", "missing": "mqtt",
      "protocols": ["amqp"]}),
    ("/api/aliveness-test/%2F", 200, {"status": "ok"}),
    ("/api/permissions/%2F/bob", 200,
     {"user": "bob", "vhost": "/", "configure": "^$", "write": ".*", "read": "q"}),
    ("/api/users/alice", 200, {"name": "alice", "tags": ["administrator"], "limits": {},
                               "password_hash": "",
                               "hashing_algorithm": "rabbit_password_hashing_pbkdf2_sha256"}),
])
def test_node_health_and_user_reads(path: str, status: int, body: Any) -> None:
    router, _view = _node_router()
    r = _call(router, "GET", path)
    assert (r.status, orjson.loads(r.body)) == (status, body)


@pytest.mark.parametrize("path, status, field", [
    ("/api/health/checks/port-listener/abc", 400, "port"),
    ("/api/health/checks/port-listener/70000", 400, "port"),
    ("/api/health/checks/port-listener/%C2%B2", 400, "port"),  # "²": a digit to isdigit
    ("/api/health/checks/port-listener/" + "1" * 5000, 400, "port"),
    ("/api/health/checks/protocol-listener/gopher", 400, "protocol"),
    ("/api/aliveness-test/other", 404, None),
    ("/api/users/nobody", 404, None),
    ("/api/users/nobody/permissions", 404, None),
    ("/api/permissions/%2F/alice", 404, None),
    ("/api/nodes/elsewhere", 404, None),
])
def test_node_health_and_user_bad_input(path: str, status: int, field: str | None) -> None:
    router, _view = _node_router()
    r = _call(router, "GET", path)
    assert r.status == status
    if field is not None:
        assert orjson.loads(r.body)["reason"].startswith(f"{field}:")


def test_alarms_check_fails_while_an_alarm_is_on() -> None:
    router, view = _node_router()
    view.status = lambda: {"alarms": {"disk_alarm": True}}  # type: ignore[method-assign]
    r = _call(router, "GET", "/api/health/checks/local-alarms")
    assert r.status == 503
    assert orjson.loads(r.body)["alarms"] == [{"node": "oxiedge@test", "resource": "disk"}]
    view.unready = "resource alarm: low on disk"
    assert _call(router, "GET", "/api/aliveness-test/%2F").status == 503


def test_routes_declare_what_they_need() -> None:
    router, _view = _node_router()
    needs = {r.pattern: r.need for r in router.routes}
    assert needs[("api", "users")] is Need.ADMIN and needs[("api", "permissions")] is Need.ADMIN
    assert needs[("api", "nodes")] is Need.READ


def test_long_json_lists_are_streamed_in_slices() -> None:
    from oxiedge.http.messages import JSON_SLICE, json_list_response

    items = [{"name": f"q{i}"} for i in range(2 * JSON_SLICE + 7)]
    r = json_list_response(items)
    assert r.chunks is not None
    pieces = list(r.chunks)
    assert len(pieces) == 4  # three slices and the closing bracket
    assert orjson.loads(b"".join(pieces)) == items
    short = json_list_response(items[:3])
    assert short.chunks is None and orjson.loads(short.body) == items[:3]


def _write_router() -> tuple[Router, FakeView]:
    from oxiedge.http.writes import write_routes

    router, view = Router(), FakeView()
    write_routes(router, view)
    return router, view


def test_writes_call_the_operations_with_rabbitmqs_statuses() -> None:
    router, view = _write_router()
    r = _call(router, "PUT", "/api/queues/%2F/jobs", b'{"durable": false, "arguments": {}}')
    assert r.status == 201
    assert view.calls[-1] == ("queue.declare", {"durable": False, "arguments": {},
                                                "name": "jobs"})
    assert _call(router, "DELETE", "/api/queues/%2F/jobs?if-empty=true").status == 204
    assert view.calls[-1] == ("queue.delete", {"name": "jobs", "if_unused": False,
                                               "if_empty": True})
    assert _call(router, "DELETE", "/api/queues/%2F/jobs/contents").status == 204
    r = _call(router, "POST", "/api/bindings/%2F/e/amq.topic/q/jobs", b'{"routing_key": "a.#"}')
    assert r.status == 201
    assert ("location", "/api/bindings/%2F/e/amq.topic/q/jobs/a.%23") in r.headers
    assert _call(router, "DELETE", "/api/bindings/%2F/e/src/e/dst/~").status == 204
    assert view.calls[-1] == ("binding.remove", {"source": "src", "destination": "dst",
                                                 "destination_type": "exchange",
                                                 "routing_key": ""})


@pytest.mark.parametrize("method, target, body, status, start", [
    ("PUT", "/api/queues/%2F/q", b"{not json", 400, "body:"),
    ("PUT", "/api/queues/%2F/q", b"[1]", 400, "body:"),
    ("DELETE", "/api/queues/%2F/q?if-unused=maybe", b"", 400, "if-unused:"),
    ("DELETE", "/api/queues/%2F/missing", b"", 404, "NOT_FOUND"),
    ("PUT", "/api/queues/other/q", b"{}", 404, "vhost"),
    ("PUT", "/api/queues/%2F/secret-q", b"{}", 401, "access to queue 'secret-q'"),
    ("POST", "/api/bindings/%2F/e/secret-x/q/q", b"{}", 401, "access to exchange 'secret-x'"),
])
def test_write_refusals(method: str, target: str, body: bytes, status: int, start: str) -> None:
    router, _view = _write_router()
    r = _call(router, method, target, body)
    assert r.status == status
    assert orjson.loads(r.body)["reason"].startswith(start) or \
        start in orjson.loads(r.body)["reason"]


def test_definitions_routes_call_the_shared_operation() -> None:
    from oxiedge.http.definitions import definition_routes
    from oxiedge.http.imports import import_routes

    router, view = Router(), FakeView()
    definition_routes(router, view)
    import_routes(router, view)
    doc = {"rabbit_version": "x", "rabbitmq_version": "x", "parameters": [], "policies": [],
           "queues": [], "exchanges": [], "bindings": [], "users": []}
    view.answers["definitions.export"] = doc
    assert orjson.loads(_call(router, "GET", "/api/definitions").body) == doc
    one = orjson.loads(_call(router, "GET", "/api/definitions/%2F").body)
    assert "users" not in one and "queues" in one
    assert _call(router, "GET", "/api/definitions/other").status == 404
    r = _call(router, "POST", "/api/definitions", b'{"queues": []}')
    assert r.status == 200
    assert view.calls[-1] == ("definitions.import", {"document": {"queues": []}})
    assert _call(router, "POST", "/api/definitions", b"[1]").status == 400


@pytest.mark.parametrize("method, target, body, status, start", [
    ("PUT", "/api/users/carol", b'{"password": "pw", "tags": "monitoring"}', 201, None),
    ("PUT", "/api/users/alice", b'{"password_hash": "pbkdf2_sha256$1$a$b"}', 204, None),
    ("PUT", "/api/users/carol", b'{"tags": "monitoring"}', 400, "password:"),
    ("PUT", "/api/users/carol", b'{"password": 5}', 400, "password:"),
    ("PUT", "/api/users/carol", b'{"password": "pw", "tags": "policymaker"}', 400, "tags:"),
    ("PUT", "/api/users/a%3Ab", b'{"password": "pw"}', 400, "name:"),
    ("PUT", "/api/users/a%0Ab", b'{"password": "pw"}', 400, "name:"),
    ("PUT", "/api/users/a%E2%80%A8b", b'{"password": "pw"}', 400, "name:"),
    ("DELETE", "/api/users/bob", b"", 204, None),
    ("DELETE", "/api/users/nobody", b"", 404, "no user"),
    ("PUT", "/api/permissions/%2F/bob", b'{"configure": ".*", "write": ".*", "read": ".*"}',
     204, None),
    ("PUT", "/api/permissions/%2F/alice", b'{"configure": ".*", "write": ".*", "read": ".*"}',
     201, None),
    ("PUT", "/api/permissions/%2F/alice", b'{"configure": ".*"}', 400, "write:"),
    ("PUT", "/api/permissions/%2F/ghost", b"{}", 404, "user 'ghost'"),
    ("DELETE", "/api/permissions/%2F/bob", b"", 204, None),
    ("DELETE", "/api/permissions/%2F/alice", b"", 404, "user 'alice' has no"),
    ("PUT", "/api/topic-permissions/%2F/bob", b'{"exchange": "amq.topic", "write": "^a",'
     b' "read": "^a"}', 204, None),
    ("PUT", "/api/topic-permissions/%2F/bob", b'{"write": "^a", "read": "^a"}', 400,
     "exchange:"),
])
def test_user_and_permission_writes(method: str, target: str, body: bytes, status: int,
                                    start: str | None) -> None:
    router, _view = _node_router()
    r = _call(router, method, target, body)
    assert r.status == status, r.body
    if start is not None:
        reason = orjson.loads(r.body)["reason"]
        assert reason.startswith(start) or start in reason


def test_object_bindings_and_small_reads() -> None:
    router, view = Router(), FakeView()
    api_routes(router, view)
    view.queues = [{"name": "q"}]
    view.rows = lambda kind: {  # type: ignore[method-assign]
        "queues": [{"name": "q"}], "exchanges": [{"name": "x"}, {"name": "y"}],
        "bindings": [{"exchange": "", "queue": "q", "routing_key": "q"},
                     {"exchange": "x", "queue": "q", "routing_key": "k"},
                     {"exchange": "x", "queue": None, "destination_exchange": "y",
                      "routing_key": ""}]}.get(kind)
    qb = orjson.loads(_call(router, "GET", "/api/queues/%2F/q/bindings").body)
    assert [(b["source"], b["routing_key"]) for b in qb] == [("", "q"), ("x", "k")]
    src = orjson.loads(_call(router, "GET", "/api/exchanges/%2F/x/bindings/source").body)
    assert [b["destination"] for b in src] == ["q", "y"]
    dst = orjson.loads(_call(router, "GET", "/api/exchanges/%2F/y/bindings/destination").body)
    assert [b["source"] for b in dst] == ["x"]
    assert _call(router, "GET", "/api/queues/%2F/nope/bindings").status == 404
    assert orjson.loads(_call(router, "GET", "/api/cluster-name").body) == {"name": "test"}
    assert orjson.loads(_call(router, "GET", "/api/extensions").body) == []


def test_h11_loads_only_when_the_listener_starts() -> None:
    code = ("import sys\n"
            "import oxiedge.server, oxiedge.http.wiring, oxiedge.http.listener\n"
            "print('h11' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"
