"""Retention of ingested collections: ``max_docs`` and/or ``max_age``, so an SD card never fills.

Theory of operation
-------------------
The publish path never deletes and never scans: after staging a document it only compares
the collection's in-memory count with ``max_docs`` and, when over, sets an event. One trio
task (``Retention.run``) does the deleting, oldest first: ``_id`` is monotonic per
collection, so the oldest documents are the first keys of the collection's range. Each
round reads at most ``BATCH`` documents, stages their deletes (index entries included, same
batch) and awaits the group commit before the next round, so retention is just another
writer sharing the committer's rounds and never starves publishers.

``max_age`` is checked on a timer (a tenth of the age, between 1 s and 60 s): documents whose
``_received_at`` is older than the cutoff are deleted from the oldest on; the scan stops at
the first younger one (ingest assigns ``_received_at`` in ``_id`` order). Documents without
a numeric ``_received_at`` (not from ingest) are left to ``max_docs``.

Each collection keeps a *floor*, the smallest ``_id`` that may still exist, so a round
seeks past the tombstones of earlier rounds instead of walking them (docs/storage.md). The
floors start at 0 after a restart (one walk, then they are exact again).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import trio

from ..durations import format_duration, parse_duration
from ..store import CommitError, Store

BATCH = 1000  # documents deleted per commit round

__all__ = ["BATCH", "Policy", "Retention", "parse_duration", "validate_policy"]


@dataclass(frozen=True, slots=True)
class Policy:
    """Retention of one collection; ``None`` means no limit of that kind."""

    max_docs: int | None = None
    max_age: int | None = None  # seconds

    def __bool__(self) -> bool:
        return self.max_docs is not None or self.max_age is not None

    def merge(self, other: Policy) -> Policy:
        """The stricter of two policies (two routes into one collection)."""

        def low(a: int | None, b: int | None) -> int | None:
            return b if a is None else a if b is None else min(a, b)

        return Policy(low(self.max_docs, other.max_docs), low(self.max_age, other.max_age))

    def row(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.max_docs is not None:
            out["max_docs"] = self.max_docs
        if self.max_age is not None:
            out["max_age"] = format_duration(self.max_age)
        return out


def validate_policy(max_docs: Any, max_age: Any) -> Policy:
    """Check CLI/admin arguments; raises ``ValueError`` naming the bad one."""
    docs: int | None = None
    if max_docs is not None:
        if isinstance(max_docs, bool) or not isinstance(max_docs, int) or max_docs < 1:
            raise ValueError(f"--max-docs must be a positive integer, got {max_docs!r}")
        docs = max_docs
    age = None if max_age is None else parse_duration(max_age)
    return Policy(docs, age)


class Retention:
    """The retention task of a running server and its counters."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.policies: dict[str, Policy] = {}
        self.deleted: dict[str, int] = {}
        self._floor: dict[str, int] = {}
        self._age_floor: dict[str, int] = {}
        self._wake = trio.Event()

    @property
    def total_deleted(self) -> int:
        return sum(self.deleted.values())

    def set_policies(self, policies: dict[str, Policy]) -> None:
        self.policies = {c: p for c, p in policies.items() if p}
        self.wake()

    def wake(self) -> None:
        self._wake.set()

    def after_insert(self, collection: str) -> None:
        """Called on the publish path: one dict lookup and one comparison."""
        policy = self.policies.get(collection)
        if policy is not None and policy.max_docs is not None \
                and self.store.count(collection) > policy.max_docs:
            self._wake.set()

    def _interval(self) -> float:
        ages = [p.max_age for p in self.policies.values() if p.max_age is not None]
        if not ages:
            return 3600.0
        return float(min(60, max(1, min(ages) // 10)))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        task_status.started()
        while True:
            with trio.move_on_after(self._interval()):
                await self._wake.wait()
            self._wake = trio.Event()
            try:
                await self.enforce()
            except CommitError:
                return  # durable writes stopped: nothing more to do (status shows it)

    async def enforce(self) -> int:
        """Bring every collection within its policy; returns how many were deleted."""
        total = 0
        for coll, policy in list(self.policies.items()):
            if policy.max_docs is not None:
                total += await self._trim_count(coll, policy.max_docs)
            if policy.max_age is not None:
                total += await self._trim_age(coll, policy.max_age)
        return total

    async def _trim_count(self, coll: str, max_docs: int) -> int:
        deleted = 0
        while True:
            excess = self.store.count(coll) - max_docs
            if excess <= 0:
                return deleted
            docs = []
            for doc in self.store.iter_docs(coll, self._floor.get(coll, 0)):
                docs.append(doc)
                if len(docs) >= min(excess, BATCH):
                    break
            if not docs:
                return deleted  # the surplus is staged, not yet visible: next wake
            self._floor[coll] = int(docs[-1]["_id"]) + 1
            deleted += self._delete(coll, docs)
            await self.store.commit()

    async def _trim_age(self, coll: str, max_age: int) -> int:
        deleted = 0
        cutoff = int(time.time() * 1000) - max_age * 1000
        while True:
            expired = []
            start = max(self._age_floor.get(coll, 0), self._floor.get(coll, 0))
            young = False
            seen = 0
            for doc in self.store.iter_docs(coll, start):
                seen += 1
                at = doc.get("_received_at")
                if isinstance(at, int | float) and not isinstance(at, bool):
                    if at >= cutoff:
                        young = True
                        break
                    expired.append(doc)
                self._age_floor[coll] = int(doc["_id"]) + 1
                if seen >= BATCH:
                    break
            if expired:
                deleted += self._delete(coll, expired)
                await self.store.commit()
            if young or seen < BATCH:
                return deleted

    def _delete(self, coll: str, docs: list[dict[str, Any]]) -> int:
        n = self.store.stage_delete_docs(coll, docs)
        self.deleted[coll] = self.deleted.get(coll, 0) + n
        return n

    def status(self) -> dict[str, Any]:
        return {coll: {**p.row(), "deleted": self.deleted.get(coll, 0)}
                for coll, p in sorted(self.policies.items())}
