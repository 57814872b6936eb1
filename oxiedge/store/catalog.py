"""The collection catalog: names, ids and counters of the document collections (``meta``).

Loaded once when the store opens (``load_catalog``); an entry that does not decode is
quarantined and its documents stay where they are (their id is unknown or shared), so a
collection created under the same name later gets a fresh id.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import cast

from rocksdict import Rdict, ReadOptions

from . import encoding as enc
from .names import validate_collection_name

Quarantine = Callable[[str, bytes, "bytes | None", str], bool]


class Collection:
    """One document collection: its id, next ``_id`` and document count."""

    __slots__ = ("cid", "count", "name", "next_id")

    def __init__(self, name: str, cid: int, next_id: int, count: int) -> None:
        self.name = name
        self.cid = cid
        self.next_id = next_id
        self.count = count


def load_catalog(meta: Rdict, docs: Rdict, quarantine: Quarantine
                 ) -> tuple[dict[str, Collection], set[str]]:
    """Every collection of the catalog, and the names whose counters must be rewritten."""
    collections: dict[str, Collection] = {}
    dirty: set[str] = set()
    ro = ReadOptions()
    ro.set_iterate_upper_bound(b"d")
    taken: set[int] = set()
    for key, value in meta.items(from_key=b"c", read_opt=ro):
        raw_key, raw_value = cast(bytes, key), cast(bytes, value)
        try:
            name = validate_collection_name(raw_key[1:].decode())
            cid = enc.decode_doc(0, raw_value)["id"]
            if type(cid) is not int or not 0 < cid < 1 << 32 or cid in taken:
                raise ValueError(f"bad collection id {cid!r}")
        except (ValueError, KeyError, TypeError) as exc:
            quarantine("meta", raw_key, raw_value, f"collection catalog entry: {exc}")
            continue
        taken.add(cid)
        raw = meta.get(enc.counters_key(cid))
        try:
            next_id, count = enc.decode_counters(raw) if raw is not None else (1, 0)
        except (ValueError, struct.error) as exc:
            quarantine("meta", enc.counters_key(cid), raw, f"collection counters: {exc}")
            next_id, count = 1, sum(1 for _ in _doc_keys(docs, cid))
            dirty.add(name)
        # Never reuse an id: also look at the last stored key of the collection.
        last = _last_doc_id(docs, cid)
        if last is not None and last >= next_id:
            next_id = last + 1
        collections[name] = Collection(name, cid, next_id, count)
    return collections, dirty


def _doc_keys(docs: Rdict, cid: int) -> Iterator[bytes]:
    ro = ReadOptions()
    ro.set_iterate_upper_bound(enc.collection_prefix(cid + 1))
    for key in docs.keys(from_key=enc.collection_prefix(cid), read_opt=ro):
        yield cast(bytes, key)


def _last_doc_id(docs: Rdict, cid: int) -> int | None:
    ro = ReadOptions()
    ro.set_iterate_upper_bound(enc.collection_prefix(cid + 1))
    for key in docs.keys(backwards=True, from_key=enc.collection_prefix(cid) + b"\xff" * 8,
                         read_opt=ro):
        raw_key = cast(bytes, key)
        if raw_key[:4] == enc.collection_prefix(cid):
            return enc.doc_id_of(raw_key)
        return None
    return None
