"""Changes to a permissions document, by name: run by a running server for the admin
operation ``permissions.apply`` (the server owns ``DATA/permissions.json``, so a CLI user
who may only use the admin socket can still change rules), or by the CLI on the file itself
when no server runs. Same function, same checks, either way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .mosquitto import merge_acl
from .rules import (
    ACL_ACCESS,
    DEFAULTS,
    TAGS,
    PermissionError_,
    check_acl_topic,
    compile_regex,
)

Doc = dict[str, Any]


def _s(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str):
        raise PermissionError_(f"missing argument {key!r}")
    return value


def _set(doc: Doc, a: dict[str, Any]) -> str:
    user, vhost = _s(a, "user"), _s(a, "vhost")
    perms = {op: _s(a, op) for op in ("configure", "write", "read")}
    for value in perms.values():
        compile_regex(value)
    doc["users"].setdefault(user, {}).setdefault("vhosts", {})[vhost] = perms
    return f"permissions of {user} in vhost {vhost} set"


def _clear(doc: Doc, a: dict[str, Any]) -> str:
    user, vhost = _s(a, "user"), _s(a, "vhost")
    entry = doc["users"].get(user, {})
    if entry.get("vhosts", {}).pop(vhost, None) is None:
        raise PermissionError_(f"{user} has no permissions in vhost {vhost}")
    if not entry.get("vhosts"):
        entry.pop("vhosts", None)
    return f"permissions of {user} in vhost {vhost} cleared"


def _set_topic(doc: Doc, a: dict[str, Any]) -> str:
    user, vhost, exchange = _s(a, "user"), _s(a, "vhost"), _s(a, "exchange")
    perms = {op: _s(a, op) for op in ("write", "read")}
    for value in perms.values():
        compile_regex(value)
    topics = doc["users"].setdefault(user, {}).setdefault("topics", {})
    topics.setdefault(vhost, {})[exchange] = perms
    return f"topic permissions of {user} on {exchange} in vhost {vhost} set"


def _clear_topic(doc: Doc, a: dict[str, Any]) -> str:
    user, vhost, exchange = _s(a, "user"), _s(a, "vhost"), a.get("exchange")
    entry = doc["users"].get(user, {})
    per_vhost = entry.get("topics", {}).get(vhost, {})
    if exchange is None:
        found = bool(per_vhost)
        per_vhost.clear()
    else:
        found = per_vhost.pop(exchange, None) is not None
    if not found:
        raise PermissionError_(f"{user} has no topic permissions to clear in vhost {vhost}")
    entry["topics"] = {v: x for v, x in entry.get("topics", {}).items() if x}
    if not entry["topics"]:
        entry.pop("topics")
    return f"topic permissions of {user} in vhost {vhost} cleared"


def _default(doc: Doc, a: dict[str, Any]) -> str:
    proto, policy = _s(a, "protocol"), _s(a, "policy")
    if proto not in ("mqtt", "amqp") or policy not in DEFAULTS:
        raise PermissionError_("expected protocol mqtt|amqp and policy allow|deny")
    doc["default"][proto] = policy
    return f"{proto} default: {policy}"


def _acl_lines(doc: Doc, a: dict[str, Any]) -> list[list[str]]:
    kind = _s(a, "for")
    if kind == "pattern":
        return doc["patterns"]
    if kind == "anonymous":
        return doc["anonymous_acl"]
    if kind == "user":
        return doc["users"].setdefault(_s(a, "user"), {}).setdefault("acl", [])
    raise PermissionError_("'for' must be user, pattern or anonymous")


def _acl_line(a: dict[str, Any]) -> list[str]:
    access, topic = _s(a, "access"), _s(a, "topic")
    if access not in ACL_ACCESS:
        raise PermissionError_(f"access must be one of {', '.join(ACL_ACCESS)}")
    check_acl_topic(topic)
    return [access, topic]


def _acl_add(doc: Doc, a: dict[str, Any]) -> str:
    line = _acl_line(a)
    lines = _acl_lines(doc, a)
    if line not in lines:
        lines.append(line)
    return f"acl: {line[0]} {line[1]} added"


def _acl_remove(doc: Doc, a: dict[str, Any]) -> str:
    line = _acl_line(a)
    lines = _acl_lines(doc, a)
    if line not in lines:
        raise PermissionError_(f"no such acl line: {line[0]} {line[1]}")
    lines.remove(line)
    if a.get("for") == "user" and not lines:
        doc["users"][_s(a, "user")].pop("acl", None)
    return f"acl: {line[0]} {line[1]} removed"


def _tags(doc: Doc, a: dict[str, Any]) -> str:
    user, tags = _s(a, "user"), a.get("tags")
    if not isinstance(tags, list) or any(t not in TAGS for t in tags):
        raise PermissionError_(f"tags must be among {', '.join(TAGS)}")
    entry = doc["users"].setdefault(user, {})
    if tags and tags != ["none"]:
        entry["tags"] = list(tags)
    else:
        entry.pop("tags", None)
        if not entry:
            doc["users"].pop(user)
    return f"tags of {user}: {','.join(tags) or 'none'}"


def _forget(doc: Doc, a: dict[str, Any]) -> str:
    user = _s(a, "user")
    doc["users"].pop(user, None)
    return f"rules of {user} removed"


def _import_acl(doc: Doc, a: dict[str, Any]) -> str:
    acl = a.get("acl")
    if not isinstance(acl, dict):
        raise PermissionError_("missing argument 'acl'")
    merge_acl(doc, acl)
    return "acl imported"


OPS: dict[str, Callable[[Doc, dict[str, Any]], str]] = {
    "set": _set, "clear": _clear, "set_topic": _set_topic, "clear_topic": _clear_topic,
    "default": _default, "acl_add": _acl_add, "acl_remove": _acl_remove, "tags": _tags,
    "forget": _forget, "import_acl": _import_acl,
}


def apply(doc: Doc, op: str, args: dict[str, Any]) -> str:
    """Change ``doc`` in place; ``PermissionError_`` says why not (nothing is written then)."""
    change = OPS.get(op)
    if change is None:
        raise PermissionError_(f"unknown permissions change {op!r}")
    return change(doc, args)
