"""Raw basic content properties: check them, read one field, rewrite a few (sans-IO).

A message's properties are kept as the bytes the publisher sent (flags word onwards) and
delivered byte-exact.  The broker only ever needs:

* to check them once as they arrive (:func:`scan_properties`: lengths, and the ``headers``
  table as the decoder would read it, without building it) and pick ``delivery-mode``;
* one field now and then (:func:`expiration_of`, :func:`headers_of`,
  :func:`decoded_headers`);
* to rewrite a few headers (dead-lettering, ``x-delivery-count``) and drop ``expiration``
  (:func:`rewrite`), leaving every other byte as it was: RabbitMQ keeps a header's type, so
  a ``b``, ``s`` or ``l`` stays one and a Java client reading a Long still reads a Long.

Property ``i`` in spec order is flagged by bit ``15 - i`` of the flags word: content-type,
content-encoding, headers, delivery-mode, priority, correlation-id, reply-to, expiration,
message-id, timestamp, type, user-id, app-id, cluster-id.  Bit 0 would announce a second
flags word, which the basic class never has.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from oxiedge.amqp.constants import SYNTAX_ERROR
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.fields import Raw, check_table, decode_table, encode_table, split_table

_H = struct.Struct(">H")
_I = struct.Struct(">I")

HEADERS = 0x2000
EXPIRATION = 0x0100
PRIORITY = 0x0800
#: Flag bits in wire order with the shape of their field: shortstr, table, octet, 8 octets.
_FIELDS = ((0x8000, "s"), (0x4000, "s"), (HEADERS, "t"), (0x1000, "o"), (PRIORITY, "o"),
           (0x0400, "s"), (0x0200, "s"), (EXPIRATION, "s"), (0x0080, "s"), (0x0040, "q"),
           (0x0020, "s"), (0x0010, "s"), (0x0008, "s"), (0x0004, "s"))


def scan_properties(raw: bytes) -> int | None:
    """Validate the basic properties' lengths and return ``delivery-mode`` (or ``None``).

    Cheaper than a full decode: this runs per message. A ``headers`` table is checked as
    the decoder would read it (the broker decodes it later for dead-lettering,
    ``x-delivery-count`` and headers exchanges) but not built. Raises 502 when a length
    points past the end, a continuation flags word is set, or the headers table is
    malformed (a truncated value, an unknown field type, a key that is not UTF-8, nesting
    deeper than ``MAX_DEPTH``).
    """
    try:
        flags = _H.unpack_from(raw, 0)[0]
        if flags & 1:
            raise AmqpError(SYNTAX_ERROR, "basic properties have no second flags word")
        off = 2
        mode = None
        if flags & 0x8000:
            off += 1 + raw[off]
        if flags & 0x4000:
            off += 1 + raw[off]
        if flags & HEADERS:
            size = _I.unpack_from(raw, off)[0]
            if size:
                check_table(raw, off)  # 502 for what the broker could not read later
            off += 4 + size
        if flags & 0x1000:
            mode = raw[off]
            off += 1
        if flags & 0x0800:
            off += 1
        for bit in (0x0400, 0x0200, 0x0100, 0x0080):
            if flags & bit:
                off += 1 + raw[off]
        if flags & 0x0040:
            off += 8
        for bit in (0x0020, 0x0010, 0x0008, 0x0004):
            if flags & bit:
                off += 1 + raw[off]
    except (IndexError, struct.error):
        raise AmqpError(SYNTAX_ERROR, "truncated content properties") from None
    if off > len(raw):
        raise AmqpError(SYNTAX_ERROR, "truncated content properties")
    return mode


def _spans(raw: bytes) -> dict[int, tuple[int, int]]:
    """Each present field's ``(start, end)`` in ``raw``, by flag bit."""
    try:
        flags = _H.unpack_from(raw, 0)[0]
        off = 2
        spans: dict[int, tuple[int, int]] = {}
        for bit, shape in _FIELDS:
            if not flags & bit:
                continue
            if shape == "s":
                end = off + 1 + raw[off]
            elif shape == "t":
                end = off + 4 + _I.unpack_from(raw, off)[0]
            else:
                end = off + (1 if shape == "o" else 8)
            spans[bit] = (off, end)
            off = end
    except (IndexError, struct.error):
        raise AmqpError(SYNTAX_ERROR, "truncated content properties") from None
    if off > len(raw):
        raise AmqpError(SYNTAX_ERROR, "truncated content properties")
    return spans


def expiration_of(raw: bytes) -> str | None:
    """The ``expiration`` property (a TTL in milliseconds, as text) of raw properties that
    :func:`scan_properties` already validated; ``None`` when absent."""
    flags = _H.unpack_from(raw, 0)[0]
    if not flags & EXPIRATION:
        return None
    off = 2
    for bit in (0x8000, 0x4000):
        if flags & bit:
            off += 1 + raw[off]
    if flags & HEADERS:
        off += 4 + _I.unpack_from(raw, off)[0]
    off += (1 if flags & 0x1000 else 0) + (1 if flags & 0x0800 else 0)
    for bit in (0x0400, 0x0200):
        if flags & bit:
            off += 1 + raw[off]
    return raw[off + 1 : off + 1 + raw[off]].decode("utf-8", "replace")


def priority_of(raw: bytes) -> int:
    """The ``priority`` property (an octet) of raw properties that :func:`scan_properties`
    already validated; 0 when absent (RabbitMQ's reading)."""
    flags = _H.unpack_from(raw, 0)[0]
    if not flags & PRIORITY:
        return 0
    off = 2
    for bit in (0x8000, 0x4000):
        if flags & bit:
            off += 1 + raw[off]
    if flags & HEADERS:
        off += 4 + _I.unpack_from(raw, off)[0]
    if flags & 0x1000:
        off += 1
    return raw[off]


def headers_of(raw: bytes) -> dict[str, Raw]:
    """The ``headers`` table one level deep, each value still encoded ({} when absent).

    Raises 502 for properties or a table the broker cannot read (a record stored before
    the headers were checked at arrival)."""
    return _headers(raw, split_table)


def decoded_headers(raw: bytes) -> dict[str, Any]:
    """The ``headers`` table decoded to Python values ({} when absent or unreadable), for
    a headers exchange to match on."""
    try:
        return _headers(raw, decode_table)
    except AmqpError:
        return {}


def _headers(raw: bytes, read: Callable[[bytes, int], tuple[dict[str, Any], int]]
             ) -> dict[str, Any]:
    span = _spans(raw).get(HEADERS)
    return {} if span is None else read(raw[: span[1]], span[0])[0]


def rewrite(raw: bytes, headers: dict[str, Any], *, drop_expiration: bool = False) -> bytes:
    """``raw`` with its ``headers`` table replaced by ``headers`` (values :class:`Raw` or
    plain Python values) and, if asked, without ``expiration``; every other field is kept
    byte for byte."""
    spans = _spans(raw)
    table = encode_table(headers)
    parts = []
    out_flags = 0
    for bit, _shape in _FIELDS:
        if bit == HEADERS:
            if headers or bit in spans:
                out_flags |= bit
                parts.append(table)
            continue
        span = spans.get(bit)
        if span is None or (bit == EXPIRATION and drop_expiration):
            continue
        out_flags |= bit
        parts.append(raw[span[0] : span[1]])
    return _H.pack(out_flags) + b"".join(parts)


__all__ = ["EXPIRATION", "HEADERS", "decoded_headers", "expiration_of", "headers_of", "rewrite",
           "scan_properties"]
