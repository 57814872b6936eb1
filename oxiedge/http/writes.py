"""The management API's writes and the AMQP connection views (sans-IO): each one operation
of the broker's operation table (``docs/operations.md``: the same code as the CLI's
``oxiedge queue declare`` etc.), called through ``BrokerView.operate``.

RabbitMQ's statuses: ``201 Created`` for a new queue, exchange or binding (a binding's
answer has ``Location``), ``204 No Content`` for a declaration that changed nothing and for a
delete; a refusal of the broker keeps its words (``NOT_FOUND - no queue 'x' in vhost '/'``)
with the status of its kind (``routes._KIND_STATUS``). A write needs the ``administrator``
tag and, as in RabbitMQ, the user's own permissions on the object (``configure`` to declare
or delete, ``write`` on a binding's destination and ``read`` on its source, ``read`` to
purge); a refusal is ``401`` naming the object.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import orjson

from .access import Need, Principal
from .api import binding_json, list_answer
from .messages import BadRequest, Request, Response, json_response
from .routes import BrokerView, Router

VHOST = "/"
_NO_CONTENT = Response(204)


def _vhost(name: str) -> None:
    if name != VHOST:
        raise BadRequest(f"vhost {name!r} not found (oxiedge has one vhost, '/')", 404,
                         "Object Not Found")


#: Fields RabbitMQ's API also takes as the strings "true" / "false" (rabbitmqadmin sends
#: them so: ``declare queue name=q durable=true``).
_BOOLEAN_FIELDS = ("durable", "auto_delete", "internal")


def body_object(request: Request) -> dict[str, Any]:
    """The request's JSON object (an empty body is ``{}``), booleans spelled as strings
    read as booleans."""
    if not request.body.strip():
        return {}
    try:
        value = orjson.loads(request.body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"body: not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise BadRequest("body: must be a JSON object")
    for key in _BOOLEAN_FIELDS:
        spelled = value.get(key)
        if isinstance(spelled, str) and spelled.lower() in ("true", "false"):
            value[key] = spelled.lower() == "true"
    return value


def query_flag(request: Request, name: str) -> bool:
    raw = request.query.get(name, "false").lower()
    if raw not in ("true", "false"):
        raise BadRequest(f"{name}: {raw[:20]!r} is not true or false")
    return raw == "true"


def _refused(user: Principal, op: str, kind: str, name: str) -> BadRequest:
    return BadRequest(f"access to {kind} '{name}' in vhost '/' refused for user "
                      f"'{user.name}' ({op})", 401, "not_authorised")


def _check(broker: BrokerView, user: Principal, op: str, kind: str, name: str) -> None:
    if not broker.may(user, op, name):
        raise _refused(user, op, kind, name)


def _peer(name: str) -> tuple[str, int | str]:
    host, _, port = name.rpartition(":")
    return host, int(port) if port.isdigit() else port


def connection_json(row: dict[str, Any], node: str) -> dict[str, Any]:
    host, port = _peer(str(row.get("name", "")))
    props = row.get("client_properties")
    props = props if isinstance(props, dict) else {}
    out: dict[str, Any] = {
        "name": row.get("name"), "user": row.get("user"), "state": row.get("state"),
        "channels": row.get("channels", 0), "vhost": row.get("vhost", VHOST),
        "protocol": row.get("protocol", "AMQP 0-9-1"), "node": node, "peer_host": host,
        "peer_port": port, "consumers": row.get("consumers", 0),
        "messages_unacknowledged": row.get("unacked", 0),
        "message_stats": {"publish": row.get("published", 0),
                          "deliver_get": row.get("delivered", 0)},
        "client_properties": props}
    if isinstance(props.get("connection_name"), str):  # as RabbitMQ names it
        out["user_provided_name"] = props["connection_name"]
    return out


def channel_json(row: dict[str, Any], node: str) -> dict[str, Any]:
    conn = str(row.get("connection", ""))
    host, port = _peer(conn)
    return {"name": f"{conn} ({row.get('number')})", "number": row.get("number"),
            "user": row.get("user"), "state": row.get("state"), "vhost": VHOST, "node": node,
            "consumer_count": row.get("consumers", 0),
            "messages_unacknowledged": row.get("unacked", 0),
            "prefetch_count": row.get("prefetch", 0),
            "global_prefetch_count": row.get("global_prefetch", 0),
            "confirm": bool(row.get("confirm")),
            "connection_details": {"name": conn, "peer_host": host, "peer_port": port}}


def consumer_json(row: dict[str, Any]) -> dict[str, Any]:
    conn = str(row.get("connection", ""))
    host, port = _peer(conn)
    return {"queue": {"name": row.get("queue"), "vhost": VHOST},
            "consumer_tag": row.get("consumer_tag"), "ack_required": row.get("ack_required"),
            "exclusive": row.get("exclusive"), "prefetch_count": row.get("prefetch", 0),
            "arguments": {"x-priority": row["priority"]} if row.get("priority") else {},
            "active": row.get("active", True),
            "activity_status": row.get("activity_status", "up"),
            "channel_details": {"name": f"{conn} ({row.get('channel')})",
                                "number": row.get("channel"), "connection_name": conn,
                                "peer_host": host, "peer_port": port}}


def write_routes(router: Router, broker: BrokerView) -> None:
    """PUT/DELETE of queues and exchanges, purge, bindings, connection close; and the
    connection, channel and consumer lists."""

    async def put_queue(req: Request, who: Principal, args: tuple[str, ...]) -> Response:
        _vhost(args[0])
        body = body_object(req)
        _check(broker, who, "configure", "queue", args[1])
        done = await broker.operate("queue.declare", {**body, "name": args[1]})
        return Response(201) if done.get("created") else _NO_CONTENT

    async def delete_queue(req: Request, who: Principal, args: tuple[str, ...]) -> Response:
        _vhost(args[0])
        flags = {"if_unused": query_flag(req, "if-unused"),
                 "if_empty": query_flag(req, "if-empty")}
        _check(broker, who, "configure", "queue", args[1])
        await broker.operate("queue.delete", {"name": args[1], **flags})
        return _NO_CONTENT

    async def purge(_req: Request, who: Principal, args: tuple[str, ...]) -> Response:
        _vhost(args[0])
        _check(broker, who, "read", "queue", args[1])
        await broker.operate("queue.purge", {"name": args[1]})
        return _NO_CONTENT

    async def put_exchange(req: Request, who: Principal, args: tuple[str, ...]) -> Response:
        _vhost(args[0])
        body = body_object(req)
        _check(broker, who, "configure", "exchange", args[1])
        done = await broker.operate("exchange.declare", {**body, "name": args[1]})
        return Response(201) if done.get("created") else _NO_CONTENT

    async def delete_exchange(req: Request, who: Principal, args: tuple[str, ...]
                              ) -> Response:
        _vhost(args[0])
        if_unused = query_flag(req, "if-unused")
        _check(broker, who, "configure", "exchange", args[1])
        await broker.operate("exchange.delete", {"name": args[1], "if_unused": if_unused})
        return _NO_CONTENT

    def _binding(args: tuple[str, ...], kind: str) -> dict[str, Any]:
        _vhost(args[0])
        return {"source": args[1], "destination": args[2],
                "destination_type": "queue" if kind == "q" else "exchange"}

    def _binding_rights(who: Principal, where: dict[str, Any]) -> None:
        dest_kind = str(where["destination_type"])
        _check(broker, who, "write", dest_kind, where["destination"])
        _check(broker, who, "read", "exchange", where["source"])

    def add_binding(kind: str) -> Any:
        async def add(req: Request, who: Principal, args: tuple[str, ...]) -> Response:
            where = _binding(args, kind)
            body = body_object(req)
            _binding_rights(who, where)
            done = await broker.operate("binding.add", {**body, **where})
            key = str(done.get("routing_key", ""))
            props = quote(key, safe="") if key else "~"
            location = (f"/api/bindings/%2F/e/{quote(args[1], safe='')}/{kind}/"
                        f"{quote(args[2], safe='')}/{props}")
            return Response(201, headers=[("location", location)])
        return add

    def list_between(kind: str) -> Any:
        async def between(_req: Request, _who: Principal, args: tuple[str, ...]
                          ) -> Response:
            where = _binding(args, kind)
            rows = [binding_json(r) for r in broker.rows("bindings") or []]
            return json_response([r for r in rows if r["source"] == where["source"]
                                  and r["destination"] == where["destination"]
                                  and r["destination_type"] == where["destination_type"]])
        return between

    def remove_binding(kind: str) -> Any:
        async def remove(_req: Request, who: Principal, args: tuple[str, ...]) -> Response:
            where = _binding(args, kind)
            key = "" if args[3] == "~" else args[3]
            _binding_rights(who, where)
            done = await broker.operate("binding.remove", {**where, "routing_key": key})
            if not done.get("changed", True):
                return json_response({"error": "Object Not Found", "reason": "Not Found"}, 404)
            return _NO_CONTENT
        return remove

    async def connections(req: Request, _who: Principal, _args: tuple[str, ...]
                          ) -> Response:
        rows = await broker.operate("connections", {})
        return await list_answer(req, rows, lambda r: connection_json(r, broker.node),
                                 broker.pause)

    async def connection(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        for row in await broker.operate("connections", {}):
            if row.get("name") == args[0]:
                return json_response(connection_json(row, broker.node))
        return json_response({"error": "Object Not Found", "reason": "Not Found"}, 404)

    async def close(req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        reason = req.headers.get("x-reason")
        extra = {"reason": reason[:200]} if reason else {}
        await broker.operate("connection.close", {"name": args[0], **extra})
        return _NO_CONTENT

    async def channels(req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
        rows = await broker.operate("channels", {})
        return await list_answer(req, rows, lambda r: channel_json(r, broker.node),
                                 broker.pause)

    async def consumers(req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        if args:
            _vhost(args[0])
        return await list_answer(req, await broker.operate("consumers", {}), consumer_json,
                                 broker.pause)

    router.add("PUT", "/api/queues/*/*", Need.ADMIN, put_queue)
    router.add("DELETE", "/api/queues/*/*", Need.ADMIN, delete_queue)
    router.add("DELETE", "/api/queues/*/*/contents", Need.ADMIN, purge)
    router.add("PUT", "/api/exchanges/*/*", Need.ADMIN, put_exchange)
    router.add("DELETE", "/api/exchanges/*/*", Need.ADMIN, delete_exchange)
    for kind in ("q", "e"):
        router.add("POST", f"/api/bindings/*/e/*/{kind}/*", Need.ADMIN, add_binding(kind))
        router.add("GET", f"/api/bindings/*/e/*/{kind}/*", Need.READ, list_between(kind))
        router.add("DELETE", f"/api/bindings/*/e/*/{kind}/*/*", Need.ADMIN,
                   remove_binding(kind))
    router.add("GET", "/api/connections", Need.READ, connections)
    router.add("GET", "/api/connections/*", Need.READ, connection)
    router.add("DELETE", "/api/connections/*", Need.ADMIN, close)
    router.add("GET", "/api/channels", Need.READ, channels)
    router.add("GET", "/api/consumers", Need.READ, consumers)
    router.add("GET", "/api/consumers/*", Need.READ, consumers)
