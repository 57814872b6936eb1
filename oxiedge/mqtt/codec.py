"""Sans-IO codec for MQTT 3.1.1 (bytes <-> ``oxiedge.mqtt.packets``).

Theory of operation
-------------------
``Decoder.feed(data)`` appends received bytes; iterating the decoder yields every
*complete* packet buffered so far and stops when more bytes are needed. The fixed header
(type, flags, remaining length) is parsed first, and a packet larger than
``max_packet_size`` is refused from that header alone - before its body is waited for -
so a peer cannot make us buffer a 256 MB body. Every malformed input raises
``ProtocolError`` (the connection must then be closed, MQTT-4.8.0-1); no other exception
type escapes the decoder, whatever the bytes. After an error the decoder stays failed.

The control packets' body decoders and the field readers live in ``oxiedge.mqtt.bodies``
(``ProtocolError`` is re-exported here); this module keeps PUBLISH, the hot path, and the
framing. Encoding lives in ``oxiedge.mqtt.encode`` (re-exported here): ``encode(packet)`` returns
the bytes of any packet; ``encode_publish`` and the id-only acknowledgements are the
allocation-lean variants for the hot paths.

MQTT 5 (``oxiedge.mqtt.codec5``) extends ``Decoder`` with its own methods and shares its
buffer, bounds and framing (``take_frame``) and the topic cache (``cached_topic``); the
3.1.1 hot path (``next_item``) keeps its inlined copies and tests no protocol level.

This module must not import trio or anything doing I/O (a test checks it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from struct import error as StructError
from typing import ClassVar

from oxiedge.mqtt.bodies import (
    CONTROL_DECODERS,
    MalformedPacket,
    ProtocolError,
    check_topic_name,
    read_string,
)
from oxiedge.mqtt.encode import MAX_REMAINING_LENGTH, encode, encode_publish
from oxiedge.mqtt.packets import (
    RESERVED_FLAGS,
    Packet,
    PacketType,
    Puback,
    Publish,
    first_byte,
)
from oxiedge.mqtt.topics import DEFAULT_MAX_TOPIC_LENGTH, DEFAULT_MAX_TOPIC_LEVELS

#: Default bound on one packet (fixed header + body), see ``Decoder``.
DEFAULT_MAX_PACKET_SIZE = 1 << 20

# Topic names repeat constantly (a sensor publishes to one topic forever): the decoded and
# validated str per raw bytes keeps UTF-8 decoding and validation off the per-message
# path. Bounded in entries and bytes, cleared wholesale when full; topics longer than
# ``_TOPIC_CACHE_LONGEST`` are never cached (distinct 60 KB topics must not pin memory).
_TOPIC_CACHE: dict[bytes, str] = {}
_TOPIC_CACHE_MAX = 4096
_TOPIC_CACHE_MAX_BYTES = 1 << 20  # sum of the cached raw topics' lengths
_TOPIC_CACHE_LONGEST = 256
_topic_cache_bytes = 0
#: The cache, read directly by MQTT 5's PUBLISH parser (``codec5``): a hit costs no call,
#: a miss goes through ``cached_topic``.
TOPIC_CACHE = _TOPIC_CACHE


class TopicTooLong(ProtocolError):
    """A PUBLISH topic over the configured level or length bound (the connection closes)."""

    reason_code: ClassVar[int] = 0x90  # MQTT 5: Topic Name invalid


class PacketTooLarge(ProtocolError):
    """A packet over the decoder's ``max_packet_size`` (refused from its fixed header)."""

    reason_code: ClassVar[int] = 0x95  # MQTT 5: Packet too large


def topic_cache_bytes() -> int:
    """Bytes of raw topics the decode cache holds now (``oxiedge status``)."""
    return _topic_cache_bytes


#: A PUBLISH as the connection's hot path gets it from ``Decoder.next_item`` - a plain
#: tuple, no packet object per message: ``(topic, topic_b, qos, retain, dup, packet_id,
#: payload, frame)``. ``topic_b`` is the topic's UTF-8 bytes as received. ``frame`` is the
#: whole packet when it is, byte for byte, what a QoS 0 subscriber must receive (QoS 0,
#: RETAIN 0, minimal remaining-length encoding) so it can be forwarded as is; else None.
RawPublish = tuple[str, bytes, int, bool, bool, int | None, bytes, bytes | None]


def _parse_publish(
    first: int,
    frame: bytes,
    off: int,
    forwardable: bool,
    max_levels: int = DEFAULT_MAX_TOPIC_LEVELS,
    max_length: int = DEFAULT_MAX_TOPIC_LENGTH,
) -> RawPublish:
    """Parse a PUBLISH whose variable header starts at ``frame[off]``."""
    global _topic_cache_bytes
    qos = (first >> 1) & 3
    if qos == 3:
        raise ProtocolError("PUBLISH with QoS 3 (MQTT-3.3.1-4)")
    dup = bool(first & 8)
    if dup and qos == 0:
        raise ProtocolError("DUP set on a QoS 0 PUBLISH (MQTT-3.3.1-2)")
    n = len(frame)
    if n - off < 2:
        raise ProtocolError("truncated topic length")
    start = off + 2
    end = start + ((frame[off] << 8) | frame[off + 1])
    if end > n:
        raise ProtocolError("truncated topic")
    raw = frame[start:end]
    tl = end - start
    # Checked on the raw bytes, cached or not: the bounds are per decoder.
    if tl > max_length:
        raise TopicTooLong(f"topic of {tl} bytes exceeds the limit of {max_length}")
    if raw.count(b"/") > max_levels:
        raise TopicTooLong(f"topic has more than {max_levels} '/' separators")
    topic = _TOPIC_CACHE.get(raw)
    if topic is None:
        topic, _ = read_string(frame, off)
        check_topic_name(topic)
        if tl <= _TOPIC_CACHE_LONGEST:
            if (len(_TOPIC_CACHE) >= _TOPIC_CACHE_MAX
                    or _topic_cache_bytes + tl > _TOPIC_CACHE_MAX_BYTES):  # fmt: skip
                _TOPIC_CACHE.clear()
                _topic_cache_bytes = 0
            _TOPIC_CACHE[raw] = topic
            _topic_cache_bytes += tl
    retain = bool(first & 1)
    if qos:
        # (``bodies.read_packet_id``, inlined: once per message)
        if n - end < 2:
            raise ProtocolError("truncated packet identifier")
        pid = (frame[end] << 8) | frame[end + 1]
        if not pid:
            raise ProtocolError("packet identifier 0 (MQTT-2.3.1-1)")
        return (topic, raw, qos, retain, dup, pid, frame[end + 2 :], None)
    fwd = frame if forwardable and not retain else None
    return (topic, raw, 0, retain, False, None, frame[end:], fwd)


def cached_topic(raw: bytes, frame: bytes, off: int) -> str:
    """The validated topic name ``raw`` (its length prefix at ``frame[off]``), through the
    topic cache. For MQTT 5's decoder; ``_parse_publish`` keeps its own inlined copy."""
    global _topic_cache_bytes
    topic = _TOPIC_CACHE.get(raw)
    if topic is None:
        topic, _ = read_string(frame, off)
        check_topic_name(topic)
        tl = len(raw)
        if tl <= _TOPIC_CACHE_LONGEST:
            if (len(_TOPIC_CACHE) >= _TOPIC_CACHE_MAX
                    or _topic_cache_bytes + tl > _TOPIC_CACHE_MAX_BYTES):  # fmt: skip
                _TOPIC_CACHE.clear()
                _topic_cache_bytes = 0
            _TOPIC_CACHE[raw] = topic
            _topic_cache_bytes += tl
    return topic


def _decode_publish(flags: int, body: bytes) -> Publish:
    raw = _parse_publish(_PUBLISH_FIRST | flags, body, 0, False)
    topic, _raw, qos, retain, dup, pid, payload, _fwd = raw
    return Publish(topic, payload, qos, retain, dup, pid)


# type -> (required fixed-header flags or None when the type uses them, decoder).
# MQTT-2.2.2-1/-2: flags other than PUBLISH's are fixed (``packets.RESERVED_FLAGS``: 0010
# for PUBREL, SUBSCRIBE, UNSUBSCRIBE, MQTT-3.6.1-1, -3.8.1-1, -3.10.1-1); a wrong value is
# malformed.
_BODY_DECODERS: dict[PacketType, Callable[[int, bytes], Packet]] = {
    PacketType.PUBLISH: _decode_publish, **CONTROL_DECODERS}
_DECODERS: dict[int, tuple[int | None, Callable[[int, bytes], Packet]]] = {
    int(t): (None if t is PacketType.PUBLISH else RESERVED_FLAGS.get(t, 0), dec)
    for t, dec in _BODY_DECODERS.items()
}
_PUBLISH = int(PacketType.PUBLISH)
_PUBLISH_FIRST = first_byte(PacketType.PUBLISH, 0)
_PUBACK_FIRST = first_byte(PacketType.PUBACK)
#: MQTT 3.1 lets these carry DUP (``Decoder.mqtt31``).
_DUP_ALLOWED_31 = frozenset(int(t) for t in RESERVED_FLAGS)


def decode_body(first_byte: int, body: bytes) -> Packet:
    """Decode one packet from its first header byte and its complete body."""
    entry = _DECODERS.get(first_byte >> 4)
    if entry is None:
        raise ProtocolError(f"reserved packet type {first_byte >> 4}")
    want, decode = entry
    flags = first_byte & 0x0F
    if want is not None and flags != want:
        raise ProtocolError(f"bad fixed-header flags {flags:#x} (MQTT-2.2.2-2)")
    try:
        return decode(flags, body)
    except ProtocolError:
        raise
    except (IndexError, ValueError, UnicodeError, StructError) as exc:  # defence in depth
        raise ProtocolError(f"malformed packet: {exc}") from None


class Decoder:
    """Incremental packet decoder: ``feed`` bytes, then iterate complete packets."""

    __slots__ = ("_buf", "_failed", "_pos", "max_packet_size", "max_topic_length",
                 "max_topic_levels", "mqtt31")  # fmt: skip

    def __init__(
        self,
        max_packet_size: int = DEFAULT_MAX_PACKET_SIZE,
        max_topic_levels: int = DEFAULT_MAX_TOPIC_LEVELS,
        max_topic_length: int = DEFAULT_MAX_TOPIC_LENGTH,
    ) -> None:
        # The connection lowers this until CONNECT was accepted (pre-authentication bound).
        self.max_packet_size = max_packet_size
        self.max_topic_levels = max_topic_levels  # PUBLISH topics: '/' separators
        self.max_topic_length = max_topic_length  # PUBLISH topics: UTF-8 bytes
        # MQTT 3.1 (protocol level 3) lets PUBREL, SUBSCRIBE and UNSUBSCRIBE carry the DUP
        # flag (a re-sent one); 3.1.1 fixed their flags (MQTT-2.2.2-2). Set after CONNECT.
        self.mqtt31 = False
        #: input from ``_pos`` on: a read as is, or a bytearray while a partial packet grows
        self._buf: bytes | bytearray = b""
        self._pos = 0
        self._failed = False

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes."""
        buf, pos = self._buf, self._pos
        if pos >= len(buf):
            # All consumed (reads mostly end on a packet boundary): the input becomes the
            # buffer as is - its packets are copied once, a read of one packet not at all.
            self._buf = data if type(data) is bytes else bytes(data)
            self._pos = 0
            return
        if isinstance(buf, bytes):  # a partial packet is waiting: from now on, accumulate
            buf = bytearray(memoryview(buf)[pos:])
            self._buf = buf
        elif pos:
            # Drop what was consumed: once per read, not once per packet.
            del buf[:pos]
        self._pos = 0
        buf += data

    def discard(self) -> None:
        """Drop everything received and not yet decoded (a connection ending)."""
        self._buf = b""
        self._pos = 0

    @property
    def first_byte(self) -> int | None:
        """The first byte of the next (possibly incomplete) packet, if any arrived."""
        return self._buf[self._pos] if len(self._buf) > self._pos else None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as packets."""
        return len(self._buf) - self._pos

    def __iter__(self) -> Iterator[Packet]:
        return self

    def __next__(self) -> Packet:
        packet = self.next_packet()
        if packet is None:
            raise StopIteration
        return packet

    def next_packet(self) -> Packet | None:
        """The next complete packet, or None when more bytes are needed.

        Raises ``ProtocolError`` on malformed input (and on every later call).
        """
        item = self.next_item()
        if type(item) is tuple:
            topic, _raw, qos, retain, dup, pid, payload, _fwd = item
            return Publish(topic, payload, qos, retain, dup, pid)
        if type(item) is int:
            return Puback(item)
        return item  # type: ignore[return-value]

    def take_frame(self) -> tuple[int, bytes, int, bool] | None:
        """The next complete packet as ``(first byte, whole packet, offset of its body,
        whether the remaining length is minimally encoded)``, or None when more bytes are
        needed; the framing of ``next_item`` for the MQTT 5 decoder (``codec5``), whose
        hot path keeps its own inlined copy."""
        if self._failed:
            raise ProtocolError("decoder already failed")
        buf, pos = self._buf, self._pos
        n = len(buf)
        if n - pos < 2:
            return None
        i = pos + 1
        length = shift = 0
        while True:
            if i >= n:
                return None
            b = buf[i]
            i += 1
            length |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift >= 28:
                self._failed = True
                raise MalformedPacket("remaining length longer than 4 bytes (2.2.3)")
        end = i + length
        if end - pos > self.max_packet_size:
            self._failed = True
            raise PacketTooLarge(
                f"packet of {end - pos} bytes exceeds max_packet_size {self.max_packet_size}"
            )
        if end > n:
            return None
        self._pos = end
        return buf[pos], bytes(buf[pos:end]), i - pos, shift == 0 or length >= 1 << shift

    def fail(self) -> None:
        """Mark the decoder failed (every later call raises): after a ProtocolError."""
        self._failed = True

    def next_item(self) -> Packet | RawPublish | int | None:
        """Like ``next_packet``, but a PUBLISH comes back as a ``RawPublish`` tuple and a
        PUBACK as its packet id (an ``int``): the per-message path builds no packet object
        and can forward the received bytes."""
        if self._failed:
            raise ProtocolError("decoder already failed")
        buf, pos = self._buf, self._pos
        n = len(buf)
        if n - pos < 2:
            return None
        i = pos + 1
        length = 0
        shift = 0
        while True:
            if i >= n:
                return None
            b = buf[i]
            i += 1
            length |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift >= 28:
                self._failed = True
                raise ProtocolError("remaining length longer than 4 bytes (2.2.3)")
        end = i + length
        if end - pos > self.max_packet_size:
            self._failed = True
            raise PacketTooLarge(
                f"packet of {end - pos} bytes exceeds max_packet_size {self.max_packet_size}"
            )
        if end > n:
            return None
        first = buf[pos]
        self._pos = end
        if first == _PUBACK_FIRST and length == 2:
            # The subscriber's hot path: a PUBACK comes back as its packet id, no object
            # (an id of 0, MQTT-2.3.1-1, or a wrong length goes the checked way below).
            pid = (buf[i] << 8) | buf[i + 1]
            if pid:
                return pid
        try:
            if first >> 4 == _PUBLISH:
                # Forwardable only if re-encoding would give the same bytes: the length
                # in as few bytes as possible (a peer may pad it, 2.2.3 does not forbid).
                forwardable = shift == 0 or length >= 1 << shift
                return _parse_publish(first, bytes(buf[pos:end]), i - pos, forwardable,
                                      self.max_topic_levels, self.max_topic_length)  # fmt: skip
            if self.mqtt31 and first & 0x08 and first >> 4 in _DUP_ALLOWED_31:
                first &= 0xF7
            return decode_body(first, bytes(buf[i:end]))
        except ProtocolError:
            self._failed = True
            raise
        except (IndexError, ValueError, UnicodeError, StructError) as exc:  # defence in depth
            self._failed = True
            raise ProtocolError(f"malformed packet: {exc}") from None


def decode_all(data: bytes, max_packet_size: int = DEFAULT_MAX_PACKET_SIZE) -> list[Packet]:
    """Decode every complete packet in ``data`` (test/tool convenience)."""
    decoder = Decoder(max_packet_size)
    decoder.feed(data)
    packets = list(decoder)
    if decoder.buffered:
        raise ProtocolError(f"{decoder.buffered} trailing bytes (incomplete packet)")
    return packets


# Re-exported: most callers need only these two of ``oxiedge.mqtt.encode``.
__all__ = ["DEFAULT_MAX_PACKET_SIZE", "MAX_REMAINING_LENGTH", "TOPIC_CACHE", "Decoder",
           "PacketTooLarge", "ProtocolError", "RawPublish", "TopicTooLong", "cached_topic",
           "decode_all", "decode_body", "encode", "encode_publish", "topic_cache_bytes"]
