"""Secondary indexes: ``(collection, field)`` → ordered entries in the ``idx`` column family.

Theory of operation
-------------------
An index entry is a key with an empty value::

    index id (4 bytes BE) + encode_value(field value) + _id (8 bytes BE)

``encode_value`` preserves order *within a kind* (numbers with numbers, strings with
strings), which is exactly what the query language compares (``query.py``: ordering never
holds across kinds). An array field gets one entry per distinct scalar element (a literal
matches an array that contains it); objects, nested arrays and a missing field get none.

The index is a *candidate generator*, never the judge: ``find`` fetches the documents whose
ids the index yields and still applies the whole filter to each. So an index may hold a
stale entry (a harmless extra lookup: a race between a build chunk and a staged update),
but it must never miss one. That is why every insert / update / delete stages its entry
changes into the same group-commit batch as the document itself (one ``WriteBatch``, one
sync: the index and the documents are never seen out of step after a crash), and why an
index is used for queries only once its build over the existing documents finished
(``ready``). A build interrupted by a crash is resumed (entries are idempotent puts).

Definitions live in the ``meta`` family under ``x`` + index id → JSON
``{"collection", "field", "ready"}``.

Usable filters: on an indexed field, a literal, ``$eq``, ``$in`` (of scalars) or the range
operators ``$gt $gte $lt $lte``; other conditions of the filter are simply re-checked.
``null`` (which also matches a missing field) and array/object literals fall back to a scan.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from .encoding import prefix_end
from .names import validate_collection_name
from .query import MISSING, get_path, is_operator_object
from .raw import DocumentRecords

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_F64 = struct.Struct(">d")

# Kind tags, in the order kinds sort (only order *within* a kind is ever used).
_NULL, _FALSE, _TRUE, _NUMBER, _STRING = b"\x10", b"\x20", b"\x21", b"\x30", b"\x40"
_KIND_END = {_NUMBER: b"\x31", _STRING: b"\x41"}
_RANGE_OPS = ("$gt", "$gte", "$lt", "$lte")
BUILD_CHUNK = 2000  # documents indexed per commit round while building


class IndexSpecError(ValueError):
    """Bad index request (unknown index, invalid field path)."""


def _number(value: int | float) -> bytes | None:
    try:
        f = float(value)
    except OverflowError:  # an int beyond float range: still monotonic at the extremes
        f = math.inf if value > 0 else -math.inf
    if f != f:
        return None
    if f == 0.0:
        f = 0.0  # -0.0 == 0.0 in queries: one encoding
    bits = int.from_bytes(_F64.pack(f), "big")
    # IEEE 754 order trick: flip the sign bit of positives, every bit of negatives.
    bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits >> 63 else bits | (1 << 63)
    return bits.to_bytes(8, "big")


def encode_value(value: Any) -> bytes | None:
    """Order-preserving bytes of a scalar JSON value; ``None`` if it is not indexable.

    Ints beyond 2**53 share encodings with their float neighbours: still monotonic, and the
    filter is re-checked on every fetched document, so a shared encoding only costs a lookup.
    """
    if value is None:
        return _NULL
    if value is True:
        return _TRUE
    if value is False:
        return _FALSE
    if isinstance(value, int | float):
        num = _number(value)
        return None if num is None else _NUMBER + num
    if isinstance(value, str):
        # UTF-8 byte order is code point order (= Python's str order). 0x00 is escaped so
        # the 0x00 0x01 terminator sorts a prefix before its extensions ("a" < "ab").
        return _STRING + value.encode("utf-8", "surrogatepass").replace(b"\x00", b"\x00\xff") \
            + b"\x00\x01"
    return None


def entry_values(doc: dict[str, Any], field: str) -> set[bytes]:
    """The encoded values ``doc`` contributes to an index on ``field``."""
    value = get_path(doc, field)
    if value is MISSING:
        return set()
    if isinstance(value, list):
        out = set()
        for item in value:
            enc = encode_value(item)
            if enc is not None:
                out.add(enc)
        return out
    enc = encode_value(value)
    return set() if enc is None else {enc}


def _prefix_end(prefix: bytes) -> bytes:
    end = prefix_end(prefix)
    assert end is not None  # index keys start with a 4-byte index id: never all 0xff
    return end


@dataclass(slots=True)
class IndexDef:
    """One index: its id, collection, field path and whether its build finished."""

    iid: int
    collection: str
    field: str
    ready: bool = False

    def row(self) -> dict[str, Any]:
        return {"collection": self.collection, "field": self.field,
                "state": "ready" if self.ready else "building", "id": self.iid}


def meta_key(iid: int) -> bytes:
    return b"x" + _U32.pack(iid)


def _scalar_points(values: Iterable[Any]) -> list[bytes] | None:
    out = []
    for v in values:
        if v is None or isinstance(v, dict | list):
            return None  # null matches missing; containers compare whole: scan
        enc = encode_value(v)
        if enc is None:
            return None
        out.append(enc)
    return out


def plan_ranges(cond: Any) -> list[tuple[bytes, bytes]] | None:
    """Inclusive-start, exclusive-end encoded value ranges a condition can match, or
    ``None`` if an index cannot narrow it. Bounds are inclusive on both ends in value
    terms (a superset); the filter is re-checked anyway."""
    if not is_operator_object(cond):
        single = _scalar_points([cond])
        return None if single is None else [(p, _prefix_end(p)) for p in single]
    points: list[bytes] | None = None
    if "$eq" in cond:
        points = _scalar_points([cond["$eq"]])
    elif "$in" in cond and isinstance(cond["$in"], list):
        points = _scalar_points(cond["$in"])
    if points is not None:
        return [(p, _prefix_end(p)) for p in sorted(set(points))]
    lo: bytes | None = None
    hi: bytes | None = None
    kind: bytes | None = None
    for op in _RANGE_OPS:
        if op not in cond:
            continue
        arg = cond[op]
        if isinstance(arg, bool) or not isinstance(arg, int | float | str):
            return None
        enc = encode_value(arg)
        if enc is None:
            return None
        if kind is not None and enc[:1] != kind:
            return []  # e.g. $gt 3 and $lt "z": nothing is both a number and a string
        kind = enc[:1]
        if op in ("$gt", "$gte"):
            lo = enc if lo is None or enc > lo else lo
        else:
            end = _prefix_end(enc)
            hi = end if hi is None or end < hi else hi
    if kind is None:
        return None
    start = lo if lo is not None else kind
    stop = hi if hi is not None else _KIND_END[kind]
    return [(start, stop)] if start < stop else []


class IndexCatalog:
    """The indexes of one store, and the entry changes that keep them in step."""

    def __init__(self, store: IndexedStore) -> None:
        self.store = store
        self.defs: dict[int, IndexDef] = {}
        self.by_collection: dict[str, list[IndexDef]] = {}
        self.active = False  # any index at all: the one check on the write path
        self.scans_avoided = 0  # finds answered through an index
        self._load()

    def _load(self) -> None:
        for key, value in self.store.iter_raw("meta", b"x"):
            if len(key) != 5:
                continue
            try:
                body = json.loads(bytes(value))
                idef = IndexDef(_U32.unpack_from(key, 1)[0], body["collection"], body["field"],
                                bool(body.get("ready")))
                if not isinstance(idef.collection, str) or not isinstance(idef.field, str):
                    raise TypeError("collection and field must be strings")
                if not idef.field or any(not part for part in idef.field.split(".")):
                    raise ValueError(f"invalid field path {idef.field!r}")
            except (ValueError, KeyError, TypeError, struct.error) as exc:
                # Recovery never crash-loops: the definition is moved aside; its entries
                # are merely unused (a re-created index gets a new id).
                self.store.quarantine("meta", key, value, f"index definition: {exc}")
                continue
            self._add(idef)

    def _add(self, idef: IndexDef) -> None:
        self.defs[idef.iid] = idef
        self.by_collection.setdefault(idef.collection, []).append(idef)
        self.active = True

    def _remove(self, idef: IndexDef) -> None:
        self.defs.pop(idef.iid, None)
        lst = self.by_collection.get(idef.collection, [])
        if idef in lst:
            lst.remove(idef)
        if not lst:
            self.by_collection.pop(idef.collection, None)
        self.active = bool(self.defs)

    def lookup(self, collection: str, field: str) -> IndexDef | None:
        for idef in self.by_collection.get(collection, ()):
            if idef.field == field:
                return idef
        return None

    def rows(self, collection: str | None = None) -> list[dict[str, Any]]:
        defs = sorted(self.defs.values(), key=lambda d: (d.collection, d.field))
        return [d.row() for d in defs if collection is None or d.collection == collection]

    # ----------------------------------------------------------- definitions
    def stage_define(self, collection: str, field: str) -> tuple[IndexDef, bool]:
        """Stage a new (building) index; returns ``(def, created)``. From now on every
        write to ``collection`` maintains it; ``build_chunk`` covers older documents."""
        if not field or field.startswith("$") or any(not p for p in field.split(".")):
            raise IndexSpecError(f"invalid field path {field!r}")
        if field == "_id":
            raise IndexSpecError("_id needs no index: documents are stored in _id order")
        validate_collection_name(collection)
        existing = self.lookup(collection, field)
        if existing is not None:
            return existing, False
        iid = max(self.defs, default=0) + 1
        idef = IndexDef(iid, collection, field, False)
        self._stage_meta(idef)
        self._add(idef)
        return idef, True

    def _stage_meta(self, idef: IndexDef) -> None:
        body = {"collection": idef.collection, "field": idef.field, "ready": idef.ready}
        self.store.stage_put("meta", meta_key(idef.iid), json.dumps(body).encode())

    def stage_ready(self, idef: IndexDef) -> None:
        """Mark the build finished (same batch as its last chunk)."""
        idef.ready = True
        self._stage_meta(idef)

    def stage_drop(self, collection: str, field: str) -> bool:
        idef = self.lookup(collection, field)
        if idef is None:
            return False
        self._remove(idef)
        self.store.stage_delete_key("meta", meta_key(idef.iid))
        self._stage_clear(idef)
        return True

    def build_chunk(self, idef: IndexDef, start_id: int, limit: int = BUILD_CHUNK) -> int | None:
        """Stage entries for up to ``limit`` documents from ``start_id``; returns the next
        id to continue from, or ``None`` when the collection is covered (call
        ``stage_ready`` then)."""
        for n, doc in enumerate(self.store.iter_docs(idef.collection, start_id)):
            if n >= limit:
                return int(doc["_id"])
            self._put(idef, int(doc["_id"]), doc)
        return None

    # ----------------------------------------------------------- maintenance
    def _stage_entries(self, idef: IndexDef, doc_id: int, put: Iterable[bytes],
                       delete: Iterable[bytes] = ()) -> None:
        """Stage the entry keys of ``doc_id`` for the encoded values ``put`` / ``delete``."""
        prefix, suffix = _U32.pack(idef.iid), _U64.pack(doc_id)
        for enc in delete:
            self.store.stage_delete_key("idx", prefix + enc + suffix)
        for enc in put:
            self.store.stage_put("idx", prefix + enc + suffix, b"")

    def _put(self, idef: IndexDef, doc_id: int, doc: dict[str, Any]) -> None:
        self._stage_entries(idef, doc_id, entry_values(doc, idef.field))

    def _stage_clear(self, idef: IndexDef) -> None:
        """Stage the deletion of every entry of ``idef``."""
        prefix = _U32.pack(idef.iid)
        self.store.stage_delete_range("idx", prefix, _prefix_end(prefix))

    def has(self, collection: str) -> bool:
        return self.active and collection in self.by_collection

    def on_insert(self, collection: str, doc_id: int, doc: dict[str, Any]) -> None:
        for idef in self.by_collection.get(collection, ()):
            self._put(idef, doc_id, doc)

    def on_update(self, collection: str, doc_id: int, old: dict[str, Any],
                  new: dict[str, Any]) -> None:
        for idef in self.by_collection.get(collection, ()):
            before, after = entry_values(old, idef.field), entry_values(new, idef.field)
            if before != after:
                self._stage_entries(idef, doc_id, after - before, before - after)

    def on_delete(self, collection: str, doc_id: int, old: dict[str, Any]) -> None:
        for idef in self.by_collection.get(collection, ()):
            self._stage_entries(idef, doc_id, (), entry_values(old, idef.field))

    def on_drop(self, collection: str) -> None:
        """The collection's documents go: so do its entries (definitions stay)."""
        for idef in self.by_collection.get(collection, ()):
            self._stage_clear(idef)

    # ----------------------------------------------------------------- reads
    def candidate_ids(self, collection: str, spec: Any) -> list[int] | None:
        """Ids (ascending, deduplicated) of every document of ``collection`` that can match
        ``spec`` according to one ready index, or ``None`` if no index applies."""
        best = self.plan(collection, spec)
        if best is None:
            return None
        idef, ranges = best
        self.scans_avoided += 1
        ids = set(self._scan(idef, ranges))
        return sorted(ids)

    def plan(self, collection: str, spec: Any
             ) -> tuple[IndexDef, list[tuple[bytes, bytes]]] | None:
        """The ready index and key ranges a find of ``spec`` would read, or ``None`` if no
        index applies (the find scans the collection). Reads nothing from the store."""
        defs = self.by_collection.get(collection)
        if not defs or not isinstance(spec, dict):
            return None
        best: tuple[IndexDef, list[tuple[bytes, bytes]]] | None = None
        for key, cond in spec.items():
            if key.startswith("$"):
                continue
            idef = next((d for d in defs if d.field == key and d.ready), None)
            if idef is None:
                continue
            ranges = plan_ranges(cond)
            if ranges is None:
                continue
            # Prefer point lookups ($eq/$in) to ranges: usually far fewer entries.
            is_points = not isinstance(cond, dict) or "$eq" in cond or "$in" in cond
            if best is None or is_points:
                best = (idef, ranges)
                if is_points:
                    break
        return best

    def _scan(self, idef: IndexDef, ranges: list[tuple[bytes, bytes]]) -> Iterator[int]:
        prefix = _U32.pack(idef.iid)
        for start, stop in ranges:
            end = prefix + stop
            for key, _value in self.store.iter_raw("idx", prefix, prefix + start):
                if key >= end:
                    break
                yield int(_U64.unpack_from(key, len(key) - 8)[0])


class IndexedStore(DocumentRecords, Protocol):
    """A store that keeps an :class:`IndexCatalog` (``Store`` does)."""

    indexes: IndexCatalog


def _build_rounds(store: IndexedStore, idef: IndexDef) -> Iterator[None]:
    """Stage the build of ``idef`` one chunk of documents at a time (the last chunk with
    ``ready``); the caller commits at each step. Stops if the index was dropped meanwhile."""
    next_id: int | None = 0
    while next_id is not None and idef.iid in store.indexes.defs:
        next_id = store.indexes.build_chunk(idef, next_id)
        if next_id is None:
            store.indexes.stage_ready(idef)
        yield


def create_index_blocking(store: IndexedStore, collection: str, field: str) -> dict[str, Any]:
    """Define and build an index without an event loop (CLI on the data dir)."""
    idef, created = store.indexes.stage_define(collection, field)
    if not idef.ready:
        for _ in _build_rounds(store, idef):
            store.commit_blocking()
    return {**idef.row(), "created": created}


async def create_index(store: IndexedStore, collection: str, field: str) -> dict[str, Any]:
    """Define and build an index inside the server: one chunk of documents per commit
    round, so publishers keep being served while a large collection is indexed."""
    idef, created = store.indexes.stage_define(collection, field)
    if not idef.ready:
        await finish_build(store, idef)
    return {**idef.row(), "created": created}


async def finish_build(store: IndexedStore, idef: IndexDef) -> None:
    """Build (or resume after a crash) an index that is not ready yet."""
    for _ in _build_rounds(store, idef):
        await store.commit()


def _stage_drop(store: IndexedStore, collection: str, field: str) -> dict[str, Any]:
    if not store.indexes.stage_drop(collection, field):
        raise IndexSpecError(f"no index on {collection}.{field}")
    return {"collection": collection, "field": field, "removed": True}


def drop_index_blocking(store: IndexedStore, collection: str, field: str) -> dict[str, Any]:
    result = _stage_drop(store, collection, field)
    store.commit_blocking()
    return result


async def drop_index(store: IndexedStore, collection: str, field: str) -> dict[str, Any]:
    result = _stage_drop(store, collection, field)
    await store.commit()
    return result
