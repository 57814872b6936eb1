"""``oxiedge index add|list|remove``: secondary indexes on ingested collections.

The index machinery itself lives in ``oxiedge.store.index``; this module is its admin surface
(server handlers and the offline variants the CLI uses on the data dir) and the resumption of
builds a crash interrupted.
"""

from __future__ import annotations

import logging
from typing import Any

from ..operations import Emit, Streamed
from ..store import CommitError, Store
from ..store.index import (
    BUILD_CHUNK,
    IndexSpecError,
    create_index,
    create_index_blocking,
    drop_index,
    drop_index_blocking,
    finish_build,
)


def _args(args: dict[str, Any]) -> tuple[str, str]:
    collection, field = args.get("collection"), args.get("field")
    if not isinstance(collection, str) or not isinstance(field, str):
        raise IndexSpecError("index operations need a collection and a field")
    return collection, field


def admin_handlers(store: Store) -> dict[str, Any]:
    """``index.add`` (builds before answering), ``index.list``, ``index.remove``."""

    def add(args: dict[str, Any]) -> Any:
        collection, field = _args(args)
        if args.get("progress"):  # a stream of progress events, then the result
            return Streamed(lambda emit: build_with_progress(store, collection, field, emit))
        return create_index(store, collection, field)

    async def remove(args: dict[str, Any]) -> dict[str, Any]:
        collection, field = _args(args)
        return await drop_index(store, collection, field)

    def list_(args: dict[str, Any]) -> list[dict[str, Any]]:
        return store.indexes.rows(args.get("collection"))

    return {"index.add": add, "index.list": list_, "index.remove": remove}


async def build_with_progress(store: Store, collection: str, field: str,
                              emit: Emit) -> dict[str, Any]:
    """``create_index`` that emits ``{"done", "total"}`` (documents) after each chunk's
    commit round (``oxiedge index add`` draws them as a progress bar)."""
    idef, created = store.indexes.stage_define(collection, field)
    total, done = store.count(collection), 0
    next_id: int | None = 0
    while not idef.ready and next_id is not None and idef.iid in store.indexes.defs:
        next_id = store.indexes.build_chunk(idef, next_id)
        if next_id is None:
            store.indexes.stage_ready(idef)
        await store.commit()
        done = total if next_id is None else min(total, done + BUILD_CHUNK)
        await emit({"done": done, "total": total, "collection": collection, "field": field})
    return {**idef.row(), "created": created}


def add_offline(store: Store, collection: str, field: str) -> dict[str, Any]:
    return create_index_blocking(store, collection, field)


def remove_offline(store: Store, collection: str, field: str) -> dict[str, Any]:
    return drop_index_blocking(store, collection, field)


def list_offline(store: Store, collection: str | None = None) -> list[dict[str, Any]]:
    return store.indexes.rows(collection)


async def resume_builds(store: Store, log: logging.Logger) -> None:
    """Finish the builds a crash interrupted (such an index serves no query until then)."""
    for idef in [d for d in store.indexes.defs.values() if not d.ready]:
        log.info("index %s.%s: resuming its build", idef.collection, idef.field)
        try:
            await finish_build(store, idef)
        except CommitError as exc:  # durable writes stopped; status already says so
            log.error("index %s.%s: build stopped: %s", idef.collection, idef.field, exc)
            return
