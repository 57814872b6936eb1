"""The management API's nodes, health checks, users and permissions (sans-IO).

RabbitMQ's shapes: ``/api/nodes`` (one node), ``/api/health/checks/...`` (``200
{"status": "ok"}`` or ``503 {"status": "failed", "reason": ...}``), ``/api/aliveness-test/%2F``,
``/api/users``, ``/api/permissions`` and ``/api/topic-permissions`` (administrator only, as in
RabbitMQ; a user's password hash is not served): read, and written with ``PUT`` / ``DELETE``
(the password file and ``DATA/permissions.json``, as ``oxiedge user add|remove`` and
``oxiedge permissions set|clear`` change them). oxiedge is one node with one vhost, so the
cluster-wide and the local checks are the same, and ``node-is-quorum-critical`` is always
fine.
"""

from __future__ import annotations

from typing import Any

from ..auth import USER_NAME_RULE, user_name_ok
from .access import Need, Principal
from .messages import BadRequest, Request, Response, json_response, not_found
from .routes import BrokerView, Router
from .writes import body_object

VHOST = "/"
#: Protocol names RabbitMQ's protocol-listener check accepts -> oxiedge's endpoint key.
PROTOCOLS = {"amqp": "amqp", "amqp091": "amqp", "amqp/ssl": "amqp/ssl", "amqps": "amqp/ssl",
             "mqtt": "mqtt", "mqtt/ssl": "mqtt/ssl", "mqtts": "mqtt/ssl", "http": "http",
             "https": "https"}


def _ok(**extra: Any) -> Response:
    return json_response({"status": "ok", **extra})


def _failed(reason: str, **extra: Any) -> Response:
    return json_response({"status": "failed", "reason": reason, **extra}, 503)


def _vhost(name: str) -> None:
    if name != VHOST:
        raise BadRequest(f"vhost {name!r} not found (oxiedge has one vhost, '/')", 404,
                         "Object Not Found")


def node_json(broker: BrokerView) -> dict[str, Any]:
    snap = broker.snapshot()
    s = snap.status
    alarms, conns = s.get("alarms") or {}, s.get("connections") or {}
    return {
        "name": broker.node, "type": "disc", "running": True, "os_pid": str(s.get("pid", "")),
        "uptime": int(float(s.get("uptime_s", 0)) * 1000),
        "mem_used": snap.rss_bytes, "mem_limit": snap.memory_limit_bytes,
        "mem_alarm": bool(alarms.get("memory_alarm")),
        "disk_free": snap.disk_free_bytes, "disk_free_limit": snap.disk_free_limit_bytes,
        "disk_free_alarm": bool(alarms.get("disk_alarm")),
        "fd_used": snap.open_fds, "fd_total": snap.max_fds,
        "sockets_used": int(conns.get("open", 0)),
        "sockets_total": int(conns.get("max_connections", 0)),
        "partitions": [], "cluster_links": [], "applications": [],
        "being_drained": False,
    }


def _alarms(broker: BrokerView) -> list[dict[str, str]]:
    alarms = broker.status().get("alarms") or {}
    out = [{"node": broker.node, "resource": kind}
           for kind, key in (("memory", "memory_alarm"), ("disk", "disk_alarm"))
           if alarms.get(key)]
    for name in (alarms.get("other_alarms") or {}):
        out.append({"node": broker.node, "resource": str(name)})
    return out


#: The tags oxiedge knows; a user's other RabbitMQ tags are refused by name.
TAGS = ("administrator", "monitoring", "management")


def _tag_list(raw: Any) -> list[str]:
    """RabbitMQ's ``tags``: a comma-separated string or a list."""
    if isinstance(raw, list):
        tags = [str(t).strip() for t in raw if str(t).strip()]
    elif isinstance(raw, str):
        tags = [t.strip() for t in raw.split(",") if t.strip()]
    else:
        raise BadRequest("tags: must be a string or a list")
    unknown = [t for t in tags if t not in TAGS]
    if unknown:
        raise BadRequest(f"tags: {', '.join(unknown)} unknown (oxiedge knows "
                         f"{', '.join(TAGS)})")
    return tags


def node_routes(router: Router, broker: BrokerView) -> None:
    """``/api/nodes``, the health checks and ``/api/aliveness-test``."""

    def nodes(_req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
        return json_response([node_json(broker)])

    def node(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        return json_response(node_json(broker)) if args[0] == broker.node else not_found()

    def alarms(_req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
        found = _alarms(broker)
        if found:
            return _failed("There are alarms in effect in the cluster", alarms=found)
        return _ok()

    def port_listener(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        raw = args[0]
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 5) or not 0 < int(raw) < 65536:
            raise BadRequest(f"port: {raw[:20]!r} is not a port number")
        ports = sorted({int(x["port"]) for x in broker.listeners()
                        if isinstance(x.get("port"), int)})
        if int(raw) in ports:
            return _ok(port=int(raw))
        return _failed("No active listener", missing=int(raw), ports=ports)

    def protocol_listener(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        wanted = PROTOCOLS.get(args[0].lower())
        if wanted is None:
            raise BadRequest(f"protocol: {args[0][:40]!r} is unknown (known: "
                             f"{', '.join(sorted(PROTOCOLS))})")
        protocols = sorted({str(x["protocol"]) for x in broker.listeners()})
        if wanted in protocols:
            return _ok(protocol=args[0])
        return _failed("No active listener", missing=args[0], protocols=protocols)

    def fine(_req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
        return _ok()

    def aliveness(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        _vhost(args[0])
        problem = broker.durable_problem() or broker.not_ready()
        return _failed(problem) if problem else _ok()

    router.add("GET", "/api/nodes", Need.READ, nodes)
    router.add("GET", "/api/nodes/*", Need.READ, node)
    for path in ("alarms", "local-alarms"):
        router.add("GET", f"/api/health/checks/{path}", Need.READ, alarms)
    router.add("GET", "/api/health/checks/port-listener/*", Need.READ, port_listener)
    router.add("GET", "/api/health/checks/protocol-listener/*", Need.READ, protocol_listener)
    for path in ("virtual-hosts", "node-is-quorum-critical"):
        router.add("GET", f"/api/health/checks/{path}", Need.READ, fine)
    router.add("GET", "/api/aliveness-test/*", Need.READ, aliveness)


def permission_rows(broker: BrokerView, user: str | None = None) -> list[dict[str, Any]]:
    rows = []
    for name, entry in sorted(broker.permissions().items()):
        if user is not None and name != user:
            continue
        for vhost, perms in sorted((entry.get("vhosts") or {}).items()):
            rows.append({"user": name, "vhost": vhost, "configure": perms.get("configure", ""),
                         "write": perms.get("write", ""), "read": perms.get("read", "")})
    return rows


def user_routes(router: Router, broker: BrokerView) -> None:
    """``/api/users`` and ``/api/permissions`` (administrator only, as in RabbitMQ)."""

    def user_json(row: dict[str, Any]) -> dict[str, Any]:
        # (the stored hash, as RabbitMQ serves its own to administrators)
        return {"name": row["name"], "tags": list(row.get("tags") or []), "limits": {},
                "password_hash": row.get("password_hash") or "",
                "hashing_algorithm": "rabbit_password_hashing_pbkdf2_sha256"}

    def users(_req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
        return json_response([user_json(u) for u in broker.users()])

    def user(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        for u in broker.users():
            if u["name"] == args[0]:
                return json_response(user_json(u))
        return not_found()

    def user_permissions(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        if not any(u["name"] == args[0] for u in broker.users()):
            return not_found()
        return json_response(permission_rows(broker, args[0]))

    def permissions(_req: Request, _who: Principal, _args: tuple[str, ...]) -> Response:
        return json_response(permission_rows(broker))

    def permission(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        _vhost(args[0])
        rows = [r for r in permission_rows(broker, args[1]) if r["vhost"] == args[0]]
        return json_response(rows[0]) if rows else not_found()

    async def put_user(req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        name = args[0]
        if not user_name_ok(name):
            raise BadRequest(f"name: {USER_NAME_RULE}")
        body = body_object(req)
        password, stored = body.get("password"), body.get("password_hash")
        if password is not None and not isinstance(password, str):
            raise BadRequest("password: must be a string")
        if stored is not None and not isinstance(stored, str):
            raise BadRequest("password_hash: must be a string")
        if not password and not stored:
            raise BadRequest("password: give password or password_hash")
        tags = _tag_list(body.get("tags", ""))
        added = await broker.put_user(name, password.encode() if password else None,
                                      None if password else stored)
        await broker.operate("permissions.apply", {"op": "tags", "args": {
            "user": name, "tags": tags or ["none"]}})
        return Response(201) if added else Response(204)

    async def delete_user(_req: Request, _who: Principal, args: tuple[str, ...]) -> Response:
        await broker.delete_user(args[0])
        return Response(204)

    def _known(name: str) -> None:
        if not any(u["name"] == name for u in broker.users()):
            raise BadRequest(f"user {name!r} does not exist", 404, "Object Not Found")

    async def put_permission(req: Request, _who: Principal, args: tuple[str, ...]
                             ) -> Response:
        _vhost(args[0])
        _known(args[1])
        body = body_object(req)
        perms = {}
        for op in ("configure", "write", "read"):
            if not isinstance(body.get(op), str):
                raise BadRequest(f"{op}: must be a string (a regular expression)")
            perms[op] = body[op]
        existed = bool(permission_rows(broker, args[1]))
        await broker.operate("permissions.apply", {"op": "set", "args": {
            "user": args[1], "vhost": VHOST, **perms}})
        return Response(204) if existed else Response(201)

    async def delete_permission(_req: Request, _who: Principal, args: tuple[str, ...]
                                ) -> Response:
        _vhost(args[0])
        if not permission_rows(broker, args[1]):
            raise BadRequest(f"user {args[1]!r} has no permissions in vhost '/'", 404,
                             "Object Not Found")
        await broker.operate("permissions.apply", {"op": "clear", "args": {
            "user": args[1], "vhost": VHOST}})
        return Response(204)

    def topic_rows(user: str | None) -> list[dict[str, Any]]:
        rows = []
        for name, entry in sorted(broker.permissions().items()):
            if user is not None and name != user:
                continue
            for vhost, exchanges in sorted((entry.get("topics") or {}).items()):
                for exchange, p in sorted(exchanges.items()):
                    rows.append({"user": name, "vhost": vhost, "exchange": exchange,
                                 "write": p.get("write", ""), "read": p.get("read", "")})
        return rows

    def topic_permissions(_req: Request, _who: Principal, args: tuple[str, ...]
                          ) -> Response:
        if args:
            _vhost(args[0])
            _known(args[1])
        return json_response(topic_rows(args[1] if args else None))

    async def put_topic_permission(req: Request, _who: Principal, args: tuple[str, ...]
                                   ) -> Response:
        _vhost(args[0])
        _known(args[1])
        body = body_object(req)
        for field in ("exchange", "write", "read"):
            if not isinstance(body.get(field), str):
                raise BadRequest(f"{field}: must be a string")
        await broker.operate("permissions.apply", {"op": "set_topic", "args": {
            "user": args[1], "vhost": VHOST, "exchange": body["exchange"],
            "write": body["write"], "read": body["read"]}})
        return Response(204)

    async def delete_topic_permission(_req: Request, _who: Principal, args: tuple[str, ...]
                                      ) -> Response:
        _vhost(args[0])
        if not topic_rows(args[1]):
            raise BadRequest(f"user {args[1]!r} has no topic permissions in vhost '/'", 404,
                             "Object Not Found")
        await broker.operate("permissions.apply", {"op": "clear_topic", "args": {
            "user": args[1], "vhost": VHOST}})
        return Response(204)

    router.add("PUT", "/api/users/*", Need.ADMIN, put_user)
    router.add("DELETE", "/api/users/*", Need.ADMIN, delete_user)
    router.add("PUT", "/api/permissions/*/*", Need.ADMIN, put_permission)
    router.add("DELETE", "/api/permissions/*/*", Need.ADMIN, delete_permission)
    router.add("GET", "/api/topic-permissions", Need.ADMIN, topic_permissions)
    router.add("GET", "/api/topic-permissions/*/*", Need.ADMIN, topic_permissions)
    router.add("PUT", "/api/topic-permissions/*/*", Need.ADMIN, put_topic_permission)
    router.add("DELETE", "/api/topic-permissions/*/*", Need.ADMIN, delete_topic_permission)
    router.add("GET", "/api/users", Need.ADMIN, users)
    router.add("GET", "/api/users/*", Need.ADMIN, user)
    router.add("GET", "/api/users/*/permissions", Need.ADMIN, user_permissions)
    router.add("GET", "/api/permissions", Need.ADMIN, permissions)
    router.add("GET", "/api/permissions/*/*", Need.ADMIN, permission)
