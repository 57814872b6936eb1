"""RabbitMQ's management HTTP API, the read endpoints (sans-IO).

The JSON shapes and field names are RabbitMQ's (``/api/overview``, ``/api/whoami``,
``/api/queues``, ``/api/exchanges``, ``/api/bindings``), built from the rows the admin socket
serves (``oxiedge queues`` / ``exchanges`` / ``bindings``). oxiedge has one vhost, ``/``
(``%2F`` in a path). List endpoints take RabbitMQ's query parameters: ``name`` (a substring,
or a regular expression with ``use_regex=true``), ``sort`` / ``sort_reverse``, ``columns``
(comma-separated top-level fields), and ``page`` / ``page_size`` (then the answer is
RabbitMQ's page object). A bad value is a 400 naming the parameter.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from .. import __version__
from .access import Need, Principal
from .messages import (
    JSON_SLICE,
    BadRequest,
    Request,
    Response,
    json_list_response,
    json_response,
    not_found,
)
from .routes import BrokerView, Router

VHOST = "/"
#: RabbitMQ's largest page.
MAX_PAGE_SIZE = 500
MAX_NAME_FILTER = 256
EXCHANGE_TYPES = ("direct", "fanout", "headers", "topic")


def _vhost(name: str) -> None:
    if name != VHOST:
        raise BadRequest(f"vhost {name!r} not found (oxiedge has one vhost, '/')", 404,
                         "Object Not Found")


def queue_json(row: dict[str, Any], node: str) -> dict[str, Any]:
    ready, unacked = int(row.get("ready") or 0), int(row.get("unacked") or 0)
    return {
        "name": row.get("name", ""), "vhost": VHOST, "node": node,
        "durable": bool(row.get("durable")), "auto_delete": bool(row.get("auto_delete")),
        "exclusive": bool(row.get("exclusive")), "arguments": row.get("arguments") or {},
        "type": row.get("type") or "classic", "state": "running",
        "messages": ready + unacked, "messages_ready": ready,
        "messages_unacknowledged": unacked, "consumers": int(row.get("consumers") or 0),
        "message_stats": {"publish": int(row.get("published") or 0),
                          "deliver_get": int(row.get("delivered") or 0)},
    }


def exchange_json(row: dict[str, Any]) -> dict[str, Any]:
    arguments = {}
    if row.get("alternate_exchange"):
        arguments["alternate-exchange"] = row["alternate_exchange"]
    return {
        "name": row.get("name", ""), "vhost": VHOST, "type": row.get("type", "direct"),
        "durable": bool(row.get("durable")), "auto_delete": bool(row.get("auto_delete")),
        "internal": bool(row.get("internal")), "arguments": arguments,
        "message_stats": {"publish_in": int(row.get("published") or 0)},
    }


def binding_json(row: dict[str, Any]) -> dict[str, Any]:
    to_exchange = row.get("destination_exchange")
    key = str(row.get("routing_key") or "")
    return {
        "source": row.get("exchange", ""), "vhost": VHOST,
        "destination": to_exchange if to_exchange is not None else row.get("queue", ""),
        "destination_type": "exchange" if to_exchange is not None else "queue",
        "routing_key": key, "arguments": {},
        "properties_key": quote(key, safe="") if key else "~",
    }


def _sort_key(value: Any) -> tuple[int, Any]:
    if value is None:
        return (0, 0)
    if isinstance(value, bool | int | float):
        return (1, value)
    return (2, str(value))


#: Query parameters that need the whole list before the first item can be sent.
_WHOLE_LIST = ("name", "sort", "columns", "page", "page_size")


async def list_answer(request: Request, rows: list[dict[str, Any]],
                      convert: Callable[[dict[str, Any]], dict[str, Any]],
                      pause: Callable[[], Awaitable[None]]) -> Response:
    """The answer of a list endpoint. Without a filter, sort, projection or page, each slice
    of ``rows`` is converted as it is sent (a long list never holds the event loop); with
    one, the rows are converted a slice at a time with ``pause`` (a turn of the event loop)
    between slices, then filtered and sorted at once (:func:`list_query`) and streamed."""
    if not any(key in request.query for key in _WHOLE_LIST):
        return json_list_response(rows, convert)
    items: list[dict[str, Any]] = []
    for start in range(0, len(rows), JSON_SLICE):
        items.extend(convert(r) for r in rows[start:start + JSON_SLICE])
        await pause()
    found = list_query(request, items)
    return json_list_response(found) if isinstance(found, list) else json_response(found)


def list_query(request: Request, items: list[dict[str, Any]]) -> Any:
    """``items`` filtered, sorted, projected and paged as the query asks."""
    name = request.query.get("name")
    if name:
        if len(name) > MAX_NAME_FILTER:
            raise BadRequest(f"name: longer than {MAX_NAME_FILTER} characters")
        if request.query.get("use_regex", "false").lower() == "true":
            try:
                pattern = re.compile(name)
            except re.error as exc:
                raise BadRequest(f"name: not a regular expression: {exc}") from None
            items = [i for i in items if pattern.search(str(i.get("name", "")))]
        else:
            items = [i for i in items if name in str(i.get("name", ""))]
    sort = request.query.get("sort")
    if sort:
        reverse = request.query.get("sort_reverse", "false").lower() == "true"
        items = sorted(items, key=lambda i: _sort_key(i.get(sort)), reverse=reverse)
    columns = request.query.get("columns")
    if columns:
        wanted = [c.strip() for c in columns.split(",") if c.strip()]
        if not wanted:
            raise BadRequest("columns: no column named")
        items = [{c: i[c] for c in wanted if c in i} for i in items]
    if "page" not in request.query and "page_size" not in request.query:
        return items
    page = request.int_param("page", 1, 1, 1 << 30)
    size = request.int_param("page_size", 100, 1, MAX_PAGE_SIZE)
    count = len(items)
    pages = max(1, -(-count // size))
    if page > pages:
        raise BadRequest(f"page: {page} is past the last page ({pages})")
    return {"filtered_count": count, "item_count": len(items[(page - 1) * size:page * size]),
            "items": items[(page - 1) * size:page * size], "page": page, "page_count": pages,
            "page_size": size, "total_count": count}


def api_routes(router: Router, broker: BrokerView) -> None:
    """The read endpoints of the management API."""

    def rows(kind: str) -> list[dict[str, Any]]:
        return broker.rows(kind) or []

    def whoami(_req: Request, who: Principal, _args: tuple[str, ...]) -> Response:
        return json_response({"name": who.name, "tags": list(who.tags)})

    def overview(_req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
        s = broker.status()
        amqp, mqtt = s.get("amqp") or {}, s.get("mqtt") or {}
        ready, unacked = int(amqp.get("ready", 0)), int(amqp.get("unacked", 0))
        return json_response({
            "management_version": __version__, "rates_mode": "none",
            "product_name": "oxiedge", "product_version": __version__,
            "rabbitmq_version": __version__, "erlang_version": "none",
            "erlang_full_version": "none", "node": broker.node,
            "cluster_name": broker.cluster,
            "exchange_types": [{"name": t, "description": "", "enabled": True}
                               for t in EXCHANGE_TYPES],
            "queue_totals": {"messages": ready + unacked, "messages_ready": ready,
                             "messages_unacknowledged": unacked},
            "object_totals": {
                "connections": int(amqp.get("connections", 0)) + int(mqtt.get("connections", 0)),
                "channels": int(amqp.get("channels", 0)),
                "exchanges": int(amqp.get("exchanges", 0)),
                "queues": int(amqp.get("queues", 0)),
                "consumers": int(amqp.get("consumers", 0))},
            "message_stats": {
                "publish": int(amqp.get("published", 0)) + int(mqtt.get("messages_in", 0)),
                "confirm": int(amqp.get("confirmed", 0)),
                "deliver_get": int(amqp.get("delivered", 0)) + int(mqtt.get("messages_out", 0)),
                "ack": int(amqp.get("acked", 0)),
                "redeliver": int(amqp.get("requeued", 0)),
                "return_unroutable": int(amqp.get("returned", 0)),
                "drop_unroutable": int(amqp.get("unroutable", 0)) - int(amqp.get("returned", 0))},
            "listeners": [{"node": broker.node, **x} for x in broker.listeners()],
            "contexts": [{"node": broker.node, "description": "oxiedge management",
                          "path": "/"}],
        })

    async def queues(req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        if args:
            _vhost(args[0])
        return await list_answer(req, await broker.queue_rows() or [],
                                 lambda r: queue_json(r, broker.node), broker.pause)

    def queue(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        _vhost(args[0])
        row = broker.queue_row(args[1])
        return not_found() if row is None else json_response(queue_json(row, broker.node))

    async def exchanges(req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        if args:
            _vhost(args[0])
        return await list_answer(req, rows("exchanges"), exchange_json, broker.pause)

    def exchange(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        _vhost(args[0])
        name = "" if args[1] == "amq.default" else args[1]
        for r in rows("exchanges"):
            if r.get("name") == name:
                return json_response(exchange_json(r))
        return not_found()

    async def bindings(req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        if args:
            _vhost(args[0])
        return await list_answer(req, rows("bindings"), binding_json, broker.pause)

    def object_bindings(kind: str, side: str) -> Any:
        """``/api/queues/%2F/Q/bindings`` (``side`` destination) and
        ``/api/exchanges/%2F/X/bindings/source|destination``."""
        def answer(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
            _vhost(args[0])
            name = "" if kind == "exchange" and args[1] == "amq.default" else args[1]
            known = {r.get("name") for r in rows(f"{kind}s")}
            if name not in known:
                return not_found()
            found = [b for b in map(binding_json, rows("bindings"))
                     if b[side] == name
                     and (side == "source" or b["destination_type"] == kind)]
            return json_list_response(found)
        return answer

    def vhosts(_req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
        return json_response([{"name": VHOST, "description": "the one vhost",
                               "tags": [], "tracing": False}])

    router.add("GET", "/api/whoami", Need.READ, whoami)
    router.add("GET", "/api/overview", Need.READ, overview)
    router.add("GET", "/api/vhosts", Need.READ, vhosts)
    router.add("GET", "/api/queues", Need.READ, queues)
    router.add("GET", "/api/queues/*", Need.READ, queues)
    router.add("GET", "/api/queues/*/*", Need.READ, queue)
    router.add("GET", "/api/exchanges", Need.READ, exchanges)
    router.add("GET", "/api/exchanges/*", Need.READ, exchanges)
    router.add("GET", "/api/exchanges/*/*", Need.READ, exchange)
    router.add("GET", "/api/queues/*/*/bindings", Need.READ,
               object_bindings("queue", "destination"))
    router.add("GET", "/api/exchanges/*/*/bindings/source", Need.READ,
               object_bindings("exchange", "source"))
    router.add("GET", "/api/exchanges/*/*/bindings/destination", Need.READ,
               object_bindings("exchange", "destination"))
    router.add("GET", "/api/cluster-name", Need.READ,
               lambda _r, _w, _a: json_response({"name": broker.cluster}))
    router.add("GET", "/api/extensions", Need.READ, lambda _r, _w, _a: json_response([]))
    router.add("GET", "/api/bindings", Need.READ, bindings)
    router.add("GET", "/api/bindings/*", Need.READ, bindings)
