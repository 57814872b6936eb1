"""Moving from Mosquitto: its password file hashes and its ``acl_file``.

Password hashes are kept as Mosquitto wrote them and verified as they are:
``$7$<iterations>$<salt b64>$<hash b64>`` is PBKDF2-HMAC-SHA512 (``mosquitto_passwd`` of
Mosquitto 2), ``$6$<salt b64>$<hash b64>`` one SHA-512 of password + salt (Mosquitto 1.x).
An imported user changes to oxiedge's own hash the next time ``oxiedge user add`` sets a
password.

``acl_file`` lines: ``user U`` starts a user's section; ``topic [read|write|readwrite|deny] T``
(no access word = readwrite) belongs to the current user, or to anonymous clients before the
first ``user`` line; ``pattern [read|write|readwrite|deny] T`` applies to every client with
``%u`` / ``%c`` substituted; ``#`` starts a comment line. Importing sets the MQTT default to
``deny``, Mosquitto's rule for a broker with an acl_file: what no line grants is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path
from typing import Any

from .rules import ACL_ACCESS, PermissionError_, check_acl_topic

#: An imported ``$7$`` hash asking for more rounds than this is refused (a CPU bomb on a Pi).
MAX_ITERATIONS = 10_000_000


def is_mosquitto_hash(encoded: str) -> bool:
    return encoded.startswith(("$7$", "$6$"))


def verify_mosquitto(password: bytes, encoded: str) -> bool:
    """Check ``password`` against a Mosquitto ``$7$`` or ``$6$`` hash."""
    parts = encoded.split("$")
    try:
        if len(parts) == 5 and parts[1] == "7":
            iterations = int(parts[2])
            if not 0 < iterations <= MAX_ITERATIONS:
                return False
            salt, expected = base64.b64decode(parts[3]), base64.b64decode(parts[4])
            digest = hashlib.pbkdf2_hmac("sha512", password, salt, iterations)
        elif len(parts) == 4 and parts[1] == "6":
            salt, expected = base64.b64decode(parts[2]), base64.b64decode(parts[3])
            digest = hashlib.sha512(password + salt).digest()
        else:
            return False
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(digest, expected)


def read_passwd(path: Path) -> dict[str, str]:
    """``user:hash`` lines of a Mosquitto password file (hashed ones only)."""
    users: dict[str, str] = {}
    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, encoded = line.partition(":")
        if not sep or not name or not is_mosquitto_hash(encoded):
            raise PermissionError_(f"{path}:{lineno}: expected NAME:$7$... or NAME:$6$... "
                                   "(run mosquitto_passwd -U on a plain-text file first)")
        users[name] = encoded
    return users


def parse_acl_file(text: str, where: str = "acl_file") -> dict[str, Any]:
    """An acl_file as ``{"users": {name: [[access, topic]...]}, "anonymous": [...],
    "patterns": [...]}``."""
    users: dict[str, list[list[str]]] = {}
    anonymous: list[list[str]] = []
    patterns: list[list[str]] = []
    current: list[list[str]] = anonymous
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        rest = rest.strip()
        if word == "user":
            if not rest:
                raise PermissionError_(f"{where}:{lineno}: 'user' needs a name")
            current = users.setdefault(rest, [])
            continue
        if word not in ("topic", "pattern"):
            raise PermissionError_(f"{where}:{lineno}: unknown line {word!r}")
        access, _, topic = rest.partition(" ")
        if access in ACL_ACCESS and topic.strip():
            topic = topic.strip()
        else:
            access, topic = "readwrite", rest  # no access word: read and write
        try:
            check_acl_topic(topic)
        except PermissionError_ as exc:
            raise PermissionError_(f"{where}:{lineno}: {exc}") from None
        (patterns if word == "pattern" else current).append([access, topic])
    return {"users": users, "anonymous": anonymous, "patterns": patterns}


def merge_acl(doc: dict[str, Any], acl: dict[str, Any]) -> None:
    """Put a parsed acl_file into a permissions document (replacing MQTT rules it names)."""
    for name, lines in acl["users"].items():
        doc["users"].setdefault(name, {})["acl"] = lines
    doc["anonymous_acl"] = acl["anonymous"]
    doc["patterns"] = acl["patterns"]
    doc["default"]["mqtt"] = "deny"
