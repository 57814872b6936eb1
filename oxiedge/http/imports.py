"""``POST /api/definitions``: import a definitions document (sans-IO).

The operation ``definitions.import`` (``oxiedge/definitions/``, the same as ``oxiedge
definitions import``) does it: the whole document is checked and compared with the server
first (a 400 names the first bad field: ``queues[3].durable: must be true or false``), then
applied through the broker's operations in RabbitMQ's order; what exists alike is left as
it is. The answer counts what was created, updated and left, and lists ``skipped_users``
(RabbitMQ's own hashes, which oxiedge cannot verify).
"""

from __future__ import annotations

from .access import Need, Principal
from .messages import BadRequest, Request, Response, json_response
from .routes import BrokerView, Router
from .writes import body_object

VHOST = "/"


def import_routes(router: Router, broker: BrokerView) -> None:

    async def load(req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        if args and args[0] != VHOST:
            raise BadRequest(f"vhost {args[0]!r} not found", 404, "Object Not Found")
        done = await broker.operate("definitions.import", {"document": body_object(req)})
        return json_response(done)

    router.add("POST", "/api/definitions", Need.ADMIN, load)
    router.add("POST", "/api/definitions/*", Need.ADMIN, load)
