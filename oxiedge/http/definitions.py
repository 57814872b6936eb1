"""``GET /api/definitions``: the definitions document (sans-IO).

The document and its code are the operation ``definitions.export`` (``oxiedge/definitions/``,
the same as ``oxiedge definitions export``): RabbitMQ's sections (``rabbitmqadmin export``)
with the users' stored hashes (an administrator-only path, as in RabbitMQ), and oxiedge's own
under ``oxiedge``. The vhost form leaves out users, vhosts and permissions, as RabbitMQ does.
"""

from __future__ import annotations

from .access import Need, Principal
from .messages import BadRequest, Request, Response, json_response
from .routes import BrokerView, Router

VHOST = "/"
_VHOST_SECTIONS = ("rabbit_version", "rabbitmq_version", "parameters", "policies", "queues",
                   "exchanges", "bindings")


def definition_routes(router: Router, broker: BrokerView) -> None:

    async def export(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        if args and args[0] != VHOST:
            raise BadRequest(f"vhost {args[0]!r} not found", 404, "Object Not Found")
        doc = await broker.operate("definitions.export", {})
        if args:  # one vhost: RabbitMQ leaves out users, vhosts and permissions
            doc = {k: doc[k] for k in _VHOST_SECTIONS}
        return json_response(doc)

    router.add("GET", "/api/definitions", Need.ADMIN, export)
    router.add("GET", "/api/definitions/*", Need.ADMIN, export)
