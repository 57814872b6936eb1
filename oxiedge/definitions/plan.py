"""What an import would change: a checked document compared with the current state.

Theory of operation
-------------------
:func:`plan` turns the :class:`~.document.Wanted` objects into :class:`Step`\\ s in the
order an import applies them (RabbitMQ's: users, permissions, topic permissions, exchanges,
queues, bindings; then oxiedge's: ACLs, ingest routes, indexes, uplinks). A step is
``create``, ``update`` or ``same`` (already there alike: nothing to do, so an import is
idempotent), or ``skipped`` (a user whose hash oxiedge cannot verify). Each step that
changes something names the admin operation that does it (docs/operations.md), so an
import goes through the same code as ``oxiedge queue declare``, ``oxiedge ingest add``...

Every value is checked here, before anything changes: queue and exchange arguments as a
client's declare checks them, regular expressions, topic filters, routes, retention
policies, index fields, uplink definitions (with their secrets resolved), and that each
binding's source and destination exist or are declared by the document. A queue or
exchange that exists with other properties is refused too (a client's declare would fail
with 406 halfway through). The first problem is an ``OperationError`` naming the field, and
nothing has been applied.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..operations import BAD_REQUEST, REFUSED, OperationError
from .document import (
    HASH_PREFIXES,
    KNOWN_TAGS,
    State,
    Wanted,
    acl_json,
    binding_key,
    exchange_json,
    queue_json,
    references,
    resolve_urls,
    strip_password,
)

CREATE, UPDATE, SAME, SKIPPED = "create", "update", "same", "skipped"
BUILTIN_EXCHANGES = ("", "amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match")
EXCHANGE_TYPES = ("direct", "fanout", "topic", "headers")
USER_PUT = "user.put"  # a step the operation runs itself (the password file), not the table


@dataclass(frozen=True, slots=True)
class Step:
    """One object of the document and what the import does with it."""

    section: str
    name: str
    action: str  # CREATE, UPDATE, SAME, SKIPPED
    detail: str = ""
    op: str = ""  # the admin operation that applies it ("" when there is nothing to do)
    args: dict[str, Any] = field(default_factory=dict, compare=False)

    def row(self) -> dict[str, Any]:
        return {"section": self.section, "name": self.name, "action": self.action,
                "detail": self.detail}


def _bad(where: str, problem: str, kind: str = BAD_REQUEST) -> OperationError:
    return OperationError(f"{where}: {problem}", kind)


def _tags(raw: Any) -> list[str]:
    items = raw if isinstance(raw, list) else str(raw or "").split(",")
    return [t for t in (str(x).strip() for x in items) if t in KNOWN_TAGS]


def _regex(where: str, pattern: str) -> None:
    from ..access.rules import PermissionError_, compile_regex

    try:
        compile_regex(pattern)
    except PermissionError_ as exc:
        raise _bad(where, str(exc)) from None


def plan(wanted: Wanted, state: State, secret: Callable[[str], str | None]) -> list[Step]:
    """The steps of importing ``wanted`` into ``state``; ``secret(name)`` resolves an uplink
    password reference (None: not given)."""
    steps = _users(wanted, state)
    steps += _permissions(wanted, state)
    steps += _exchanges(wanted, state)
    steps += _queues(wanted, state)
    steps += _bindings(wanted, state)
    steps += _acl(wanted, state)
    steps += _ingest(wanted, state)
    steps += _indexes(wanted, state)
    steps += _uplinks(wanted, state, secret)
    return steps


def _users(wanted: Wanted, state: State) -> list[Step]:
    known = dict(state.users)
    perms = state.permissions.get("users", {})
    steps = []
    for u in wanted.users:
        name, stored = u["name"], u.get("password_hash")
        if not name or ":" in name:
            raise _bad(f"users[{wanted.users.index(u)}].name", f"invalid user name {name!r}")
        tags = _tags(u.get("tags"))
        if name not in known:
            if not isinstance(stored, str) or not stored.startswith(HASH_PREFIXES):
                steps.append(Step("users", name, SKIPPED, "a password hash oxiedge cannot "
                                  "verify (add the user with `oxiedge user add`)"))
                continue
            steps.append(Step("users", name, CREATE, ",".join(tags), USER_PUT,
                              {"name": name, "hash": stored, "tags": tags}))
        elif tags != list((perms.get(name) or {}).get("tags") or []) and "tags" in u:
            steps.append(Step("users", name, UPDATE, "tags " + (",".join(tags) or "none"),
                              "permissions.apply",
                              {"op": "tags", "args": {"user": name, "tags": tags or ["none"]}}))
        else:
            steps.append(Step("users", name, SAME))
    return steps


def _permissions(wanted: Wanted, state: State) -> list[Step]:
    perms = state.permissions.get("users", {})
    steps = []
    for i, p in enumerate(wanted.permissions):
        rules = {k: p[k] for k in ("configure", "write", "read")}
        for k, v in rules.items():
            _regex(f"permissions[{i}].{k}", v)
        have = (perms.get(p["user"]) or {}).get("vhosts", {}).get(p["vhost"])
        action = SAME if have == rules else UPDATE if have else CREATE
        steps.append(Step("permissions", p["user"], action, json.dumps(rules),
                          "" if action == SAME else "permissions.apply",
                          {"op": "set", "args": {"user": p["user"], "vhost": p["vhost"],
                                                 **rules}}))
    for i, p in enumerate(wanted.topic_permissions):
        rules = {k: p[k] for k in ("write", "read")}
        for k, v in rules.items():
            _regex(f"topic_permissions[{i}].{k}", v)
        have = ((perms.get(p["user"]) or {}).get("topics", {}).get(p["vhost"], {})
                .get(p["exchange"]))
        action = SAME if have == rules else UPDATE if have else CREATE
        steps.append(Step("topic_permissions", f"{p['user']} {p['exchange']}", action,
                          json.dumps(rules), "" if action == SAME else "permissions.apply",
                          {"op": "set_topic", "args": {
                              "user": p["user"], "vhost": p["vhost"],
                              "exchange": p["exchange"], **rules}}))
    return steps


def _amqp_check(where: str, check: Callable[..., Any], *args: Any, **kw: Any) -> None:
    from ..amqp.errors import AmqpError

    try:
        check(*args, **kw)
    except AmqpError as exc:
        raise _bad(where, str(exc)) from None


def _exchanges(wanted: Wanted, state: State) -> list[Step]:
    from ..amqp.arguments import check_exchange_args

    have = {d["name"]: exchange_json(d) for d in state.exchanges}
    steps = []
    for i, x in enumerate(wanted.exchanges):
        where, name = f"exchanges[{i}]", x["name"]
        if name in BUILTIN_EXCHANGES:
            steps.append(Step("exchanges", name, SAME, "built in"))
            continue
        if name.startswith("amq."):
            raise _bad(f"{where}.name", f"{name!r}: the amq. prefix is reserved")
        if x["type"] not in EXCHANGE_TYPES:
            raise _bad(f"{where}.type", f"must be one of {', '.join(EXCHANGE_TYPES)}")
        args = x.get("arguments") or {}
        _amqp_check(f"{where}.arguments", check_exchange_args,
                    f"exchange '{name}' in vhost '/'", args)
        want = exchange_json({**x, "arguments": args})
        old = have.get(name)
        if old is not None and old != want:
            raise _bad(where, f"exchange {name!r} exists with other properties "
                       f"({_diff(old, want)})", REFUSED)
        steps.append(Step("exchanges", name, SAME if old else CREATE, x["type"],
                          "" if old else "exchange.declare",
                          {k: v for k, v in x.items() if k != "vhost"}))
    return steps


def _diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    return ", ".join(f"{k} {old.get(k)!r} here, {new.get(k)!r} in the document"
                     for k in new if old.get(k) != new.get(k))


def _queues(wanted: Wanted, state: State) -> list[Step]:
    from ..amqp.arguments import check_queue_args

    have = {d["name"]: queue_json(d) for d in state.queues}
    steps = []
    for i, q in enumerate(wanted.queues):
        where, name = f"queues[{i}]", q["name"]
        if not name or len(name.encode()) > 255 or name.startswith("amq."):
            raise _bad(f"{where}.name", f"invalid queue name {name!r}")
        args = q.get("arguments") or {}
        durable, auto_delete = q.get("durable", True), bool(q.get("auto_delete"))
        _amqp_check(f"{where}.arguments", check_queue_args, f"queue '{name}' in vhost '/'",
                    args, durable=durable, exclusive=False, auto_delete=auto_delete)
        want = queue_json({**q, "arguments": args})
        old = have.get(name)
        if old is not None and old != want:
            raise _bad(where, f"queue {name!r} exists with other properties "
                       f"({_diff(old, want)})", REFUSED)
        steps.append(Step("queues", name, SAME if old else CREATE, "",
                          "" if old else "queue.declare",
                          {"name": name, "durable": durable, "auto_delete": auto_delete,
                           "arguments": args}))
    return steps


def _bindings(wanted: Wanted, state: State) -> list[Step]:
    exchanges = {d["name"] for d in state.exchanges} | set(BUILTIN_EXCHANGES) | {
        x["name"] for x in wanted.exchanges}
    queues = {d["name"] for d in state.queues} | {q["name"] for q in wanted.queues}
    from .document import binding_json

    have = {binding_key(binding_json(d)) for d in state.bindings}
    steps = []
    for i, b in enumerate(wanted.bindings):
        where = f"bindings[{i}]"
        if b["source"] == "":
            steps.append(Step("bindings", b["destination"], SAME, "the default exchange"))
            continue
        if b["source"] not in exchanges:
            raise _bad(f"{where}.source", f"no exchange {b['source']!r} here or in the document")
        known = queues if b["destination_type"] == "queue" else exchanges
        if b["destination"] not in known:
            raise _bad(f"{where}.destination", f"no {b['destination_type']} "
                       f"{b['destination']!r} here or in the document")
        b = {**b, "routing_key": b.get("routing_key", ""), "arguments": b.get("arguments") or {}}
        name = f"{b['source']} -> {b['destination']}"
        old = binding_key(b) in have
        steps.append(Step("bindings", name, SAME if old else CREATE, b["routing_key"],
                          "" if old else "binding.add",
                          {k: v for k, v in b.items() if k != "vhost"}))
    return steps


def _acl(wanted: Wanted, state: State) -> list[Step]:
    have = acl_json(state.permissions)
    acl = wanted.acl
    steps = []
    for proto, policy in acl.get("default", {}).items():
        same = have["default"].get(proto) == policy
        steps.append(Step("acl", f"default {proto}", SAME if same else UPDATE, policy,
                          "" if same else "permissions.apply",
                          {"op": "default", "args": {"protocol": proto, "policy": policy}}))
    lines = [("anonymous", None, line) for line in acl.get("anonymous", [])]
    lines += [("pattern", None, line) for line in acl.get("patterns", [])]
    lines += [("user", user, line) for user, ls in acl.get("users", {}).items() for line in ls]
    current = {"anonymous": have["anonymous"], "pattern": have["patterns"]}
    for kind, user, line in lines:
        old = current[kind] if user is None else have["users"].get(user, [])
        args: dict[str, Any] = {"for": kind, "access": line[0], "topic": line[1]}
        if user is not None:
            args["user"] = user
        name = f"{user or kind}: {line[0]} {line[1]}"
        steps.append(Step("acl", name, SAME if line in old else CREATE, "",
                          "" if line in old else "permissions.apply",
                          {"op": "acl_add", "args": args}))
    return steps


def _ingest(wanted: Wanted, state: State) -> list[Step]:
    from ..ingest.retention import validate_policy
    from ..ingest.routes import parse_route

    have = {(r["filter"], r["collection"]): r for r in state.ingest}
    steps = []
    for i, r in enumerate(wanted.ingest):
        route = f"{r['filter']}:{r['collection']}"
        try:
            parse_route(route)
            want = validate_policy(r.get("max_docs"), r.get("max_age"))
        except ValueError as exc:
            raise _bad(f"oxiedge.ingest[{i}]", str(exc)) from None
        old = have.get((r["filter"], r["collection"]))
        same = old is not None and validate_policy(old.get("max_docs"), old.get("max_age")) == want
        action = SAME if same else UPDATE if old else CREATE
        steps.append(Step("ingest", route, action, "", "" if action == SAME else "ingest.add",
                          {"route": route, "max_docs": r.get("max_docs"),
                           "max_age": r.get("max_age")}))
    return steps


def _indexes(wanted: Wanted, state: State) -> list[Step]:
    from ..store.names import validate_collection_name

    have = {(i["collection"], i["field"]) for i in state.indexes}
    steps = []
    for n, ix in enumerate(wanted.indexes):
        where, fld = f"oxiedge.indexes[{n}]", ix["field"]
        if not fld or fld == "_id" or fld.startswith("$") or any(not p for p in fld.split(".")):
            raise _bad(f"{where}.field", f"invalid field path {fld!r}")
        try:
            validate_collection_name(ix["collection"])
        except ValueError as exc:
            raise _bad(f"{where}.collection", str(exc)) from None
        old = (ix["collection"], fld) in have
        steps.append(Step("indexes", f"{ix['collection']}.{fld}", SAME if old else CREATE, "",
                          "" if old else "index.add",
                          {"collection": ix["collection"], "field": fld}))
    return steps


def _uplinks(wanted: Wanted, state: State, secret: Callable[[str], str | None]) -> list[Step]:
    from ..uplink.definitions import parse_definition
    from ..uplink.link import UplinkError

    have = {str(d["name"]): d for d in state.uplinks}
    steps = []
    for i, u in enumerate(wanted.uplinks):
        where, name = f"oxiedge.uplinks[{i}]", u["name"]
        urls = [str(x) for x in u.get("urls") or []]
        refs = references(urls)
        missing = [r for r in refs if secret(r) is None]
        old = have.get(name)
        if missing:
            kept = [str(x) for x in (old or {}).get("urls") or []]
            if [strip_password(x) for x in kept] != [strip_password(x) for x in urls]:
                raise _bad(f"{where}.urls", f"secret {missing[0]} is not set: set it in the "
                           "environment of the import (the document holds no passwords)")
            urls = kept  # the same upstream: its stored password stays
        else:
            urls = resolve_urls(urls, {r: secret(r) or "" for r in refs})
        spec = {k: v for k, v in u.items() if k not in ("source", "_kind")}
        spec["urls"] = urls
        try:
            new = parse_definition(spec)
            same = old is not None and parse_definition(old, check_files=False) == new
        except UplinkError as exc:
            raise _bad(where, str(exc)) from None
        action = SAME if same else UPDATE if old else CREATE
        steps.append(Step("uplinks", name, action, ", ".join(e.redacted() for e in new.endpoints),
                          "" if action == SAME else "uplink.add", {"definition": spec}))
    return steps
