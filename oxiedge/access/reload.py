"""Re-read the password file and ``DATA/permissions.json`` of a running server (SIGHUP).

``oxiedge user add`` and ``oxiedge acl|permissions …`` already tell a running server over the
admin socket; this is for an operator (or configuration management) who rewrote the files
by hand and sends SIGHUP, as with Mosquitto. Each file is read completely before anything
is swapped in, so a broken file changes nothing: the users or rules in force stay, and the
log says why. What changed is logged in one line per file (names, not secrets), so the
operator can see that the reload saw the edit.
"""

from __future__ import annotations

from typing import Any

from ..auth import UserFileError, UserStore
from .rules import PermissionError_, PermissionStore


def _user_changes(before: dict[str, str], after: dict[str, str]) -> str:
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(n for n in set(before) & set(after) if before[n] != after[n])
    parts = [f"{label} {', '.join(names)}" for label, names in
             (("added", added), ("removed", removed), ("password changed", changed)) if names]
    return "; ".join(parts) or "no change"


def _rule_changes(before: dict[str, Any], after: dict[str, Any]) -> str:
    parts: list[str] = []
    users = sorted(set(before["users"]) | set(after["users"]))
    changed = [u for u in users if before["users"].get(u) != after["users"].get(u)]
    if changed:
        parts.append(f"users with changed rules: {', '.join(changed)}")
    if before["patterns"] != after["patterns"]:
        parts.append(f"pattern lines {len(before['patterns'])} -> {len(after['patterns'])}")
    if before["anonymous_acl"] != after["anonymous_acl"]:
        parts.append(f"anonymous lines {len(before['anonymous_acl'])} -> "
                     f"{len(after['anonymous_acl'])}")
    for proto in ("mqtt", "amqp"):
        old, new = before["default"].get(proto), after["default"].get(proto)
        if old != new:
            parts.append(f"{proto} default {old} -> {new}")
    return "; ".join(parts) or "no change"


def reload_users(users: UserStore, log: Any) -> dict[str, Any]:
    """Re-read the password file; on a broken file keep the users in force."""
    before = users.entries()
    try:
        users.reload()
    except (OSError, UserFileError) as exc:
        log.error("users not reloaded, the previous users stay: %s", exc)
        return {"reloaded": False, "error": str(exc)}
    summary = _user_changes(before, users.entries())
    log.info("users reloaded: %s (%s)", summary, users.mode())
    return {"reloaded": True, "changes": summary}


def reload_permissions(permissions: PermissionStore, log: Any) -> dict[str, Any]:
    """Re-read ``DATA/permissions.json``; on a broken file keep the rules in force."""
    if permissions.path is None:
        return {"reloaded": False, "error": "no permissions file"}
    before = permissions.doc
    try:
        permissions.reload()  # reads and validates first: an error leaves ``doc`` as it was
    except PermissionError_ as exc:  # counted by the store (status: reload_failures)
        log.error("permissions not reloaded, the previous rules stay: %s", exc)
        return {"reloaded": False, "error": str(exc)}
    summary = _rule_changes(before, permissions.doc)
    log.info("permissions reloaded: %s (rules %s)", summary,
             "on" if permissions.active else "off")
    return {"reloaded": True, "changes": summary}


def reload_access(users: UserStore, permissions: PermissionStore, log: Any) -> dict[str, Any]:
    """SIGHUP: users and permissions, each independently of the other's success."""
    return {"users": reload_users(users, log),
            "permissions": reload_permissions(permissions, log)}
