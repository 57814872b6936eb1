"""Endpoints of RabbitMQ's management API that clients still call besides the main ones
(sans-IO): the older node health check ``/api/healthchecks/node[/NAME]`` (RabbitMQ 3.x,
before ``/api/health/checks/...``), ``POST /api/users/bulk-delete``, and the one vhost as an
object with its permissions (``/api/vhosts/%2F``, ``/api/vhosts/%2F/permissions``).
AMQPStorm's management client calls each of them (docs/conformance.md)."""

from __future__ import annotations

from .access import Need, Principal
from .messages import BadRequest, Request, Response, json_response
from .nodes import permission_rows
from .routes import BrokerView, Router
from .writes import body_object

VHOST = "/"
#: At most this many users in one bulk delete.
MAX_BULK_USERS = 1000


def vhost_json() -> dict[str, object]:
    return {"name": VHOST, "description": "the one vhost", "tags": [], "tracing": False}


def _vhost(name: str) -> None:
    if name != VHOST:
        raise BadRequest(f"vhost {name!r} not found (oxiedge has one vhost, '/')", 404,
                         "Object Not Found")


def compat_routes(router: Router, broker: BrokerView) -> None:
    def node_health(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        if args and args[0] != broker.node:
            raise BadRequest(f"node {args[0][:80]!r} not found (this node is "
                             f"{broker.node!r})", 404, "Object Not Found")
        problem = broker.durable_problem() or broker.not_ready()
        if problem:
            return json_response({"status": "failed", "reason": problem}, 503)
        return json_response({"status": "ok"})

    async def bulk_delete(req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
        names = body_object(req).get("users")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise BadRequest("users: must be a list of user names")
        if len(names) > MAX_BULK_USERS:
            raise BadRequest(f"users: more than {MAX_BULK_USERS} names")
        known = {u["name"] for u in broker.users()}
        for name in names:  # (as RabbitMQ: a name that is not a user is passed over)
            if name in known:
                await broker.delete_user(name)
        return Response(204)

    def vhost(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        _vhost(args[0])
        return json_response(vhost_json())

    def vhost_permissions(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        _vhost(args[0])
        return json_response([r for r in permission_rows(broker) if r["vhost"] == VHOST])

    router.add("GET", "/api/healthchecks/node", Need.READ, node_health)
    router.add("GET", "/api/healthchecks/node/*", Need.READ, node_health)
    router.add("POST", "/api/users/bulk-delete", Need.ADMIN, bulk_delete)
    router.add("GET", "/api/vhosts/*", Need.READ, vhost)
    router.add("GET", "/api/vhosts/*/permissions", Need.ADMIN, vhost_permissions)
