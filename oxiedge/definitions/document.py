"""The definitions document, built and checked (sans-IO).

Theory of operation
-------------------
The document is RabbitMQ's (``rabbitmqadmin export``, ``GET /api/definitions``): ``users``
with their stored password hashes, ``vhosts`` (oxiedge has one, ``/``), ``permissions``,
``topic_permissions``, and the durable ``queues``, ``exchanges`` (not the built-in ones) and
``bindings``. What RabbitMQ has no section for is under one ``oxiedge`` key, which RabbitMQ's
tools ignore: ``ingest`` (stored ingest routes with their retention), ``indexes``, ``acl``
(the MQTT topic ACL lines per user, the anonymous client's, the ``pattern`` lines and the
default policy per protocol) and ``uplinks`` (stored uplinks). An uplink's password never
appears in the document: its URL holds a reference ``${OXIEDGE_SECRET_UPLINK_NAME}`` that an
import resolves from the importer's environment (:func:`resolve_urls`).

Everything is sorted by name, so an export of the same state is the same document byte for
byte, and export → import into an empty data dir → export gives the document again.

:func:`check` reads a document to import, field by field: every section a list of objects
with the fields and types the export writes; the first problem is an ``OperationError``
(``bad_request``) naming the field (``queues[3].durable: must be true or false``). It
returns the :class:`Wanted` objects; ``plan.py`` compares them with the current state.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .. import __version__
from ..auth import USER_NAME_RULE, user_name_ok
from ..operations import BAD_REQUEST, OperationError

VHOST = "/"
#: Objects one import may hold, all sections together (a bound on the work of one import).
MAX_OBJECTS = 20_000
#: The tags oxiedge knows (RabbitMQ's ``policymaker`` and ``impersonator`` are dropped).
KNOWN_TAGS = ("administrator", "monitoring", "management")
#: Password hashes oxiedge can verify: its own, and Mosquitto's ``$7$`` / ``$6$``.
HASH_PREFIXES = ("pbkdf2_sha256$", "$7$", "$6$")
SECRET = re.compile(r"\$\{(OXIEDGE_SECRET_[A-Z0-9_]+)\}")


@dataclass(frozen=True, slots=True)
class State:
    """What a data dir holds that the document describes (``state.py`` reads it)."""

    users: list[tuple[str, str]]  # (name, stored hash), from the password file
    permissions: dict[str, Any]  # DATA/permissions.json, validated (access/rules.py)
    queues: list[dict[str, Any]]  # the ``_amqp`` documents of durable queues
    exchanges: list[dict[str, Any]]
    bindings: list[dict[str, Any]]
    ingest: list[dict[str, Any]]  # {"filter", "collection", "max_docs"?, "max_age"?}
    indexes: list[dict[str, Any]]  # {"collection", "field"}
    uplinks: list[dict[str, Any]]  # stored definitions, with their passwords


@dataclass(slots=True)
class Wanted:
    """A checked document's objects, section by section, as the export writes them."""

    users: list[dict[str, Any]] = field(default_factory=list)
    permissions: list[dict[str, Any]] = field(default_factory=list)
    topic_permissions: list[dict[str, Any]] = field(default_factory=list)
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    queues: list[dict[str, Any]] = field(default_factory=list)
    bindings: list[dict[str, Any]] = field(default_factory=list)
    ingest: list[dict[str, Any]] = field(default_factory=list)
    indexes: list[dict[str, Any]] = field(default_factory=list)
    acl: dict[str, Any] = field(default_factory=dict)
    uplinks: list[dict[str, Any]] = field(default_factory=list)


# ------------------------------------------------------------------------------ export
def algorithm(stored: str) -> str:
    """``hashing_algorithm`` of a stored hash (RabbitMQ cannot verify any of them)."""
    if stored.startswith("$7$"):
        return "mosquitto_pbkdf2_sha512"
    if stored.startswith("$6$"):
        return "mosquitto_sha512"
    return "oxiedge_pbkdf2_sha256"


def export(state: State) -> dict[str, Any]:
    """The document of ``state`` (see the module docstring)."""
    perms = state.permissions.get("users", {})
    permissions, topic_permissions = [], []
    for name, entry in sorted(perms.items()):
        for vhost, p in sorted((entry.get("vhosts") or {}).items()):
            permissions.append({"user": name, "vhost": vhost, "configure": p["configure"],
                                "write": p["write"], "read": p["read"]})
        for vhost, exchanges in sorted((entry.get("topics") or {}).items()):
            for exchange, p in sorted(exchanges.items()):
                topic_permissions.append({"user": name, "vhost": vhost, "exchange": exchange,
                                          "write": p["write"], "read": p["read"]})
    users = [{"name": name, "password_hash": stored, "hashing_algorithm": algorithm(stored),
              "tags": list((perms.get(name) or {}).get("tags") or []), "limits": {}}
             for name, stored in sorted(state.users)]
    return {
        "rabbit_version": __version__, "rabbitmq_version": __version__,
        "product_name": "oxiedge", "product_version": __version__,
        "users": users,
        "vhosts": [{"name": VHOST, "limits": [], "metadata": {"description": "", "tags": []}}],
        "permissions": permissions, "topic_permissions": topic_permissions,
        "parameters": [], "global_parameters": [], "policies": [],
        "queues": sorted((queue_json(d) for d in state.queues), key=lambda q: q["name"]),
        "exchanges": sorted((exchange_json(d) for d in state.exchanges),
                            key=lambda x: x["name"]),
        "bindings": sorted((binding_json(d) for d in state.bindings), key=binding_key),
        "oxiedge": {
            "ingest": sorted((ingest_json(r) for r in state.ingest),
                             key=lambda r: (r["filter"], r["collection"])),
            "indexes": sorted(({"collection": i["collection"], "field": i["field"]}
                               for i in state.indexes),
                              key=lambda i: (i["collection"], i["field"])),
            "acl": acl_json(state.permissions),
            "uplinks": sorted((uplink_json(u) for u in state.uplinks),
                              key=lambda u: u["name"]),
        },
    }


def queue_json(doc: dict[str, Any]) -> dict[str, Any]:
    return {"name": doc["name"], "vhost": VHOST, "durable": True,
            "auto_delete": bool(doc.get("auto_delete")), "arguments": doc.get("arguments") or {}}


def exchange_json(doc: dict[str, Any]) -> dict[str, Any]:
    return {"name": doc["name"], "vhost": VHOST, "type": doc["type"], "durable": True,
            "auto_delete": bool(doc.get("auto_delete")), "internal": bool(doc.get("internal")),
            "arguments": doc.get("arguments") or {}}


def binding_json(doc: dict[str, Any]) -> dict[str, Any]:
    to_exchange = "destination_exchange" in doc
    return {"source": doc["exchange"], "vhost": VHOST,
            "destination": doc["destination_exchange"] if to_exchange else doc["queue"],
            "destination_type": "exchange" if to_exchange else "queue",
            "routing_key": doc.get("routing_key", ""), "arguments": doc.get("arguments") or {}}


def binding_key(b: dict[str, Any]) -> tuple[str, str, str, str, str]:
    return (b["source"], b["destination_type"], b["destination"], b.get("routing_key", ""),
            json.dumps(b.get("arguments") or {}, sort_keys=True))


def ingest_json(route: dict[str, Any]) -> dict[str, Any]:
    out = {"filter": route["filter"], "collection": route["collection"]}
    for key in ("max_docs", "max_age"):
        if route.get(key) is not None:
            out[key] = route[key]
    return out


def acl_json(perms: dict[str, Any]) -> dict[str, Any]:
    users = {name: [list(line) for line in entry["acl"]]
             for name, entry in sorted(perms.get("users", {}).items()) if entry.get("acl")}
    return {"default": dict(perms.get("default") or {"mqtt": "allow", "amqp": "allow"}),
            "anonymous": [list(x) for x in perms.get("anonymous_acl") or []],
            "patterns": [list(x) for x in perms.get("patterns") or []],
            "users": users}


# ----------------------------------------------------------------------------- secrets
def secret_name(uplink: str, index: int = 0) -> str:
    """The environment variable an export names for an uplink's password."""
    base = "OXIEDGE_SECRET_UPLINK_" + re.sub(r"[^A-Z0-9]", "_", uplink.upper())
    return base if index == 0 else f"{base}_{index + 1}"


def _split(url: str) -> tuple[str, str, str | None, str] | None:
    """``(scheme://, user, password or None, rest)`` of a URL with credentials."""
    head, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return None
    cred, _, tail = rest.rpartition("@")
    user, colon, password = cred.partition(":")
    return head + sep, user, password if colon else None, tail


def uplink_json(doc: dict[str, Any]) -> dict[str, Any]:
    """A stored uplink definition with each URL's password replaced by a reference."""
    out = {k: v for k, v in doc.items() if k not in ("_kind", "_id", "_version", "retired_in")}
    urls, first = [], None
    for i, url in enumerate(doc.get("urls") or []):
        parts = _split(str(url))
        if parts is None or parts[2] is None:
            urls.append(url)
            continue
        head, user, password, tail = parts
        first = password if first is None else first
        ref = secret_name(str(doc["name"]), 0 if password == first else i)
        urls.append(f"{head}{user}:${{{ref}}}@{tail}")
    out["urls"] = urls
    return out


def references(urls: list[str]) -> list[str]:
    """The secret names the URLs refer to."""
    return [m.group(1) for url in urls for m in SECRET.finditer(url)]


def resolve_urls(urls: list[str], secrets: dict[str, str]) -> list[str]:
    """``urls`` with each reference replaced by its percent-encoded secret (a missing one
    is a ``KeyError`` naming it)."""
    from urllib.parse import quote

    return [SECRET.sub(lambda m: quote(secrets[m.group(1)], safe=""), url) for url in urls]


def strip_password(url: str) -> str:
    """``url`` with its password (or reference) left out: what two definitions of one
    uplink are compared by when the document's secret was not given."""
    parts = _split(url)
    if parts is None:
        return url
    head, user, _password, tail = parts
    return f"{head}{user}@{tail}"


# ------------------------------------------------------------------------------- check
_Spec = tuple[tuple[str, ...], dict[str, type | tuple[type, ...]]]
#: section -> (required string fields, optional fields with their JSON types)
_SECTIONS: dict[str, _Spec] = {
    "users": (("name",), {"tags": (str, list), "password_hash": str}),
    "permissions": (("user", "vhost", "configure", "write", "read"), {}),
    "topic_permissions": (("user", "vhost", "exchange", "write", "read"), {}),
    "exchanges": (("name", "type"), {"vhost": str, "durable": bool, "auto_delete": bool,
                                     "internal": bool, "arguments": dict}),
    "queues": (("name",), {"vhost": str, "durable": bool, "auto_delete": bool,
                           "arguments": dict}),
    "bindings": (("source", "destination", "destination_type"),
                 {"vhost": str, "routing_key": str, "arguments": dict}),
}
_OXIEDGE: dict[str, _Spec] = {
    "ingest": (("filter", "collection"), {"max_docs": int, "max_age": (str, int, float)}),
    "indexes": (("collection", "field"), {}),
    "uplinks": (("name",), {"urls": list, "out": list, "in": list}),
}
_TYPE_NAMES = {bool: "true or false", dict: "an object", list: "a list", str: "a string",
               int: "an integer"}


def _bad(where: str, problem: str) -> OperationError:
    return OperationError(f"{where}: {problem}", BAD_REQUEST)


def _items(where: str, items: Any, spec: _Spec, total: list[int]) -> list[dict[str, Any]]:
    required, optional = spec
    if not isinstance(items, list):
        raise _bad(where, "must be a list")
    total[0] += len(items)
    if total[0] > MAX_OBJECTS:
        raise _bad(where, f"more than {MAX_OBJECTS} objects in one import")
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise _bad(at, "must be an object")
        for key in required:
            if not isinstance(item.get(key), str):
                raise _bad(f"{at}.{key}", "must be a string")
        for key, kind in optional.items():
            value = item.get(key)
            if value is None:
                continue
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                want = _TYPE_NAMES.get(kind, "another type") if isinstance(kind, type) \
                    else " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kind)
                raise _bad(f"{at}.{key}", f"must be {want}, not {value!r}")
        if item.get("vhost", VHOST) != VHOST:
            raise _bad(f"{at}.vhost", f"{item['vhost']!r} is not '/' (oxiedge has one vhost)")
    return items


def check(doc: Any) -> Wanted:
    """The objects of ``doc`` to import, every field checked (see the module docstring)."""
    if not isinstance(doc, dict):
        raise _bad("document", "must be a JSON object")
    total = [0]
    wanted = Wanted()
    for section, spec in _SECTIONS.items():
        setattr(wanted, section, _items(section, doc.get(section, []), spec, total))
    for u, item in enumerate(wanted.users):
        if not user_name_ok(item["name"]):
            raise _bad(f"users[{u}].name", USER_NAME_RULE)
    for b, item in enumerate(wanted.bindings):
        if item["destination_type"] not in ("queue", "exchange"):
            raise _bad(f"bindings[{b}].destination_type", "must be queue or exchange")
    extra = doc.get("oxiedge", {})
    if not isinstance(extra, dict):
        raise _bad("oxiedge", "must be an object")
    for section, spec in _OXIEDGE.items():
        setattr(wanted, section, _items(f"oxiedge.{section}", extra.get(section, []), spec,
                                        total))
    wanted.acl = _check_acl(extra.get("acl", {}))
    return wanted


def _check_acl(acl: Any) -> dict[str, Any]:
    if not isinstance(acl, dict):
        raise _bad("oxiedge.acl", "must be an object")
    out: dict[str, Any] = {"default": {}, "anonymous": [], "patterns": [], "users": {}}
    default = acl.get("default", {})
    if not isinstance(default, dict):
        raise _bad("oxiedge.acl.default", "must be an object")
    for proto, policy in default.items():
        if proto not in ("mqtt", "amqp") or policy not in ("allow", "deny"):
            raise _bad(f"oxiedge.acl.default.{proto}", "must be mqtt or amqp: allow or deny")
        out["default"][proto] = policy
    for key in ("anonymous", "patterns"):
        out[key] = _lines(f"oxiedge.acl.{key}", acl.get(key, []))
    users = acl.get("users", {})
    if not isinstance(users, dict):
        raise _bad("oxiedge.acl.users", "must be an object")
    for name, lines in users.items():
        out["users"][name] = _lines(f"oxiedge.acl.users.{name}", lines)
    return out


def _lines(where: str, lines: Any) -> list[list[str]]:
    from ..access.rules import ACL_ACCESS, PermissionError_, check_acl_topic

    if not isinstance(lines, list):
        raise _bad(where, "must be a list of [access, topic]")
    for i, line in enumerate(lines):
        if (not isinstance(line, list) or len(line) != 2 or line[0] not in ACL_ACCESS
                or not isinstance(line[1], str)):
            raise _bad(f"{where}[{i}]", f"{line!r} is not [read|write|readwrite|deny, topic]")
        try:
            check_acl_topic(line[1])
        except PermissionError_ as exc:
            raise _bad(f"{where}[{i}]", str(exc)) from None
    return [list(line) for line in lines]
