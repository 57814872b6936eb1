"""Key layout and value encoding of the ``docs`` and ``meta`` column families.

``docs``: key = collection id (4 bytes BE) + ``_id`` (8 bytes BE), so one collection is one
contiguous, id-ordered key range; value = compact UTF-8 JSON of the document without ``_id``
(the key carries it). ``meta``: ``c<name>`` → JSON catalog entry ``{"id": n}``;
``n<collection id>`` → 16 bytes: next ``_id`` and document count (both BE), written in the
same batch as the documents they describe.
"""

from __future__ import annotations

import struct
from typing import Any

import orjson

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_COUNTERS = struct.Struct(">QQ")



def collection_prefix(cid: int) -> bytes:
    return _U32.pack(cid)


def doc_key(cid: int, doc_id: int) -> bytes:
    return _U32.pack(cid) + _U64.pack(doc_id)


def doc_id_of(key: bytes) -> int:
    return int(_U64.unpack_from(key, 4)[0])


def encode_doc(doc: dict[str, Any]) -> bytes:
    """JSON bytes of ``doc`` without its ``_id``; raises ``ValueError`` if not JSON-able.

    orjson (10x the stdlib's speed on the ingest and scan paths) writes NaN and Infinity as
    ``null``, since JSON has no such numbers.
    """
    if "_id" in doc:
        doc = {k: v for k, v in doc.items() if k != "_id"}
    try:
        return orjson.dumps(doc)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        raise ValueError(f"document is not JSON-serialisable: {exc}") from exc


def decode_doc(doc_id: int, value: bytes) -> dict[str, Any]:
    body = orjson.loads(value)
    body_with_id: dict[str, Any] = {"_id": doc_id}
    body_with_id.update(body)
    return body_with_id


def catalog_key(name: str) -> bytes:
    return b"c" + name.encode()


def counters_key(cid: int) -> bytes:
    return b"n" + _U32.pack(cid)


def encode_counters(next_id: int, count: int) -> bytes:
    return _COUNTERS.pack(next_id, max(count, 0))


def decode_counters(value: bytes) -> tuple[int, int]:
    next_id, count = _COUNTERS.unpack(value)
    return int(next_id), int(count)


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])
