"""``POST /api/definitions``: import RabbitMQ's definitions document (sans-IO).

The whole document is checked before anything changes: it must be a JSON object whose
sections are lists of objects with the fields RabbitMQ writes, every object in vhost ``/``;
the first problem is a 400 naming the field (``queues[3].name: must be a string``). Then it
is applied in RabbitMQ's order through the broker's operations (docs/operations.md):
users, permissions and topic permissions, exchanges, queues, bindings - each durable before
the next, and an object that exists alike is left as it is. A user that exists here gets
its tags (its password stays); a new one is added with its stored hash when oxiedge can
verify that hash (an oxiedge export, or Mosquitto's), else listed in the answer's
``skipped_users`` (RabbitMQ's own hashes: add those users with ``oxiedge user add``).
``parameters``, ``policies`` and the like are ignored, as oxiedge has none.
"""

from __future__ import annotations

from typing import Any

from .access import HASH_PREFIXES, Need, Principal
from .messages import BadRequest, Request, Response, json_response
from .routes import BrokerView, Router
from .writes import body_object

VHOST = "/"
#: section -> (required string fields, optional fields with their JSON types)
_SECTIONS: dict[str, tuple[tuple[str, ...], dict[str, type | tuple[type, ...]]]] = {
    "users": (("name",), {"tags": (str, list)}),
    "permissions": (("user", "vhost", "configure", "write", "read"), {}),
    "topic_permissions": (("user", "vhost", "exchange", "write", "read"), {}),
    "exchanges": (("name", "type"), {"vhost": str, "durable": bool, "auto_delete": bool,
                                     "internal": bool, "arguments": dict}),
    "queues": (("name",), {"vhost": str, "durable": bool, "auto_delete": bool,
                           "arguments": dict}),
    "bindings": (("source", "destination", "destination_type"),
                 {"vhost": str, "routing_key": str, "arguments": dict}),
}
#: The tags oxiedge knows (RabbitMQ's others, ``policymaker`` and ``impersonator``, are
#: dropped).
KNOWN_TAGS = ("administrator", "monitoring", "management")
#: Objects one import may hold, all sections together (a bound on the work of one request).
MAX_OBJECTS = 20_000


def check(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The sections of ``doc`` that are imported, checked (``BadRequest`` names the field)."""
    out: dict[str, list[dict[str, Any]]] = {}
    total = 0
    for section, (required, optional) in _SECTIONS.items():
        items = doc.get(section, [])
        if not isinstance(items, list):
            raise BadRequest(f"{section}: must be a list")
        total += len(items)
        if total > MAX_OBJECTS:
            raise BadRequest(f"{section}: more than {MAX_OBJECTS} objects in one import")
        for i, item in enumerate(items):
            where = f"{section}[{i}]"
            if not isinstance(item, dict):
                raise BadRequest(f"{where}: must be an object")
            for key in required:
                if not isinstance(item.get(key), str):
                    raise BadRequest(f"{where}.{key}: must be a string")
            for key, kind in optional.items():
                if key in item and not isinstance(item[key], kind):
                    raise BadRequest(f"{where}.{key}: has the wrong type")
            if item.get("vhost", VHOST) != VHOST:
                raise BadRequest(f"{where}.vhost: {item['vhost']!r} is not '/' (oxiedge has "
                                 "one vhost)")
            if section == "bindings" and item["destination_type"] not in ("queue", "exchange"):
                raise BadRequest(f"{where}.destination_type: must be queue or exchange")
        out[section] = items
    return out


def _tags(raw: Any) -> list[str]:
    if isinstance(raw, list):
        return [str(t) for t in raw if str(t)]
    return [t.strip() for t in str(raw or "").split(",") if t.strip()]


def import_routes(router: Router, broker: BrokerView) -> None:

    async def load(req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        if args and args[0] != VHOST:
            raise BadRequest(f"vhost {args[0]!r} not found", 404, "Object Not Found")
        doc = check(body_object(req))
        known = {u["name"] for u in broker.users()}
        done: dict[str, Any] = {"added_users": [], "skipped_users": []}
        for u in doc["users"]:
            stored = u.get("password_hash")
            if u["name"] not in known:
                if not isinstance(stored, str) or not stored.startswith(HASH_PREFIXES):
                    done["skipped_users"].append(u["name"])  # RabbitMQ's hashes: not ours
                    continue
                await broker.put_user(u["name"], None, stored)
                done["added_users"].append(u["name"])
            if "tags" in u:
                tags = [t for t in _tags(u["tags"]) if t in KNOWN_TAGS] or ["none"]
                await broker.operate("permissions.apply", {
                    "op": "tags", "args": {"user": u["name"], "tags": tags}})
        for p in doc["permissions"]:
            await broker.operate("permissions.apply", {"op": "set", "args": {
                k: p[k] for k in ("user", "vhost", "configure", "write", "read")}})
        for p in doc["topic_permissions"]:
            await broker.operate("permissions.apply", {"op": "set_topic", "args": {
                k: p[k] for k in ("user", "vhost", "exchange", "write", "read")}})
        for x in doc["exchanges"]:
            await broker.operate("exchange.declare", {k: v for k, v in x.items()
                                                      if k != "vhost"})
        for q in doc["queues"]:
            await broker.operate("queue.declare", {k: v for k, v in q.items() if k != "vhost"})
        for b in doc["bindings"]:
            await broker.operate("binding.add", {k: v for k, v in b.items() if k != "vhost"})
        for section in ("permissions", "topic_permissions", "exchanges", "queues", "bindings"):
            done[section] = len(doc[section])
        return json_response(done)

    router.add("POST", "/api/definitions", Need.ADMIN, load)
    router.add("POST", "/api/definitions/*", Need.ADMIN, load)
