"""What the store's helper modules need of a ``Store``, as protocols.

``format``, ``quarantine`` and ``index`` work on a store that ``store.py`` builds from them;
naming ``Store`` itself in their annotations would make an import cycle (even one only
under ``TYPE_CHECKING``). They name these protocols instead, and ``Store`` satisfies them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol


class RawRecords(Protocol):
    """Raw key/value records in named column families, staged for the next commit round."""

    path: Path
    read_only: bool

    def has_family(self, cf: str) -> bool: ...
    def get_raw(self, cf: str, key: bytes) -> bytes | None: ...
    def iter_raw(self, cf: str, prefix: bytes = b"", start: bytes | None = None
                 ) -> Iterator[tuple[bytes, bytes]]: ...
    def stage_put(self, cf: str, key: bytes, value: bytes) -> None: ...
    def stage_delete_key(self, cf: str, key: bytes) -> None: ...
    def stage_delete_range(self, cf: str, start: bytes, end: bytes) -> None: ...


class QuarantineState(RawRecords, Protocol):
    """A store that moves undecodable records aside (``quarantine.py``)."""

    quarantined_now: int
    recent_quarantine: list[tuple[str, bytes, str]]
    quarantined_keys: set[tuple[str, bytes]]

    def quarantine(self, cf: str, key: bytes, value: bytes | None, reason: str) -> bool: ...
    def kick(self) -> None: ...


class DocumentRecords(QuarantineState, Protocol):
    """A store with document collections and commits (``index.py`` adds its catalog)."""

    def iter_docs(self, coll: str, start_id: int = 0) -> Iterator[dict[str, Any]]: ...
    async def commit(self) -> None: ...
    def commit_blocking(self) -> None: ...
