"""The bounded part of a client's start-ok table that a connection keeps for the
management listings (``client_properties`` in ``/api/connections``).

The table itself may be 64 KiB before the login (~1 MiB of objects once decoded), so the
connection keeps a copy of only the keys RabbitMQ's management shows: strings cut to
:data:`MAX_STRING` bytes, ``capabilities`` as at most :data:`MAX_CAPABILITIES` booleans,
and the whole at most :data:`MAX_TOTAL` bytes of text (what does not fit is left out).
"""

from __future__ import annotations

from typing import Any

#: The string keys kept, in this order (the first ones win when the total is reached).
KEYS = ("connection_name", "product", "version", "platform", "information", "copyright")
MAX_STRING = 256  # bytes of UTF-8 per value
MAX_CAPABILITIES = 16
MAX_KEY = 64  # bytes of a capability's name
MAX_TOTAL = 2048  # bytes of keys and values together


def _text(value: Any, limit: int) -> str | None:
    if isinstance(value, (bytes, bytearray)):
        raw = bytes(value[:limit])
    elif isinstance(value, str):
        raw = value.encode("utf-8", "replace")[:limit]
    else:
        return None
    return raw.decode("utf-8", "ignore")  # a character cut in two is dropped


def bounded_client_properties(props: Any) -> dict[str, Any]:
    """What of ``props`` (the decoded start-ok table) is kept; always a fresh dict of
    str / bool values, never a reference into ``props``."""
    kept: dict[str, Any] = {}
    if not isinstance(props, dict):
        return kept
    total = 0
    for key in KEYS:
        text = _text(props.get(key), MAX_STRING)
        if text is None:
            continue
        size = len(key) + len(text.encode())
        if total + size > MAX_TOTAL:
            break
        kept[key] = text
        total += size
    caps = props.get("capabilities")
    if isinstance(caps, dict):
        flags: dict[str, bool] = {}
        for name, value in caps.items():
            if len(flags) >= MAX_CAPABILITIES:
                break
            if not isinstance(value, bool):
                continue
            flag = _text(name, MAX_KEY)
            if not flag:
                continue
            size = len(flag.encode()) + 5
            if total + size > MAX_TOTAL:
                break
            flags[flag] = value
            total += size
        kept["capabilities"] = flags
    return kept
