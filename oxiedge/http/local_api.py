"""oxiedge's own state in the management API's manner (sans-IO): MQTT sessions,
subscriptions and retained messages under ``/api/mqtt/``, ingest routes and uplinks under
``/api/oxiedge/`` - the same operations and rows as ``oxiedge sessions``, ``oxiedge
subscriptions``, ``oxiedge retained``, ``oxiedge ingest list`` and ``oxiedge uplink list
|status`` (docs/operations.md), through ``BrokerView.operate``.

Writes (administrator): delete a session (``DELETE /api/mqtt/sessions/CLIENT``), kick a
client (``DELETE /api/mqtt/clients/CLIENT``), clear a retained topic (``DELETE
/api/mqtt/retained?topic=T``, or ``?all=true``); a client id holding ``/`` is written
``%2F`` in the path. Ingest routes (``POST /api/oxiedge/ingest``, ``DELETE
/api/oxiedge/ingest?route=FILTER:COLLECTION``), indexes (``PUT|DELETE
/api/oxiedge/indexes/COLLECTION/FIELD``) and uplinks (``PUT|DELETE
/api/oxiedge/uplinks/NAME``) are the operations ``ingest.add|remove``, ``index.add|remove``
and ``uplink.add|remove`` of ``oxiedge ingest``, ``oxiedge index`` and ``oxiedge uplink``.
"""

from __future__ import annotations

from typing import Any

from .access import Need, Principal
from .messages import BadRequest, Request, Response, json_list_response, json_response
from .routes import BrokerView, Router
from .writes import body_object, query_flag

_NO_CONTENT = Response(204)


def local_routes(router: Router, broker: BrokerView) -> None:

    async def sessions(req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
        args: dict[str, Any] = {"offline": query_flag(req, "offline")}
        if "older_than" in req.query:
            args["older_than"] = req.int_param("older_than", 0, 0, 1 << 40)
        return json_list_response(await broker.operate("sessions", args))

    async def session(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        for row in await broker.operate("sessions", {}):
            if row.get("client") == args[0]:
                return json_response(row)
        return json_response({"error": "Object Not Found", "reason": "Not Found"}, 404)

    async def delete_session(_req: Request, _who: Principal, args: tuple[str, ...]
                             ) -> Response:
        await broker.operate("session.delete", {"client": args[0]})
        return _NO_CONTENT

    async def kick(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        await broker.operate("client.kick", {"client": args[0]})
        return _NO_CONTENT

    async def subscriptions(_req: Request, _who: Principal, _args: tuple[str, ...]
                            ) -> Response:
        return json_list_response(await broker.operate("subscriptions", {}))

    async def retained(_req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
        return json_list_response(await broker.operate("retained", {}))

    async def clear_retained(req: Request, _who: Principal, _args: tuple[str, ...]
                             ) -> Response:
        every = query_flag(req, "all")
        topic = req.query.get("topic")
        if not every and not topic:
            raise BadRequest("topic: name the retained topic to clear (or all=true)")
        found = await broker.operate("retained.clear",
                                     {"all": every} if every else {"topic": topic})
        return json_response(found)

    def listing(name: str) -> Any:
        async def rows(_req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
            result = await broker.operate(name, {})
            return json_list_response(result) if isinstance(result, list) \
                else json_response(result)
        return rows

    async def named(op: str, key: str, value: str, what: str) -> None:
        """404 unless the listing ``op`` has a row whose ``key`` is ``value``."""
        if not any(r.get(key) == value for r in await broker.operate(op, {})):
            raise BadRequest(f"no {what} {value!r}", 404, "Object Not Found")

    async def add_ingest(req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
        body = body_object(req)
        route = body.get("route")
        if not isinstance(route, str) or not route:
            raise BadRequest("route: give the route as 'FILTER:COLLECTION'")
        max_docs, max_age = body.get("max_docs"), body.get("max_age")
        if max_docs is not None and (type(max_docs) is not int or max_docs < 1):
            raise BadRequest(f"max_docs: {max_docs!r} is not a positive integer")
        if max_age is not None and not isinstance(max_age, str):
            raise BadRequest(f"max_age: {max_age!r} is not a duration such as '7d'")
        result = await broker.operate("ingest.add", {
            "route": route, "max_docs": max_docs, "max_age": max_age})
        return json_response(result, 201 if result.get("state") == "added" else 200)

    async def remove_ingest(req: Request, _who: Principal, _args: tuple[str, ...]
                            ) -> Response:
        route = req.query.get("route")
        if not route:
            raise BadRequest("route: name the route to remove (?route=FILTER:COLLECTION)")
        await named("ingest.list", "route", route, "ingest route")
        return json_response(await broker.operate("ingest.remove", {"route": route}))

    async def add_index(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        result = await broker.operate("index.add", {"collection": args[0], "field": args[1]})
        return json_response(result, 201 if result.get("created") else 200)

    async def remove_index(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        rows = await broker.operate("index.list", {"collection": args[0]})
        if not any(r.get("field") == args[1] for r in rows):
            raise BadRequest(f"no index on {args[0]!r} field {args[1]!r}", 404,
                             "Object Not Found")
        return json_response(await broker.operate("index.remove", {
            "collection": args[0], "field": args[1]}))

    async def put_uplink(req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        body = body_object(req)
        if body.get("name", args[0]) != args[0]:
            raise BadRequest(f"name: {body.get('name')!r} is not the path's {args[0]!r}")
        result = await broker.operate("uplink.add", {"definition": {**body, "name": args[0]}})
        return json_response(result, 201 if result.get("state") == "added" else 200)

    async def delete_uplink(_req: Request, _who: Principal, args: tuple[str, ...]
                            ) -> Response:
        await named("uplink.list", "name", args[0], "uplink")
        return json_response(await broker.operate("uplink.remove", {"name": args[0]}))

    router.add("GET", "/api/mqtt/sessions", Need.READ, sessions)
    router.add("GET", "/api/mqtt/sessions/*", Need.READ, session)
    router.add("DELETE", "/api/mqtt/sessions/*", Need.ADMIN, delete_session)
    router.add("DELETE", "/api/mqtt/clients/*", Need.ADMIN, kick)
    router.add("GET", "/api/mqtt/subscriptions", Need.READ, subscriptions)
    router.add("GET", "/api/mqtt/retained", Need.READ, retained)
    router.add("DELETE", "/api/mqtt/retained", Need.ADMIN, clear_retained)
    router.add("GET", "/api/oxiedge/ingest", Need.READ, listing("ingest.list"))
    router.add("POST", "/api/oxiedge/ingest", Need.ADMIN, add_ingest)
    router.add("DELETE", "/api/oxiedge/ingest", Need.ADMIN, remove_ingest)
    router.add("GET", "/api/oxiedge/indexes", Need.READ, listing("index.list"))
    router.add("PUT", "/api/oxiedge/indexes/*/*", Need.ADMIN, add_index)
    router.add("DELETE", "/api/oxiedge/indexes/*/*", Need.ADMIN, remove_index)
    router.add("GET", "/api/oxiedge/uplinks", Need.READ, listing("uplink.list"))
    router.add("GET", "/api/oxiedge/uplinks/status", Need.READ, listing("uplink.status"))
    router.add("PUT", "/api/oxiedge/uplinks/*", Need.ADMIN, put_uplink)
    router.add("DELETE", "/api/oxiedge/uplinks/*", Need.ADMIN, delete_uplink)
