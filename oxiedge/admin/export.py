"""``find`` with progress (``oxiedge find COLL ... > export.jsonl`` on a large collection):
the scan runs in chunks of :data:`CHUNK` documents, each in a worker thread, and after each
one the operation emits ``{"done", "total"}`` - documents scanned of those stored - so the
CLI draws a progress bar (count, rate, time left); the matching documents are the result,
as a plain ``find`` answers them.

Only an unsorted find of a user collection streams: a sort needs every match before the
first row, and the ``_`` collections (the brokers' views, the configuration) are small and
answered at once. The filter is applied to each stored document in ``_id`` order (without
an index: an export reads the collection anyway).
"""

from __future__ import annotations

from typing import Any

import trio

from ..operations import Emit
from ..store.query import compile_filter
from ..uplink.definitions import redact_documents

#: Documents scanned per worker-thread hop (one progress event each).
CHUNK = 10_000


def streams(collection: str, sort: Any) -> bool:
    """Does a find of ``collection`` with ``sort`` report progress?"""
    return not sort and not collection.startswith("_")


async def find_with_progress(store: Any, collection: str, spec: dict[str, Any] | None,
                             limit: int | None, skip: int, emit: Emit) -> list[dict[str, Any]]:
    """``store.find(collection, spec, None, limit, skip)`` scanned in chunks with a
    progress event after each."""
    pred = compile_filter(spec)
    if limit == 0:
        return []
    total = await trio.to_thread.run_sync(store.count, collection)
    out: list[dict[str, Any]] = []
    scanned = 0
    next_id = 0

    def chunk(start: int, to_skip: int) -> tuple[int, int, int, bool]:
        """Scan up to CHUNK documents from ``_id`` ``start``: (scanned, next id, skip left,
        the end reached)."""
        n = 0
        for doc in store.iter_docs(collection, start):
            n += 1
            start = doc["_id"] + 1
            if pred(doc):
                if to_skip:
                    to_skip -= 1
                else:
                    out.append(doc)
                    if limit is not None and len(out) >= limit:
                        return n, start, to_skip, True
            if n >= CHUNK:
                return n, start, to_skip, False
        return n, start, to_skip, True

    while True:
        n, next_id, skip, done = await trio.to_thread.run_sync(chunk, next_id, skip)
        scanned += n
        await emit({"done": min(scanned, total) if not done else total, "total": total})
        if done:
            return redact_documents(collection, out)
