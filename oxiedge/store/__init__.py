"""The durable store: JSON document collections and raw broker records on RocksDB.

The names below load their modules on first use (PEP 562), so that importing a small leaf
such as ``oxiedge.store.encoding`` (the key layout the sans-IO MQTT code shares) does not
load trio, rocksdict and the committer with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .committer import CommitError, GroupCommitter
    from .format import FORMAT_VERSION, StoreFormatError
    from .names import StoreError, validate_collection_name
    from .query import QueryError
    from .rocks import SMALL, MemoryProfile, StoreLockedError
    from .store import Store

#: exported name → the module that defines it
_HOMES = {
    "CommitError": "committer", "GroupCommitter": "committer",
    "FORMAT_VERSION": "format", "StoreFormatError": "format",
    "StoreError": "names", "validate_collection_name": "names",
    "QueryError": "query",
    "SMALL": "rocks", "MemoryProfile": "rocks", "StoreLockedError": "rocks",
    "Store": "store",
}

__all__ = [
    "FORMAT_VERSION",
    "SMALL",
    "CommitError",
    "GroupCommitter",
    "MemoryProfile",
    "QueryError",
    "Store",
    "StoreError",
    "StoreFormatError",
    "StoreLockedError",
    "validate_collection_name",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
