"""Records recovery could not decode, moved aside so that start-up never crash-loops.

Theory of operation
-------------------
Every decode site that start-up reaches (the catalog, index definitions, documents, the
MQTT / AMQP / uplink raw records) catches the failure of *one* record and hands it to
``Store.quarantine``: the record is moved, in the next commit round, to the ``quarantine``
column family and deleted from where it was, counted, and logged with its key; start-up
goes on with everything else. A restart then no longer meets the record, so a corrupt (or
newer-than-this-version) record costs exactly that record, never the service.

Layout: key = source column family (ASCII) + ``\\0`` + the original key; value = reason
length (2 bytes BE) + reason (UTF-8) + the original value, byte for byte, so an operator (or
a newer version) can still inspect or restore it. ``oxiedge status`` shows the count and the
latest entries. Read-only stores (the CLI on a data dir) count and skip, never move.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from typing import Any

from .raw import QuarantineState

CF = "quarantine"
_H = struct.Struct(">H")
#: entries listed by ``oxiedge status`` (the count covers all of them)
STATUS_ROWS = 10
_log = logging.getLogger("oxiedge")


def show_key(key: bytes) -> str:
    """A key as one printable token (long keys shortened)."""
    text = repr(bytes(key))
    return text if len(text) <= 120 else text[:117] + "..."


def encode_entry(reason: str, value: bytes) -> bytes:
    raw = reason.encode("utf-8", "replace")[:1000]
    return _H.pack(len(raw)) + raw + bytes(value)


def decode_entry(value: bytes) -> tuple[str, bytes]:
    """``(reason, original value)``; never raises (a broken entry is shown as such)."""
    if len(value) < 2:
        return "?", bytes(value)
    n = _H.unpack_from(value)[0]
    return bytes(value[2:2 + n]).decode("utf-8", "replace"), bytes(value[2 + n:])


def stage(store: QuarantineState, cf: str, key: bytes, value: bytes | None, reason: str) -> bool:
    """Count, log and (read-write stores) stage the move of one record (see module doc);
    False if this process already handled that record."""
    if (cf, bytes(key)) in store.quarantined_keys:
        return False
    store.quarantined_keys.add((cf, bytes(key)))
    store.quarantined_now += 1
    _log.warning("recovery: quarantined %s record %s (%s bytes): %s", cf, show_key(key),
                 "?" if value is None else len(value), reason)
    if store.read_only or not store.has_family(CF):
        return True
    qkey = cf.encode() + b"\0" + bytes(key)
    store.stage_put(CF, qkey, encode_entry(reason, value or b""))
    store.stage_delete_key(cf, bytes(key))
    store.recent_quarantine.append((cf, bytes(key), reason))
    del store.recent_quarantine[:-STATUS_ROWS]
    store.kick()  # committed by the next round, even when nothing else is written
    return True


def entries(store: QuarantineState) -> Iterator[tuple[str, bytes, str, bytes]]:
    """``(column family, original key, reason, original value)`` of every entry on disk."""
    if not store.has_family(CF):
        return
    for qkey, value in store.iter_raw(CF):
        cf, _, key = bytes(qkey).partition(b"\0")
        reason, original = decode_entry(value)
        yield cf.decode("ascii", "replace"), key, reason, original


def status(store: QuarantineState) -> dict[str, Any]:
    """The ``store.quarantine`` part of ``oxiedge status``."""
    on_disk = list(entries(store))
    rows = [f"{cf} {show_key(key)}: {reason}" for cf, key, reason, _ in on_disk[-STATUS_ROWS:]]
    # Moves staged but not committed yet are not on disk: list them too.
    listed = {(cf, key) for cf, key, _, _ in on_disk}
    rows += [f"{cf} {show_key(key)}: {reason}" for cf, key, reason in store.recent_quarantine
             if (cf, key) not in listed]
    return {"records": len(on_disk) + sum(1 for cf, key, _ in store.recent_quarantine
                                          if (cf, key) not in listed),
            "this_run": store.quarantined_now, "latest": rows[-STATUS_ROWS:]}
