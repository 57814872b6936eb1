"""``oxiedge index add|list|remove``: secondary indexes on ingested collections.

The index machinery itself lives in ``oxiedge.store.index``; this module is its admin surface
(server handlers and the offline variants the CLI uses on the data dir) and the resumption of
builds a crash interrupted.
"""

from __future__ import annotations

import logging
from typing import Any

from ..store import CommitError, Store
from ..store.index import (
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

    async def add(args: dict[str, Any]) -> dict[str, Any]:
        collection, field = _args(args)
        return await create_index(store, collection, field)

    async def remove(args: dict[str, Any]) -> dict[str, Any]:
        collection, field = _args(args)
        return await drop_index(store, collection, field)

    def list_(args: dict[str, Any]) -> list[dict[str, Any]]:
        return store.indexes.rows(args.get("collection"))

    return {"index.add": add, "index.list": list_, "index.remove": remove}


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
