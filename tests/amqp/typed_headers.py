"""Byte vectors of typed headers for the tests of header rewriting (dead-lettering,
``x-delivery-count``), in-process and on a real server."""

from __future__ import annotations

#: One header of every field type, hand-encoded: what a Java or .NET publisher may send.
#: Decoding to Python and re-encoding would retype most of them (b/s/l -> I, f -> d, a
#: non-UTF-8 S -> x); the broker must hand them on as they came, as RabbitMQ does.
TYPED = [
    b"\x01bb\xfe", b"\x01BB\xfe", b"\x01ss\xff\xfe", b"\x01uu\xff\xfe",
    b"\x01II\x00\x00\x00\x07", b"\x01ii\x00\x00\x00\x07", b"\x01ll" + bytes(7) + b"\x07",
    b"\x01LL" + bytes(7) + b"\x07", b"\x01ff\x3f\xc0\x00\x00", b"\x01dd?\xf8" + bytes(6),
    b"\x01DD\x02\x00\x00\x01\x00", b"\x01TT" + bytes(7) + b"\x09", b"\x01tt\x01",
    b"\x01SS\x00\x00\x00\x02\xff\xfe", b"\x01xx\x00\x00\x00\x01z", b"\x01VV",
    b"\x01AA\x00\x00\x00\x02b\x01", b"\x01FF\x00\x00\x00\x04\x01kb\x01",
]


def typed_properties(expiration: bytes = b"100") -> bytes:
    table = b"".join(TYPED)
    # content-type, headers, delivery-mode, correlation-id, expiration, timestamp, app-id
    return (b"\xb5\x48" + b"\x04text" + len(table).to_bytes(4, "big") + table + b"\x02"
            + b"\x03cid" + bytes([len(expiration)]) + expiration + bytes(7) + b"\x2a"
            + b"\x03app")
