"""The durable store: JSON document collections and raw broker records on RocksDB."""

from __future__ import annotations

from .committer import CommitError, GroupCommitter
from .format import FORMAT_VERSION, StoreFormatError
from .names import StoreError, validate_collection_name
from .query import QueryError
from .rocks import SMALL, MemoryProfile, StoreLockedError
from .store import Store

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
