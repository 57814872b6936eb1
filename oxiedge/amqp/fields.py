"""AMQP field values: short/long strings and field tables with every RabbitMQ field type.

RabbitMQ (and pika, aio-pika, the Java and .NET clients) use the type letters of the
RabbitMQ errata to the 0-9-1 spec, not the spec's own table (which clashes on ``s``):

=====  ===========================  ==================================
letter  wire                         Python value on decode
=====  ===========================  ==================================
``t``  octet 0/1                     ``bool``
``b``  int8 / ``B`` uint8            ``int``
``s``  int16 / ``u`` uint16          ``int``
``I``  int32 / ``i`` uint32          ``int``
``l``  int64 / ``L`` uint64          ``int``
``f``  float32 / ``d`` float64       ``float``
``D``  scale octet + uint32          ``decimal.Decimal``
``S``  long string                   ``str`` (``bytes`` if not UTF-8)
``x``  byte array (long)             ``bytes``
``A``  array of field values         ``list``
``T``  uint64 seconds                :class:`Timestamp`
``F``  nested table                  ``dict``
``V``  nothing                       ``None``
=====  ===========================  ==================================

Encoding picks the narrowest faithful letter for each Python type (``int`` → ``I`` when it
fits, else ``l``; ``float`` → ``d``; ``str`` → ``S``; ``bytes`` → ``x``), so
``decode(encode(v)) == v`` for every value built from these types.  Every malformed input
raises :class:`~oxiedge.amqp.errors.AmqpError` 502, never ``IndexError``/``struct.error``.
"""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any

from oxiedge.amqp.errors import AmqpError, syntax_error

#: Nested tables/arrays deeper than this are refused (a garbage frame must not recurse
#: the decoder into a RecursionError).
MAX_DEPTH = 64

_B = struct.Struct(">B")
_H = struct.Struct(">H")
_I = struct.Struct(">I")
_Q = struct.Struct(">Q")
_b = struct.Struct(">b")
_h = struct.Struct(">h")
_i = struct.Struct(">i")
_q = struct.Struct(">q")
_f = struct.Struct(">f")
_d = struct.Struct(">d")
_BI = struct.Struct(">BI")


class Timestamp(int):
    """A field-table timestamp (``T``): seconds since the epoch, re-encoded as ``T``."""

    __slots__ = ()


class Raw(bytes):
    """An already-encoded field value (type letter onwards), written back byte-exact.

    The broker rewrites a few headers of a message (``x-death``, ``x-delivery-count``) and
    must leave every other value as the publisher typed it (RabbitMQ does): decoding to
    Python values and re-encoding would turn a ``b``/``s``/``l`` into ``I``, an ``f`` into
    ``d`` and a non-UTF-8 ``S`` into ``x``.  :func:`split_table` gives such values."""

    __slots__ = ()


class Long(int):
    """An integer always encoded as a signed 64-bit ``l`` (RabbitMQ writes the ``count`` of
    ``x-death`` and ``x-delivery-count`` so; typed clients such as Java's read a Long)."""

    __slots__ = ()


# -- strings ---------------------------------------------------------------------------


def encode_shortstr(value: str) -> bytes:
    """Encode a shortstr (octet length + UTF-8); longer than 255 bytes is a 502."""
    raw = value.encode("utf-8", "surrogateescape")
    if len(raw) > 255:
        raise syntax_error(f"shortstr longer than 255 bytes ({len(raw)})")
    return _B.pack(len(raw)) + raw


def decode_shortstr(buf: bytes, off: int) -> tuple[str, int]:
    """Decode a shortstr at ``off``; bytes that are not UTF-8 survive via surrogateescape."""
    if off >= len(buf):
        raise syntax_error("truncated shortstr")
    end = off + 1 + buf[off]
    if end > len(buf):
        raise syntax_error("truncated shortstr")
    return buf[off + 1 : end].decode("utf-8", "surrogateescape"), end


def encode_longstr(value: bytes | str) -> bytes:
    """Encode a longstr (uint32 length + bytes)."""
    raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    return _I.pack(len(raw)) + raw


def decode_longstr(buf: bytes, off: int) -> tuple[bytes, int]:
    """Decode a longstr at ``off`` as bytes."""
    if off + 4 > len(buf):
        raise syntax_error("truncated longstr")
    end = off + 4 + _I.unpack_from(buf, off)[0]
    if end > len(buf):
        raise syntax_error("truncated longstr")
    return bytes(buf[off + 4 : end]), end


# -- field values ------------------------------------------------------------------------


def encode_value(value: Any, depth: int = 0) -> bytes:
    """Encode one field value with its type letter."""
    if depth > MAX_DEPTH:
        raise syntax_error("field table nested too deeply")
    if value is None:
        return b"V"
    if isinstance(value, bool):
        return b"t\x01" if value else b"t\x00"
    if isinstance(value, Timestamp):
        return b"T" + _Q.pack(value)
    if isinstance(value, Long):
        return b"l" + _q.pack(value)
    if isinstance(value, int):
        if -(1 << 31) <= value < (1 << 31):
            return b"I" + _i.pack(value)
        if -(1 << 63) <= value < (1 << 63):
            return b"l" + _q.pack(value)
        if 0 <= value < (1 << 64):
            return b"L" + _Q.pack(value)
        raise syntax_error(f"integer {value} does not fit a field value")
    if isinstance(value, float):
        return b"d" + _d.pack(value)
    if isinstance(value, Decimal):
        return b"D" + _encode_decimal(value)
    if isinstance(value, str):
        raw = value.encode("utf-8", "surrogateescape")
        return b"S" + _I.pack(len(raw)) + raw
    if isinstance(value, Raw):
        return bytes(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        return b"x" + _I.pack(len(raw)) + raw
    if isinstance(value, dict):
        return b"F" + encode_table(value, depth + 1)
    if isinstance(value, (list, tuple)):
        body = b"".join(encode_value(v, depth + 1) for v in value)
        return b"A" + _I.pack(len(body)) + body
    raise TypeError(f"cannot encode {type(value).__name__} as an AMQP field value")


def _encode_decimal(value: Decimal) -> bytes:
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int) or not -255 <= -exponent <= 255:
        raise syntax_error(f"decimal {value} does not fit a field value")
    scale = max(0, -exponent)
    unscaled = int("".join(map(str, digits)) or "0") * (10 ** max(0, exponent))
    if sign:
        unscaled = -unscaled
    if not -(1 << 31) <= unscaled < (1 << 31):
        raise syntax_error(f"decimal {value} does not fit a field value")
    return _B.pack(scale) + _i.pack(unscaled)


def encode_table(table: dict[str, Any] | None, depth: int = 0) -> bytes:
    """Encode a field table (uint32 byte length + key/value pairs)."""
    if not table:
        return b"\x00\x00\x00\x00"
    parts = []
    for key, value in table.items():
        parts.append(encode_shortstr(key))
        parts.append(encode_value(value, depth))
    body = b"".join(parts)
    return _I.pack(len(body)) + body


def _decode_value(buf: bytes, off: int, end: int, depth: int) -> tuple[Any, int]:
    if off >= end:
        raise syntax_error("truncated field value")
    kind = buf[off]
    off += 1
    try:
        if kind == 0x53 or kind == 0x78:  # 'S' long string, 'x' byte array
            n = _I.unpack_from(buf, off)[0]
            stop = off + 4 + n
            if stop > end:
                raise syntax_error("truncated long string in field table")
            raw = bytes(buf[off + 4 : stop])
            if kind == 0x78:
                return raw, stop
            try:
                return raw.decode("utf-8"), stop
            except UnicodeDecodeError:
                return raw, stop
        fixed = _FIXED.get(kind)
        if fixed is not None:
            st, conv = fixed
            if off + st.size > end:
                raise syntax_error("truncated field value")
            return conv(st.unpack_from(buf, off)[0]), off + st.size
        if kind == 0x46:  # 'F'
            return _decode_table_at(buf, off, end, depth + 1)
        if kind == 0x41:  # 'A'
            n = _I.unpack_from(buf, off)[0]
            stop = off + 4 + n
            if stop > end:
                raise syntax_error("truncated array in field table")
            if depth + 1 > MAX_DEPTH:
                raise syntax_error("field table nested too deeply")
            off += 4
            items = []
            while off < stop:
                item, off = _decode_value(buf, off, stop, depth + 1)
                items.append(item)
            return items, stop
        if kind == 0x44:  # 'D' decimal: scale octet + signed 32-bit unscaled value
            if off + 5 > end:
                raise syntax_error("truncated decimal")
            scale, _ = _BI.unpack_from(buf, off)
            unscaled = _i.unpack_from(buf, off + 1)[0]
            return Decimal(unscaled).scaleb(-scale), off + 5
        if kind == 0x56:  # 'V'
            return None, off
    except struct.error as exc:
        raise syntax_error(f"truncated field value ({exc})") from None
    raise syntax_error(f"unknown field type {chr(kind)!r}")


_FIXED: dict[int, tuple[struct.Struct, Any]] = {
    ord("t"): (_B, bool),
    ord("b"): (_b, int),
    ord("B"): (_B, int),
    ord("s"): (_h, int),
    ord("u"): (_H, int),
    ord("I"): (_i, int),
    ord("i"): (_I, int),
    ord("l"): (_q, int),
    ord("L"): (_Q, int),
    ord("f"): (_f, float),
    ord("d"): (_d, float),
    ord("T"): (_Q, Timestamp),
}


def _table_span(buf: bytes, off: int, end: int, depth: int) -> tuple[int, int]:
    """Where the entries of the table at ``off`` start and end (502 when it cannot be)."""
    if depth > MAX_DEPTH:
        raise syntax_error("field table nested too deeply")
    if off + 4 > end:
        raise syntax_error("truncated field table")
    stop = off + 4 + _I.unpack_from(buf, off)[0]
    if stop > end:
        raise syntax_error("truncated field table")
    return off + 4, stop


def _key_at(buf: bytes, off: int, stop: int) -> tuple[str, int]:
    kend = off + 1 + buf[off]
    if kend > stop:
        raise syntax_error("truncated field table key")
    try:
        return bytes(buf[off + 1 : kend]).decode("utf-8"), kend
    except UnicodeDecodeError:
        raise syntax_error("field table key is not UTF-8") from None


def _decode_table_at(buf: bytes, off: int, end: int, depth: int) -> tuple[dict[str, Any], int]:
    off, stop = _table_span(buf, off, end, depth)
    table: dict[str, Any] = {}
    while off < stop:
        key, kend = _key_at(buf, off, stop)
        table[key], off = _decode_value(buf, kend, stop, depth)
    return table, stop


def decode_table(buf: bytes, off: int = 0) -> tuple[dict[str, Any], int]:
    """Decode a field table at ``off``; returns ``(table, offset after it)``."""
    return _decode_table_at(buf, off, len(buf), 0)


def decode_value(buf: bytes, off: int = 0) -> tuple[Any, int]:
    """Decode one typed field value (type letter + value) at ``off``."""
    return _decode_value(buf, off, len(buf), 0)


# -- checking and splitting without decoding ------------------------------------------------
# The same acceptance as the decoder (the same 502s), but no Python value is built: a
# message's headers are checked once as they arrive (codec.scan_properties), at a fraction of
# a decode's cost per entry.

#: Fixed-size field types: type letter -> size of the value after it ('D': scale + int32).
_SIZES = {ord(k): n for k, n in (("t", 1), ("b", 1), ("B", 1), ("s", 2), ("u", 2), ("I", 4),
                                  ("i", 4), ("l", 8), ("L", 8), ("f", 4), ("d", 8), ("T", 8),
                                  ("D", 5), ("V", 0))}
_LONG = (ord("S"), ord("x"))


def _skip_value(buf: bytes, off: int, end: int, depth: int) -> int:
    if off >= end:
        raise syntax_error("truncated field value")
    kind = buf[off]
    off += 1
    size = _SIZES.get(kind)
    if size is not None:
        off += size
        if off > end:
            raise syntax_error("truncated field value")
        return off
    if kind in _LONG or kind == 0x41:  # 'S', 'x', 'A'
        if off + 4 > end:
            raise syntax_error("truncated field value")
        stop = off + 4 + _I.unpack_from(buf, off)[0]
        if stop > end:
            raise syntax_error("truncated long string in field table" if kind != 0x41
                               else "truncated array in field table")
        if kind == 0x41:
            if depth + 1 > MAX_DEPTH:
                raise syntax_error("field table nested too deeply")
            off += 4
            while off < stop:
                size = _SIZES.get(buf[off])
                if size is None:
                    off = _skip_value(buf, off, stop, depth + 1)
                else:  # inline, as in _skip_table
                    off += 1 + size
                    if off > stop:
                        raise syntax_error("truncated field value")
        return stop
    if kind == 0x46:  # 'F'
        return _skip_table(buf, off, end, depth + 1)
    raise syntax_error(f"unknown field type {chr(kind)!r}")


def _skip_table(buf: bytes, off: int, end: int, depth: int) -> int:
    off, stop = _table_span(buf, off, end, depth)
    keys_ascii = buf[off:stop].isascii()  # then no key can fail UTF-8: one check for all
    sizes = _SIZES
    while off < stop:
        kend = off + 1 + buf[off]
        if kend > stop:
            raise syntax_error("truncated field table key")
        if not keys_ascii:
            try:
                buf[off + 1 : kend].decode("utf-8")
            except UnicodeDecodeError:
                raise syntax_error("field table key is not UTF-8") from None
        size = sizes.get(buf[kend]) if kend < stop else None
        if size is None:  # a variable-sized value, or a truncated / unknown one
            off = _skip_value(buf, kend, stop, depth)
        else:  # the common case inline: a fixed-size value
            off = kend + 1 + size
            if off > stop:
                raise syntax_error("truncated field value")
    return stop


def check_table(buf: bytes, off: int = 0) -> int:
    """Check the field table at ``off`` as :func:`decode_table` would (the same 502s)
    without building it; returns the offset after it."""
    return _skip_table(buf, off, len(buf), 0)


def split_table(buf: bytes, off: int = 0) -> tuple[dict[str, Raw], int]:
    """The field table at ``off`` one level deep: each key with its value still encoded
    (:class:`Raw`, type letter onwards), so that re-encoding it is byte-exact."""
    off, stop = _table_span(buf, off, len(buf), 0)
    table: dict[str, Raw] = {}
    while off < stop:
        key, kend = _key_at(buf, off, stop)
        vend = _skip_value(buf, kend, stop, 0)
        table[key] = Raw(buf[kend:vend])
        off = vend
    return table, stop


def split_array(value: Raw) -> list[Raw]:
    """The items of an encoded array value (``A`` onwards), each still encoded."""
    if value[:1] != b"A":
        raise syntax_error("not an array field value")
    stop = _skip_value(value, 0, len(value), 0)
    off = 5
    items = []
    while off < stop:
        nxt = _skip_value(value, off, stop, 0)
        items.append(Raw(value[off:nxt]))
        off = nxt
    return items


__all__ = [
    "AmqpError",
    "Long",
    "Raw",
    "Timestamp",
    "check_table",
    "decode_longstr",
    "decode_shortstr",
    "decode_table",
    "decode_value",
    "encode_longstr",
    "encode_shortstr",
    "encode_table",
    "encode_value",
    "split_array",
    "split_table",
]
