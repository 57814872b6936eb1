"""How AMQP state maps onto the store (docs/storage.md, docs/amqp.md "Durability").

* Durable queues, durable exchanges and bindings between durable things are documents in
  the ``_amqp`` collection with ``_kind`` ``queue`` / ``exchange`` / ``bind``.  A queue
  document carries ``qid``, the 8-byte owner id of its messages.
* Persistent messages (delivery-mode 2) on durable queues are raw records in the ``amqp``
  column family: key ``b"m" + qid (8 bytes BE) + seq (8 bytes BE)``; value
  ``version octet, exchange shortstr, routing-key shortstr, uint32 length + the content
  properties exactly as received (flags word onwards), body``.  A durable classic or
  quorum queue keeps them as a queue log (``queuelog.py``, ``store/qlog.py``): its counters
  in ``b"c" + qid`` (floor, tail, count, body bytes), an acknowledged run deleted as one
  range; a non-persistent message paged to disk is the same record behind the one-byte
  mark ``VOLATILE`` (discarded after a restart).  Deleting a queue deletes its key range.
* ``find _amqp`` shows those records as ``{"_kind": "qmsg", ...}`` through a store view.

Nothing here awaits: callers stage, then ``await store.commit()`` (or ``kick()``).

Recovery never crash-loops: a document or record that does not check out (``check_*_doc``,
``decode_record``) is moved to the store's quarantine, counted and logged with its key
(``oxiedge/store/quarantine.py``), and recovery goes on; the messages of a quarantined queue
are quarantined with it, never deleted.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

from oxiedge.amqp import spec
from oxiedge.store.qlog_recover import floor_of

CF = "amqp"
COLL = "_amqp"
MSG_PREFIX = b"m"
META_PREFIX = b"c"
LEVEL_PREFIX = b"p"  # + qid + level + seq: a priority queue's records (``prioritylog.py``)
LEVEL_META_PREFIX = b"d"  # + qid + level: their counters
#: Marks the record of a non-persistent message paged to disk (never a record version).
VOLATILE = b"\x80"
_KEY = struct.Struct(">QQ")
_I = struct.Struct(">I")
_Q = struct.Struct(">Q")
_VERSION = 1
_VERSION_TTL = 2
VERSION_TTL = _VERSION_TTL  # (a record with a deadline: the ms after this byte, 8 B BE)


def msg_key(qid: int, seq: int) -> bytes:
    """Raw key of message ``seq`` of queue ``qid``."""
    return MSG_PREFIX + _KEY.pack(qid, seq)


def meta_key(qid: int) -> bytes:
    """Raw key of the queue log counters of queue ``qid``."""
    return META_PREFIX + _Q.pack(qid)


def parse_meta_key(key: bytes) -> int:
    """The qid of a queue log counters key."""
    return int(_Q.unpack_from(key, 1)[0])


def level_prefix(qid: int, level: int) -> bytes:
    """Key prefix of the records of priority ``level`` of priority queue ``qid``."""
    return LEVEL_PREFIX + _Q.pack(qid) + bytes((level,))


def level_meta_key(qid: int, level: int) -> bytes:
    """Raw key of the queue log counters of priority ``level`` of queue ``qid``."""
    return LEVEL_META_PREFIX + _Q.pack(qid) + bytes((level,))


def level_range(qid: int) -> tuple[bytes, bytes]:
    """``[start, end)`` covering every priority level record of queue ``qid``."""
    return LEVEL_PREFIX + _Q.pack(qid), LEVEL_PREFIX + _Q.pack(qid + 1)


def queue_range(qid: int) -> tuple[bytes, bytes]:
    """``[start, end)`` covering every message key of queue ``qid``."""
    return MSG_PREFIX + _KEY.pack(qid, 0), MSG_PREFIX + _KEY.pack(qid + 1, 0)


def parse_key(key: bytes) -> tuple[int, int]:
    """``(qid, seq)`` of a message key."""
    qid, seq = _KEY.unpack_from(key, 1)
    return qid, seq


def encode_record(exchange: str, routing_key: str, properties: bytes, body: bytes,
                  expires: float = 0.0) -> bytes:
    """A message record; one with a per-message TTL (version 2) also stores its deadline
    (ms since the epoch) so the TTL keeps running across a restart."""
    ex = exchange.encode("utf-8", "surrogateescape")
    rk = routing_key.encode("utf-8", "surrogateescape")
    head = bytes((_VERSION, len(ex))) if not expires else (
        bytes((_VERSION_TTL,)) + _Q.pack(int(expires * 1000)) + bytes((len(ex),)))
    return b"".join((head, ex, bytes((len(rk),)), rk, _I.pack(len(properties)), properties,
                     body))


def decode_record(value: bytes) -> tuple[str, str, bytes, bytes, float]:
    """``(exchange, routing_key, properties, body, expires)`` of a stored message
    (``expires`` = wall-clock deadline in seconds, 0 = no TTL)."""
    expires = 0.0
    if value[:1] == VOLATILE:
        value = value[1:]
    if value and value[0] == _VERSION_TTL:
        expires = _Q.unpack_from(value, 1)[0] / 1000
        value = bytes((_VERSION,)) + value[9:]
    if not value or value[0] != _VERSION:
        raise ValueError("unknown AMQP message record version")
    off = 2 + value[1]
    exchange = value[2:off].decode("utf-8", "surrogateescape")
    n = value[off]
    routing_key = value[off + 1 : off + 1 + n].decode("utf-8", "surrogateescape")
    off += 1 + n
    plen = _I.unpack_from(value, off)[0]
    off += 4
    if off + plen > len(value):
        raise ValueError("AMQP message record shorter than its properties")
    return (exchange, routing_key, bytes(value[off : off + plen]), bytes(value[off + plen :]),
            expires)


def body_size(value: bytes) -> int:
    """The body length of a record, read from its header only (never raises: a record
    that does not parse counts its whole length)."""
    try:
        off = 1 if value[:1] == VOLATILE else 0
        if value[off] == _VERSION_TTL:
            off += 8
        off += 2 + value[off + 1]
        off += 1 + value[off]
        return max(0, len(value) - off - 4 - _I.unpack_from(value, off)[0])
    except (IndexError, struct.error):
        return len(value)


def jsonable(value: Any) -> Any:
    """A field-table value in JSON shape (for documents and admin rows)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return {"$base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, Decimal):
        return str(value)
    return value


def properties_doc(raw: bytes) -> dict[str, Any]:
    """Decoded content properties (only those present) for display."""
    try:
        props, _ = spec.BasicProperties.decode(raw)
    except Exception:
        return {"raw": base64.b64encode(raw).decode()}
    return {k: jsonable(v) for k in spec.PROPERTY_NAMES if (v := getattr(props, k)) is not None}


def message_doc(queue: str, qid: int, seq: int, value: bytes) -> dict[str, Any]:
    """The ``{"_kind": "qmsg"}`` document shape of a stored message."""
    exchange, routing_key, properties, body, expires = decode_record(value)
    doc: dict[str, Any] = {
        "_id": f"{qid}:{seq}",
        "_kind": "qmsg",
        "queue": queue,
        "qid": qid,
        "seq": seq,
        "exchange": exchange,
        "routing_key": routing_key,
        "properties": properties_doc(properties),
        "size": len(body),
    }
    if expires:
        doc["expires_ms"] = int(expires * 1000)
    try:
        doc["body"] = body.decode("utf-8")
    except UnicodeDecodeError:
        doc["body_base64"] = base64.b64encode(body).decode()
    return doc


def iter_message_docs(store: Any, queue_name: Callable[[int], str | None]) -> Iterator[dict]:
    """All stored messages as documents (``queue_name(qid)`` names their queue). A queue
    log's records below its floor (acknowledged, their run's range delete not staged yet)
    and non-persistent ones paged to disk are not shown."""
    floors: dict[bytes, int] = {}  # counters key -> its floor
    for key, value in store.iter_raw(CF, MSG_PREFIX):
        qid, seq = parse_key(key)
        if _live(store, floors, meta_key(qid), seq, value):
            yield message_doc(queue_name(qid) or f"#{qid}", qid, seq, value)
    for key, value in store.iter_raw(CF, LEVEL_PREFIX):  # priority queues' levels
        if len(key) == 18:
            qid, seq = _Q.unpack_from(key, 1)[0], _Q.unpack_from(key, 10)[0]
            if _live(store, floors, level_meta_key(qid, key[9]), seq, value):
                yield message_doc(queue_name(qid) or f"#{qid}", qid, seq, value)


def _live(store: Any, floors: dict[bytes, int], counters: bytes, seq: int, value: bytes
          ) -> bool:
    floor = floors.get(counters)
    if floor is None:
        floor = floors[counters] = floor_of(store, CF, counters)
    return seq >= floor and value[:1] != VOLATILE


# -- recovery checks: each raises ValueError naming what is wrong ------------------------


def _need(doc: dict[str, Any], key: str, kind: type | tuple[type, ...],
          optional: bool = False) -> None:
    value = doc.get(key)
    if value is None and optional:
        return
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"field {key!r} is {value!r}")


def check_exchange_doc(doc: dict[str, Any], types: tuple[str, ...]) -> None:
    _need(doc, "name", str)
    if doc.get("type") not in types:
        raise ValueError(f"exchange type {doc.get('type')!r}")
    for flag in ("auto_delete", "internal"):
        _need(doc, flag, bool, optional=True)
    _need(doc, "arguments", dict, optional=True)


def check_queue_doc(doc: dict[str, Any]) -> None:
    _need(doc, "name", str)
    _need(doc, "qid", int)
    if not 0 <= doc["qid"] < 1 << 64:
        raise ValueError(f"qid {doc['qid']}")
    _need(doc, "auto_delete", bool, optional=True)
    _need(doc, "arguments", dict, optional=True)


def check_bind_doc(doc: dict[str, Any]) -> None:
    _need(doc, "exchange", str)
    if "destination_exchange" in doc:
        _need(doc, "destination_exchange", str)
    else:
        _need(doc, "queue", str)
    _need(doc, "routing_key", str, optional=True)
    _need(doc, "arguments", dict, optional=True)


def load_docs(store: Any) -> tuple[list[dict], list[dict], list[dict]]:
    """``(queues, exchanges, bindings)`` documents of ``_amqp``."""
    queues, exchanges, binds = [], [], []
    for doc in store.iter_docs(COLL):
        kind = doc.get("_kind")
        if kind == "queue":
            queues.append(doc)
        elif kind == "exchange":
            exchanges.append(doc)
        elif kind == "bind":
            binds.append(doc)
    return queues, exchanges, binds
