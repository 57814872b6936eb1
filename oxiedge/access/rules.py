"""The permission model shared by MQTT and AMQP, and its file ``DATA/permissions.json``.

One document holds, per user: the AMQP ``configure / write / read`` regular expressions per
vhost (RabbitMQ's ``set_permissions``), topic permissions per vhost and topic exchange
(RabbitMQ's ``set_topic_permissions``), MQTT topic ACL lines (Mosquitto's ``acl_file``:
``topic [read|write|readwrite|deny] T`` after ``user U``), and the user's tags
(``administrator`` / ``monitoring`` / ``management`` / ``none``). Besides the users: the
anonymous client's ACL lines (those before the first ``user`` line of an acl_file), the
``pattern`` lines for every client (``%u`` user, ``%c`` client id), and one default per
protocol for a user with no rule of that protocol (``allow`` keeps the behaviour of a
broker without permissions).

Pure data and matching; the per-connection cache is ``grants.py``, the CLI and the admin
socket edit the file with ``PermissionStore.update`` (atomic rewrite, an exclusive lock
against a concurrent CLI), a running server re-reads it on ``permissions.reload``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

FILE_NAME = "permissions.json"
ACL_ACCESS = ("read", "write", "readwrite", "deny")
TAGS = ("administrator", "monitoring", "management", "none")
DEFAULTS = ("allow", "deny")
#: A regexp this long is refused (a rule is configuration, not data; bounds compile time).
MAX_REGEX = 1024


class PermissionError_(ValueError):
    """A rule or the permissions file is invalid (the message says which)."""


def path_for(data: Path) -> Path:
    return data / FILE_NAME


def empty() -> dict[str, Any]:
    return {"users": {}, "anonymous_acl": [], "patterns": [],
            "default": {"mqtt": "allow", "amqp": "allow"}}


def compile_regex(pattern: str) -> re.Pattern[str]:
    """RabbitMQ matches a permission regexp anywhere in the name (``re.search``):
    ``^$`` matches nothing but the empty name, ``.*`` everything."""
    if len(pattern) > MAX_REGEX:
        raise PermissionError_(f"regular expression longer than {MAX_REGEX} characters")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise PermissionError_(f"invalid regular expression {pattern!r}: {exc}") from None


# ------------------------------------------------------------------ MQTT topic patterns
def topic_matches(pattern: str, topic: str) -> bool:
    """Does ACL ``pattern`` (``+``/``#`` wildcards) match the concrete ``topic``?
    As for subscriptions, a wildcard first level never matches a ``$`` topic (MQTT-4.7.2-1)."""
    if topic.startswith("$") and pattern[:1] in ("+", "#"):
        return False
    p = pattern.split("/")
    t = topic.split("/")
    for i, level in enumerate(p):
        if level == "#":
            return True  # also matches the parent level (MQTT-4.7.1-2)
        if i >= len(t):
            return False
        if level != "+" and level != t[i]:
            return False
    return len(p) == len(t)


def filter_covered(pattern: str, flt: str) -> bool:
    """Is every topic that subscription filter ``flt`` can match also matched by ACL
    ``pattern``? (``sensors/#`` covers ``sensors/+/temp``; ``sensors/+`` does not cover
    ``sensors/#``.) The subscribe check: a filter is granted only when a read rule covers it,
    so a wildcard subscription cannot reach past the rule."""
    if flt.startswith("$") != pattern.startswith("$") and pattern[:1] in ("+", "#"):
        return False
    if flt[:1] in ("+", "#") and pattern[:1] not in ("+", "#"):
        return False
    p = pattern.split("/")
    f = flt.split("/")
    for i, level in enumerate(p):
        if level == "#":
            return True
        if i >= len(f):
            return False
        if f[i] == "#":
            return False  # the filter reaches deeper than the pattern allows
        if level == "+":
            continue
        if f[i] != level:  # a literal pattern level covers only the same literal
            return False
    return len(p) == len(f)


def filter_overlaps(pattern: str, flt: str) -> bool:
    """Could some topic match both ``pattern`` and ``flt``? (A ``deny`` rule that only
    overlaps a filter is applied per message at delivery instead of refusing the filter.)"""
    p = pattern.split("/")
    f = flt.split("/")
    for i in range(max(len(p), len(f))):
        a = p[i] if i < len(p) else None
        b = f[i] if i < len(f) else None
        if a == "#" or b == "#":
            return True
        if a is None or b is None:
            return False
        if a != b and a != "+" and b != "+":
            return False
    return True


def check_acl_topic(topic: str) -> None:
    if not topic or "\x00" in topic:
        raise PermissionError_("an ACL topic must be non-empty, without NUL")
    levels = topic.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            raise PermissionError_(f"'#' must be a whole last level: {topic!r}")
        if "+" in level and level != "+":
            raise PermissionError_(f"'+' must be a whole level: {topic!r}")


def substitute(pattern: str, username: str | None, client_id: str) -> str | None:
    """A ``pattern`` line for one client: ``%u`` → user name, ``%c`` → client id. ``None``
    when the value is missing or holds ``/``, ``+`` or ``#`` (it would widen the rule into
    other clients' topics, so such a client gets nothing from the line, as in Mosquitto)."""
    if "%u" in pattern:
        if not username or any(c in username for c in "/+#"):
            return None
        pattern = pattern.replace("%u", username)
    if "%c" in pattern:
        if not client_id or any(c in client_id for c in "/+#"):
            return None
        pattern = pattern.replace("%c", client_id)
    return pattern


# ---------------------------------------------------------------------- validation
def validate(doc: Any) -> dict[str, Any]:
    """Check a parsed permissions document; returns it with every key present."""
    if not isinstance(doc, dict):
        raise PermissionError_("the permissions file must hold a JSON object")
    out = empty()
    users = doc.get("users", {})
    if not isinstance(users, dict):
        raise PermissionError_("'users' must be an object")
    for name, entry in users.items():
        if not isinstance(entry, dict):
            raise PermissionError_(f"user {name!r}: entry must be an object")
        out["users"][name] = _validate_user(name, entry)
    for key in ("anonymous_acl", "patterns"):
        out[key] = _validate_acl(key, doc.get(key, []))
    default = doc.get("default", {})
    if not isinstance(default, dict):
        raise PermissionError_("'default' must be an object")
    for proto in ("mqtt", "amqp"):
        value = default.get(proto, "allow")
        if value not in DEFAULTS:
            raise PermissionError_(f"default.{proto} must be 'allow' or 'deny'")
        out["default"][proto] = value
    return out


def _validate_user(name: str, entry: dict[str, Any]) -> dict[str, Any]:
    user: dict[str, Any] = {}
    tags = entry.get("tags", [])
    if not isinstance(tags, list) or any(t not in TAGS for t in tags):
        raise PermissionError_(f"user {name!r}: tags must be among {', '.join(TAGS)}")
    if tags:
        user["tags"] = list(tags)
    vhosts = entry.get("vhosts", {})
    if not isinstance(vhosts, dict):
        raise PermissionError_(f"user {name!r}: 'vhosts' must be an object")
    for vhost, perms in vhosts.items():
        if not isinstance(perms, dict):
            raise PermissionError_(f"user {name!r}: vhost {vhost!r} must be an object")
        for op in ("configure", "write", "read"):
            if not isinstance(perms.get(op), str):
                raise PermissionError_(f"user {name!r}: vhost {vhost!r} needs '{op}'")
            compile_regex(perms[op])
        user.setdefault("vhosts", {})[vhost] = {op: perms[op]
                                                for op in ("configure", "write", "read")}
    topics = entry.get("topics", {})
    if not isinstance(topics, dict):
        raise PermissionError_(f"user {name!r}: 'topics' must be an object")
    for vhost, exchanges in topics.items():
        if not isinstance(exchanges, dict):
            raise PermissionError_(f"user {name!r}: topics of {vhost!r} must be an object")
        for exchange, perms in exchanges.items():
            if not isinstance(perms, dict):
                raise PermissionError_(f"user {name!r}: topic permission must be an object")
            for op in ("write", "read"):
                if not isinstance(perms.get(op), str):
                    raise PermissionError_(f"user {name!r}: topic permission needs '{op}'")
                compile_regex(perms[op])
            user.setdefault("topics", {}).setdefault(vhost, {})[exchange] = {
                "write": perms["write"], "read": perms["read"]}
    acl = _validate_acl(f"user {name!r} acl", entry.get("acl", []))
    if acl:
        user["acl"] = acl
    return user


def _validate_acl(where: str, lines: Any) -> list[list[str]]:
    if not isinstance(lines, list):
        raise PermissionError_(f"{where}: must be a list of [access, topic]")
    out: list[list[str]] = []
    for line in lines:
        if (not isinstance(line, list) or len(line) != 2 or line[0] not in ACL_ACCESS
                or not isinstance(line[1], str)):
            raise PermissionError_(f"{where}: {line!r} is not [read|write|readwrite|deny, topic]")
        check_acl_topic(line[1])
        out.append([line[0], line[1]])
    return out


# --------------------------------------------------------------------------- store
#: The counters of refusals (``denied_total`` in ``oxiedge status`` is their sum).
DENIAL_COUNTERS = ("mqtt_publish_denied", "mqtt_subscribe_denied", "mqtt_wills_denied",
                   "mqtt_queued_dropped", "amqp_access_refused")


class PermissionStore:
    """The permissions of one data dir. ``generation`` grows on every change, so a
    connection's cached answers (``Grants``) know when to start over."""

    def __init__(self, path: Path | None, doc: dict[str, Any] | None = None) -> None:
        self.path = path
        self.doc = doc if doc is not None else empty()
        self.generation = 0
        self.active = False  # any rule or a 'deny' default at all: checks cost nothing otherwise
        self.on_change: list[Callable[[], None]] = []
        # What the rules refused (``oxiedge status`` → permissions).
        self.counters = {"mqtt_publish_denied": 0, "mqtt_subscribe_denied": 0,
                         "mqtt_wills_denied": 0, "mqtt_queued_dropped": 0, "amqp_access_refused": 0,
                         "reloads": 0}
        self.reload_failures = 0
        self.last_reload_error = ""  # a broken file refused by a reload (SIGHUP, CLI)
        self._refresh()

    @classmethod
    def load(cls, path: Path | None) -> PermissionStore:
        return cls(path, read_file(path) if path is not None else None)

    def reload(self) -> None:
        """Re-read the file; a broken one raises ``PermissionError_`` and changes nothing
        (counted in ``reload_failures``, the reason kept for ``oxiedge status``)."""
        if self.path is not None:
            try:
                self.doc = read_file(self.path)
            except PermissionError_ as exc:
                self.reload_failures += 1
                self.last_reload_error = str(exc)
                raise
        self.last_reload_error = ""
        self.counters["reloads"] += 1
        self._refresh()

    def replace(self, doc: dict[str, Any]) -> None:
        self.doc = validate(doc)
        self._refresh()

    def _refresh(self) -> None:
        doc = self.doc
        self.generation += 1
        self.active = bool(
            doc["anonymous_acl"] or doc["patterns"] or "deny" in doc["default"].values()
            or any(u.get("vhosts") or u.get("topics") or u.get("acl")
                   for u in doc["users"].values()))
        for callback in self.on_change:
            callback()

    def user(self, name: str | None) -> dict[str, Any]:
        return self.doc["users"].get(name or "", {}) if name else {}

    def tags(self, name: str) -> list[str]:
        return list(self.user(name).get("tags", []))

    def status(self) -> dict[str, Any]:
        doc, counters = self.doc, self.counters
        denied = sum(counters[k] for k in DENIAL_COUNTERS)
        return {"rules": "on" if self.active else "off (every authenticated user may do "
                "everything)", "users_with_rules": sum(
                    1 for u in doc["users"].values()
                    if u.get("vhosts") or u.get("topics") or u.get("acl")),
                "anonymous_lines": len(doc["anonymous_acl"]),
                "patterns": len(doc["patterns"]), "default": dict(doc["default"]),
                # One figure to watch: everything the rules refused, in all (the kinds below).
                "denied_total": denied, **counters,
                "reload_failures": self.reload_failures,
                "last_reload_error": self.last_reload_error or "none"}


def read_file(path: Path) -> dict[str, Any]:
    if not path.exists():
        return empty()
    try:
        doc = json.loads(path.read_text() or "{}")
    except (OSError, ValueError) as exc:
        raise PermissionError_(f"{path}: {exc}") from None
    try:
        return validate(doc)
    except PermissionError_ as exc:
        raise PermissionError_(f"{path}: {exc}") from None


def write_file(path: Path, doc: dict[str, Any]) -> None:
    """Atomic rewrite (mode 0600, fsync, rename): a crash leaves the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(validate(doc), fh, indent=1, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


@contextmanager
def editing(path: Path) -> Iterator[dict[str, Any]]:
    """Read-modify-write under an exclusive lock (two CLI calls at once lose nothing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        doc = read_file(path)
        yield doc
        write_file(path, doc)
    finally:
        os.close(lock)
