"""``Store``: JSON document collections and the brokers' raw records on one RocksDB.

Reads are synchronous and fast (point lookups, bounded range scans). Writes are *staged* into
the group committer's pending batch and become durable with ``await store.commit()`` (server)
or ``store.commit_blocking()`` (CLI without a running server). See ``committer.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import asynccontextmanager
from itertools import islice
from pathlib import Path
from typing import Any, cast

import trio
from rocksdict import ReadOptions, WriteBatch

from . import encoding as enc
from . import format as fmt
from . import quarantine
from .catalog import Collection, load_catalog
from .committer import GroupCommitter
from .index import IndexCatalog
from .names import StoreError, validate_collection_name
from .query import compile_filter, parse_sort, sort_docs
from .rocks import COLUMN_FAMILIES, SMALL, MemoryProfile, existing_families, open_db

ViewFn = Callable[[], Iterable[dict[str, Any]]]


class Store:
    """The document store and raw record area of one data directory."""

    def __init__(self, path: Path, profile: MemoryProfile = SMALL, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        on_disk = existing_families(self.path)
        self.db = open_db(self.path, profile, read_only=read_only)
        #: families on disk this version does not use: opened, never touched
        self.unknown_families = sorted(set(on_disk) - set(COLUMN_FAMILIES) - {"default"})
        # A read-only open cannot create families (an old data dir has no quarantine yet).
        names = [n for n in COLUMN_FAMILIES if not read_only or n in on_disk]
        self._cf = {name: self.db.get_column_family_handle(name) for name in names}
        self._cf_read = {name: self.db.get_column_family(name) for name in self._cf}
        self._dirty: set[str] = set()
        self._views: dict[str, list[ViewFn]] = {}
        self.committer = GroupCommitter(self.db, before_write=self._before_write)
        self._deferred: list[Callable[[], None]] = []
        self.quarantined_now = 0  # records moved aside (or skipped, read-only) by this process
        self.recent_quarantine: list[tuple[str, bytes, str]] = []
        self.quarantined_keys: set[tuple[str, bytes]] = set()
        # Staging belongs to the thread that runs the committer (the event loop's); a read
        # in a worker thread (admin ``find``) hands its quarantine moves over to it.
        self._owner_thread = threading.get_ident()
        try:
            self.format_found = fmt.check_and_migrate(self)
        except fmt.StoreFormatError:
            self.close(commit=False)
            raise
        self._collections, dirty = load_catalog(self._cf_read["meta"], self._cf_read["docs"],
                                                self.quarantine)
        self._dirty |= dirty
        self.docs_read = 0  # documents decoded by reads (shows what an index saved)
        self.indexes = IndexCatalog(self)
        if not read_only and self.committer.pending:
            # The format marker (migration) and catalog quarantine moves, durable before
            # anything else reads or writes this store.
            self.committer.commit_blocking()
            self.committer.rounds = self.committer.ops = 0  # counters are of serving rounds

    # ----------------------------------------------------------------- lifecycle
    @classmethod
    def open(cls, path: Path | str, profile: MemoryProfile = SMALL,
             read_only: bool = False) -> Store:
        """Open the store in directory ``path`` (created if missing unless read-only)."""
        p = Path(path)
        if not read_only:
            p.mkdir(parents=True, exist_ok=True)
        return cls(p, profile, read_only=read_only)

    def close(self, commit: bool = True) -> None:
        if (commit and not self.read_only and self.committer.pending
                and self.committer.failed is None):
            self.committer.commit_blocking()
        # Column-family handles keep the DB alive: drop them so the LOCK is released now.
        self._cf.clear()
        self._cf_read.clear()
        self.db.close()
        del self.db

    @asynccontextmanager
    async def running(self):  # type: ignore[no-untyped-def]
        """Run the group committer for the duration of the block (tests, tools)."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.committer.run)
            try:
                yield self
            finally:
                nursery.cancel_scope.cancel()

    # ---------------------------------------------------------------- quarantine
    def has_family(self, cf: str) -> bool:
        return cf in self._cf

    def quarantine(self, cf: str, key: bytes, value: bytes | None, reason: str) -> bool:
        """Move one undecodable record aside (next commit), count it and log its key
        (``quarantine.py``); False if this process already did. Callers then go on as if
        the record were not there."""
        if threading.get_ident() != self._owner_thread:
            return bool(self._in_owner_thread(quarantine.stage, self, cf, key, value, reason))
        return quarantine.stage(self, cf, key, value, reason)

    def _in_owner_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn`` in the event loop's thread when called from a trio worker thread."""
        try:
            return trio.from_thread.run_sync(fn, *args)
        except RuntimeError:  # not a trio worker thread (no loop to hand over to)
            return fn(*args)

    def quarantine_doc(self, coll: str, doc_id: int, reason: str) -> None:
        """``quarantine`` for a document whose JSON decoded but whose shape is unusable."""
        c = self._collections.get(coll)
        if c is None:
            return
        key = enc.doc_key(c.cid, int(doc_id))
        raw = self._cf_read["docs"].get(key)
        if raw is None:
            return
        self._quarantine_doc_record(c, key, cast(bytes, raw), f"{coll} document {doc_id}: {reason}")

    def _quarantine_doc_record(self, c: Collection, key: bytes, raw: bytes, reason: str) -> None:
        if threading.get_ident() != self._owner_thread:
            self._in_owner_thread(self._quarantine_doc_record, c, key, raw, reason)
            return
        # Its index entries stay: a stale entry only costs a lookup that finds nothing
        # (index.py: the index is a candidate generator, never the judge).
        if self.quarantine("docs", key, raw, reason) and not self.read_only:
            c.count -= 1
            self._dirty.add(c.name)

    def _decode(self, c: Collection, doc_id: int, key: bytes, raw: bytes
                ) -> dict[str, Any] | None:
        try:
            doc = enc.decode_doc(doc_id, raw)
        except (ValueError, TypeError) as exc:  # orjson.JSONDecodeError is a ValueError
            self._quarantine_doc_record(c, key, raw, f"{c.name} document {doc_id}: {exc}")
            return None
        return doc

    def quarantine_status(self) -> dict[str, Any]:
        out = quarantine.status(self)
        if self.unknown_families:
            out["unknown_families"] = list(self.unknown_families)
        return out

    def _collection(self, name: str, create: bool) -> Collection | None:
        coll = self._collections.get(name)
        if coll is None and create:
            validate_collection_name(name)
            cid = max((c.cid for c in self._collections.values()), default=0) + 1
            coll = Collection(name, cid, 1, 0)
            self._collections[name] = coll
            self.committer.batch.put(
                enc.catalog_key(name), enc.encode_doc({"id": cid}), self._cf["meta"]
            )
            self._dirty.add(name)
        return coll

    def _before_write(self, batch: WriteBatch) -> None:
        """The round's last staging: what was deferred (``defer``), then the counters."""
        deferred, self._deferred = self._deferred, []
        for fn in deferred:
            fn()
        meta = self._cf["meta"]
        for name in self._dirty:
            coll = self._collections.get(name)
            if coll is not None:
                batch.put(enc.counters_key(coll.cid), enc.encode_counters(coll.next_id, coll.count),
                          meta)
        self._dirty.clear()

    def list_collections(self) -> list[dict[str, Any]]:
        """Every collection with its document count, including broker views."""
        out: dict[str, dict[str, Any]] = {
            name: {"name": name, "count": c.count} for name, c in self._collections.items()
        }
        for name, fns in self._views.items():
            extra = sum(1 for fn in fns for _ in fn())
            row = out.setdefault(name, {"name": name, "count": 0})
            row["count"] += extra
        return [out[k] for k in sorted(out)]

    def register_view(self, coll: str, fn: ViewFn) -> None:
        """Show the documents ``fn()`` yields in ``find(coll)`` besides the stored ones."""
        self._views.setdefault(coll, []).append(fn)

    # -------------------------------------------------------------------- reads
    def get(self, coll: str, doc_id: int) -> dict[str, Any] | None:
        c = self._collections.get(coll)
        if c is None:
            return None
        key = enc.doc_key(c.cid, int(doc_id))
        raw = self._cf_read["docs"].get(key)
        if raw is None:
            return None
        self.docs_read += 1
        return self._decode(c, int(doc_id), key, cast(bytes, raw))

    def iter_docs(self, coll: str, start_id: int = 0) -> Iterator[dict[str, Any]]:
        """Stored documents of ``coll`` in ``_id`` order (no views)."""
        c = self._collections.get(coll)
        if c is None:
            return
        ro = ReadOptions()
        ro.set_iterate_upper_bound(enc.collection_prefix(c.cid + 1))
        for key, value in self._cf_read["docs"].items(
            from_key=enc.doc_key(c.cid, start_id), read_opt=ro
        ):
            self.docs_read += 1
            raw_key = cast(bytes, key)
            doc = self._decode(c, enc.doc_id_of(raw_key), raw_key, cast(bytes, value))
            if doc is not None:
                yield doc

    def _all_docs(self, coll: str, filter: Any = None) -> Iterator[dict[str, Any]]:
        ids = self.indexes.candidate_ids(coll, filter) if self.indexes.active else None
        if ids is None:
            yield from self.iter_docs(coll)
        else:  # an index narrowed the candidates; the caller still applies the filter
            for doc_id in ids:
                doc = self.get(coll, doc_id)
                if doc is not None:
                    yield doc
        for fn in self._views.get(coll, ()):
            yield from fn()

    def find(
        self,
        coll: str,
        filter: dict[str, Any] | None = None,
        sort: Any = None,
        limit: int | None = None,
        skip: int = 0,
    ) -> list[dict[str, Any]]:
        """Documents of ``coll`` matching ``filter``; raises ``QueryError`` for bad filters."""
        pred = compile_filter(filter)
        order = parse_sort(sort)
        if limit is not None and limit < 0:
            raise StoreError("limit must be >= 0")
        if skip < 0:
            raise StoreError("skip must be >= 0")
        if not order:
            out: list[dict[str, Any]] = []
            for doc in self._all_docs(coll, filter):
                if pred(doc):
                    if skip:
                        skip -= 1
                        continue
                    if limit is not None and len(out) >= limit:
                        break
                    out.append(doc)
            return out
        matched = sort_docs([d for d in self._all_docs(coll, filter) if pred(d)], order)
        end = None if limit is None else skip + limit
        return matched[skip:end]

    def count(self, coll: str, filter: dict[str, Any] | None = None) -> int:
        if not filter:
            c = self._collections.get(coll)
            base = c.count if c is not None else 0
            return base + sum(1 for fn in self._views.get(coll, ()) for _ in fn())
        pred = compile_filter(filter)
        return sum(1 for d in self._all_docs(coll, filter) if pred(d))

    # ------------------------------------------------------------ staged writes
    def stage_insert(self, coll: str, doc: dict[str, Any]) -> dict[str, Any]:
        """Stage an insert; returns the document with its new ``_id`` and ``_version``."""
        if not isinstance(doc, dict):
            raise StoreError(f"a document must be a JSON object, got {type(doc).__name__}")
        c = self._collection(coll, create=True)
        assert c is not None
        doc_id = c.next_id
        body = dict(doc)
        body.pop("_id", None)
        body["_version"] = 1
        value = enc.encode_doc(body)
        self.committer.batch.put(enc.doc_key(c.cid, doc_id), value, self._cf["docs"])
        if self.indexes.active:
            self.indexes.on_insert(coll, doc_id, body)
        c.next_id += 1
        c.count += 1
        self._dirty.add(coll)
        return {"_id": doc_id, **body}

    def stage_update(self, coll: str, doc_id: int, changes: dict[str, Any],
                     replace: bool = False) -> dict[str, Any]:
        """Stage an update (merge ``changes``, or replace the body); bumps ``_version``."""
        current = self.get(coll, doc_id)
        if current is None:
            raise StoreError(f"no document {doc_id} in {coll!r}")
        c = self._collections[coll]
        base = {} if replace else {k: v for k, v in current.items() if k != "_id"}
        base.update({k: v for k, v in changes.items() if k not in ("_id", "_version")})
        base["_version"] = int(current.get("_version", 0)) + 1
        self.committer.batch.put(enc.doc_key(c.cid, int(doc_id)), enc.encode_doc(base),
                                 self._cf["docs"])
        if self.indexes.active:
            self.indexes.on_update(coll, int(doc_id), current, base)
        return {"_id": int(doc_id), **base}

    def stage_delete(self, coll: str, doc_id: int) -> bool:
        c = self._collections.get(coll)
        if c is None:
            return False
        key = enc.doc_key(c.cid, int(doc_id))
        raw = self._cf_read["docs"].get(key)
        if raw is None:
            return False
        if self.indexes.has(coll):
            try:
                body = enc.decode_doc(int(doc_id), raw)
            except ValueError:  # a corrupt document: its index entries cannot be derived
                body = None
            if body is not None:
                self.indexes.on_delete(coll, int(doc_id), body)
        self.committer.batch.delete(key, self._cf["docs"])
        c.count -= 1
        self._dirty.add(coll)
        return True

    def stage_delete_docs(self, coll: str, docs: Iterable[dict[str, Any]]) -> int:
        """Stage deletes of documents just read from ``coll`` (a scan); returns how many.
        The documents themselves give their index entries: nothing is read again."""
        c = self._collections.get(coll)
        if c is None:
            return 0
        n = 0
        docs_cf = self._cf["docs"]
        indexed = self.indexes.has(coll)
        for doc in docs:
            doc_id = int(doc["_id"])
            if indexed:
                self.indexes.on_delete(coll, doc_id, doc)
            self.committer.batch.delete(enc.doc_key(c.cid, doc_id), docs_cf)
            n += 1
        c.count -= n
        self._dirty.add(coll)
        return n

    def stage_drop(self, coll: str) -> bool:
        """Stage removal of a whole collection."""
        c = self._collections.pop(coll, None)
        if c is None:
            return False
        batch = self.committer.batch
        if self.indexes.active:
            self.indexes.on_drop(coll)
        batch.delete_range(enc.collection_prefix(c.cid), enc.collection_prefix(c.cid + 1),
                           self._cf["docs"])
        batch.delete(enc.catalog_key(coll), self._cf["meta"])
        batch.delete(enc.counters_key(c.cid), self._cf["meta"])
        self._dirty.discard(coll)
        return True

    # raw records of the brokers ------------------------------------------------
    def stage_put(self, cf: str, key: bytes, value: bytes) -> None:
        self.committer.batch.put(key, value, self._cf[cf])

    def stage_delete_key(self, cf: str, key: bytes) -> None:
        self.committer.batch.delete(key, self._cf[cf])

    def stage_delete_range(self, cf: str, start: bytes, end: bytes) -> None:
        self.committer.batch.delete_range(start, end, self._cf[cf])

    def defer(self, fn: Callable[[], None]) -> None:
        """Have ``fn`` stage its operations (once) just before the next round is written;
        that round runs even if nothing else is staged (``qlog.py``: one per round)."""
        self._deferred.append(fn)
        self.committer.defer()

    def get_raw(self, cf: str, key: bytes) -> bytes | None:
        value = self._cf_read[cf].get(key)
        return None if value is None else bytes(value)

    def iter_raw(self, cf: str, prefix: bytes = b"", start: bytes | None = None
                 ) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs of ``cf`` whose key starts with ``prefix``, in key order."""
        ro = ReadOptions()
        upper = enc.prefix_end(prefix)
        if upper is not None:
            ro.set_iterate_upper_bound(upper)
        first = start if start is not None and start > prefix else prefix
        for key, value in self._cf_read[cf].items(from_key=first, read_opt=ro):
            yield cast(bytes, key), cast(bytes, value)

    def iter_range(self, cf: str, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs of ``cf`` with ``start <= key < end``, in key order."""
        ro = ReadOptions()
        ro.set_iterate_upper_bound(end)
        for key, value in self._cf_read[cf].items(from_key=start, read_opt=ro):
            yield cast(bytes, key), cast(bytes, value)

    def read_range(self, cf: str, start: bytes, end: bytes, limit: int
                   ) -> list[tuple[bytes, bytes]]:
        """The first ``limit`` pairs of ``iter_range``, read in one go by RocksDB's own
        iterator (no Python step per pair: a queue's read-back). What it reads is read
        once (a backlog on its way out): it does not go through the block cache, which keeps
        what is read again (~20 % less CPU per record, and the hot blocks stay)."""
        ro = ReadOptions()
        ro.fill_cache(False)  # type: ignore[call-arg]  # (its stub forgets the flag)
        ro.set_iterate_upper_bound(end)
        items = cast(Iterator[tuple[bytes, bytes]],
                     self._cf_read[cf].items(from_key=start, read_opt=ro))
        return list(islice(items, limit))

    def last_key(self, cf: str, start: bytes, end: bytes) -> bytes | None:
        """The greatest key of ``cf`` in ``[start, end)``, or None."""
        ro = ReadOptions()
        ro.set_iterate_upper_bound(end)
        for key in self._cf_read[cf].keys(backwards=True, from_key=end, read_opt=ro):
            raw = cast(bytes, key)
            return raw if start <= raw < end else None
        return None

    def compact(self, cf: str, start: bytes | None = None, end: bytes | None = None) -> None:
        """Compact a key range (drops tombstones after a queue drained)."""
        self._cf_read[cf].compact_range(start, end)

    # ------------------------------------------------------------------ commits
    async def commit(self) -> None:
        """Wait until everything staged so far is durable (raises ``CommitError``)."""
        await self.committer.commit()

    def kick(self) -> None:
        self.committer.kick()

    def commit_blocking(self) -> None:
        """Commit synchronously; only where no event loop runs (CLI on the data dir)."""
        self.committer.commit_blocking()

    # ------------------------------------------------------ async conveniences
    async def insert(self, coll: str, doc: dict[str, Any]) -> dict[str, Any]:
        out = self.stage_insert(coll, doc)
        await self.commit()
        return out

    async def insert_many(self, coll: str, docs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        out = [self.stage_insert(coll, d) for d in docs]
        await self.commit()
        return out

    async def update(self, coll: str, doc_id: int, changes: dict[str, Any],
                     replace: bool = False) -> dict[str, Any]:
        out = self.stage_update(coll, doc_id, changes, replace=replace)
        await self.commit()
        return out

    async def delete(self, coll: str, doc_id: int) -> bool:
        found = self.stage_delete(coll, doc_id)
        if found:
            await self.commit()
        return found

    async def delete_many(self, coll: str, filter: dict[str, Any] | None) -> int:
        pred = compile_filter(filter)
        n = self.stage_delete_docs(coll, [d for d in self.iter_docs(coll) if pred(d)])
        if n:
            await self.commit()
        return n
