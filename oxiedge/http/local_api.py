"""oxiedge's own state in the management API's manner (sans-IO): MQTT sessions,
subscriptions and retained messages under ``/api/mqtt/``, ingest routes and uplinks under
``/api/oxiedge/`` - the same operations and rows as ``oxiedge sessions``, ``oxiedge
subscriptions``, ``oxiedge retained``, ``oxiedge ingest list`` and ``oxiedge uplink list
|status`` (docs/operations.md), through ``BrokerView.operate``.

Writes (administrator): delete a session (``DELETE /api/mqtt/sessions/CLIENT``), kick a
client (``DELETE /api/mqtt/clients/CLIENT``), clear a retained topic (``DELETE
/api/mqtt/retained?topic=T``, or ``?all=true``); a client id holding ``/`` is written
``%2F`` in the path.
"""

from __future__ import annotations

from typing import Any

from .access import Need, Principal
from .messages import BadRequest, Request, Response, json_list_response, json_response
from .routes import BrokerView, Router
from .writes import query_flag

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

    router.add("GET", "/api/mqtt/sessions", Need.READ, sessions)
    router.add("GET", "/api/mqtt/sessions/*", Need.READ, session)
    router.add("DELETE", "/api/mqtt/sessions/*", Need.ADMIN, delete_session)
    router.add("DELETE", "/api/mqtt/clients/*", Need.ADMIN, kick)
    router.add("GET", "/api/mqtt/subscriptions", Need.READ, subscriptions)
    router.add("GET", "/api/mqtt/retained", Need.READ, retained)
    router.add("DELETE", "/api/mqtt/retained", Need.ADMIN, clear_retained)
    router.add("GET", "/api/oxiedge/ingest", Need.READ, listing("ingest.list"))
    router.add("GET", "/api/oxiedge/uplinks", Need.READ, listing("uplink.list"))
    router.add("GET", "/api/oxiedge/uplinks/status", Need.READ, listing("uplink.status"))
