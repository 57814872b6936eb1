"""What a queue log (``qlog.py``) needs of its store and of its owner: protocols only."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar


class Generations(Protocol):
    """The batch numbers of the group committer (``GroupCommitter``)."""

    generation: int  # the batch being staged now
    synced_generation: int  # every batch up to this one is synced


class LogStore(Protocol):
    """What a queue log needs of ``oxiedge.store.Store``."""

    @property
    def committer(self) -> Generations: ...
    def stage_put(self, cf: str, key: bytes, value: bytes) -> None: ...
    def stage_delete_key(self, cf: str, key: bytes) -> None: ...
    def stage_delete_range(self, cf: str, start: bytes, end: bytes) -> None: ...
    def get_raw(self, cf: str, key: bytes) -> bytes | None: ...
    def iter_range(self, cf: str, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]: ...
    def read_range(self, cf: str, start: bytes, end: bytes, limit: int
                   ) -> list[tuple[bytes, bytes]]: ...
    def last_key(self, cf: str, start: bytes, end: bytes) -> bytes | None: ...
    def quarantine(self, cf: str, key: bytes, value: bytes | None, reason: str) -> bool: ...
    def defer(self, fn: Callable[[], None]) -> None: ...


class Tally(Protocol):
    """Where the queues of one broker add up the bytes they hold on disk (a global bound)."""

    backlog_bytes: int


class NoTally:
    __slots__ = ("backlog_bytes",)

    def __init__(self) -> None:
        self.backlog_bytes = 0


class Entry(Protocol):
    """A queued message as its owner keeps it in memory."""

    @property
    def seq(self) -> int: ...
    @property
    def size(self) -> int:
        """What it counts in the queue's ``bytes``."""
        ...


E = TypeVar("E", bound=Entry)


class Codec(Protocol[E]):
    """How the owner turns a record into its message (``Entry.size``: what it counts)."""

    def decode(self, seq: int, value: bytes) -> E | None:
        """The message of a record read back; None: skip it (removed, counted as
        ``skipped``); raises ValueError for a record that does not decode."""
        ...

    def raw_size(self, value: bytes) -> int:
        """What a record counts in ``bytes`` (recovery, quarantine; never raises)."""
        ...

    def decode_run(self, pairs: list[tuple[bytes, bytes]], i: int, width: int,
                   out: deque[E], room_bytes: int) -> tuple[int, int]:
        """Decode ``pairs`` (key, record) from index ``i`` on into ``out`` for as long as
        each key is ``width`` bytes (a prefix, then the seq: 8 bytes big-endian) and its
        record decodes to a message, until the messages' sizes reach ``room_bytes``:
        returns ``(the index it stopped at, the sizes added)``. The reader passes the
        record it stopped at to ``decode`` (the errors and skips are its business), then
        calls this again: a codec with nothing faster than ``decode`` for a run of records
        uses ``qlog_read.decode_each``."""
        ...
