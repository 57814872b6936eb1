"""``GET /api/definitions``: RabbitMQ's definitions document, read only (sans-IO).

The sections RabbitMQ's tools read (``rabbitmqadmin export``, the management UI's
download): ``users`` (with their stored password hashes: an administrator-only path, as in
RabbitMQ), ``vhosts``, ``permissions``, ``topic_permissions``, ``queues``, ``exchanges`` and
``bindings`` - the durable objects, without the built-in exchanges and the default
exchange's implicit bindings, as RabbitMQ exports them. A hash is oxiedge's own format
(``pbkdf2_sha256$...``, or Mosquitto's ``$7$`` / ``$6$``), named by ``hashing_algorithm``;
RabbitMQ cannot verify it, oxiedge can.
"""

from __future__ import annotations

from typing import Any

from .. import __version__
from .access import Need, Principal
from .api import binding_json, exchange_json
from .messages import BadRequest, Request, Response, json_response
from .routes import BrokerView, Router

VHOST = "/"


def _algorithm(stored: str) -> str:
    if stored.startswith("$7$"):
        return "mosquitto_pbkdf2_sha512"
    if stored.startswith("$6$"):
        return "mosquitto_sha512"
    return "oxiedge_pbkdf2_sha256"


def definitions(broker: BrokerView) -> dict[str, Any]:
    users = broker.users()
    perms = broker.permissions()
    permissions, topic_permissions = [], []
    for name, entry in sorted(perms.items()):
        for vhost, p in sorted((entry.get("vhosts") or {}).items()):
            permissions.append({"user": name, "vhost": vhost, "configure": p.get("configure"),
                                "write": p.get("write"), "read": p.get("read")})
        for vhost, exchanges in sorted((entry.get("topics") or {}).items()):
            for exchange, p in sorted(exchanges.items()):
                topic_permissions.append({"user": name, "vhost": vhost, "exchange": exchange,
                                          "write": p.get("write"), "read": p.get("read")})
    queues = [{"name": r["name"], "vhost": VHOST, "durable": True,
               "auto_delete": bool(r.get("auto_delete")), "arguments": r.get("arguments") or {}}
              for r in broker.rows("queues") or [] if r.get("durable")]
    exchanges = []
    for r in broker.rows("exchanges") or []:
        name = str(r.get("name", ""))
        if r.get("durable") and name and not name.startswith("amq."):
            x = exchange_json(r)
            exchanges.append({k: x[k] for k in ("name", "vhost", "type", "durable",
                                                "auto_delete", "internal", "arguments")})
    bindings = []
    for r in broker.rows("bindings") or []:
        if r.get("durable") and r.get("exchange"):
            b = binding_json(r)
            bindings.append({k: b[k] for k in ("source", "vhost", "destination",
                                                "destination_type", "routing_key",
                                                "arguments")})
    return {
        "rabbit_version": __version__, "rabbitmq_version": __version__,
        "product_name": "oxiedge", "product_version": __version__,
        "users": [{"name": u["name"], "password_hash": u.get("password_hash", ""),
                   "hashing_algorithm": _algorithm(str(u.get("password_hash", ""))),
                   "tags": list(u.get("tags") or []), "limits": {}} for u in users],
        "vhosts": [{"name": VHOST, "limits": [], "metadata": {"description": "",
                                                              "tags": []}}],
        "permissions": permissions, "topic_permissions": topic_permissions,
        "parameters": [], "global_parameters": [], "policies": [],
        "queues": queues, "exchanges": exchanges, "bindings": bindings,
    }


def definition_routes(router: Router, broker: BrokerView) -> None:

    def export(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        doc = definitions(broker)
        if args:  # one vhost: RabbitMQ leaves out users, vhosts and permissions
            if args[0] != VHOST:
                raise BadRequest(f"vhost {args[0]!r} not found", 404, "Object Not Found")
            doc = {k: doc[k] for k in ("rabbit_version", "rabbitmq_version", "parameters",
                                       "policies", "queues", "exchanges", "bindings")}
        return json_response(doc)

    router.add("GET", "/api/definitions", Need.ADMIN, export)
    router.add("GET", "/api/definitions/*", Need.ADMIN, export)
