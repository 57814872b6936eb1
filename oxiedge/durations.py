"""Durations as operators write them: ``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or seconds.

Shared by the retention policies of ingested collections and the settings of ``serve``
(``--mqtt-session-expiry``); no import beyond the standard library, so the configuration
can use it without loading anything else.
"""

from __future__ import annotations

import re

_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw]?)\s*$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str | int) -> int:
    """``30d`` / ``12h`` / ``90m`` / ``45s`` / ``2w`` / ``3600`` → seconds (> 0)."""
    if isinstance(text, int) and not isinstance(text, bool):
        seconds = text
    else:
        m = _DURATION.match(str(text))
        if m is None:
            raise ValueError(f"invalid duration {text!r}: use e.g. 30d, 12h, 90m, 45s or 2w")
        seconds = int(m.group(1)) * _UNIT[m.group(2)]
    if seconds <= 0:
        raise ValueError(f"invalid duration {text!r}: must be positive")
    return seconds


def format_duration(seconds: int) -> str:
    """The shortest exact spelling: 86400 → ``1d``, 5400 → ``90m``, 45 → ``45s``."""
    for unit, size in (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
