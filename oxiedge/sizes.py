"""Byte sizes and memory limits as operators write them (``200MB``, ``0.4`` of RAM).

Free of trio and RocksDB so the configuration and the CLI can parse them cheaply.
"""

from __future__ import annotations

import os
import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}



def parse_size(text: str) -> int:
    """``"200MB"``, ``"1.5G"``, ``"4096"`` → bytes; raises ``ValueError``."""
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"invalid size {text!r} (e.g. 200MB, 1GB, 4096)")
    unit = (m.group(2) or "").lower()[:1]
    return int(float(m.group(1)) * _UNITS[unit])


def total_memory() -> int:
    """Physical RAM in bytes (cgroup limits are MemoryMax's business, not ours)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError):
        return 1 << 30


def parse_memory_watermark(text: str) -> int:
    """A fraction of RAM (``0.4``) or an absolute size (``512MB``) → bytes."""
    value = str(text).strip()
    try:
        fraction = float(value)
    except ValueError:
        return parse_size(value)
    if 0 < fraction < 1:
        return int(total_memory() * fraction)
    if fraction >= 1:
        return int(fraction)
    raise ValueError(f"invalid memory watermark {text!r} (a fraction like 0.4, or 512MB)")
