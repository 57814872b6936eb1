"""How MQTT state lies on disk: raw records in the ``mqtt`` column family.

Layout (keys start with a kind byte; ``owner`` is the session's 8-byte big-endian number,
``seq`` the per-session 8-byte big-endian message number; values are compact binary,
never JSON or pickle, see docs/storage.md):

==========================  ==================================================  ==========
key                          value                                               doc kind
==========================  ==================================================  ==========
``s`` client id (UTF-8)      owner (Q), then the user entry (a zero length (H),  ``session``
                             then user len (H), user; empty = anonymous), then   + ``sub``
                             per subscription: len (H), filter, QoS and MQTT
                             5 options (B: No Local 4, Retain As Published 8,
                             16: a Subscription Identifier (I) follows)
``m`` owner seq              flags (B: QoS bits 0-1, retain bit 2, MQTT 5 bit    ``msg``
                             3), topic len (H), topic, [MQTT 5: expiry deadline
                             (Q, ms), property block], payload
``r`` owner seq              empty: PUBREC received, PUBCOMP awaited (``rel``)   ``rel``
``x`` owner packet id (H)    arrival number (Q; empty before 2026-12): inbound   ``rx2``
                             QoS 2 received, PUBREL awaited
``c`` owner                  the queue's counters (``store/qlog.py``): floor,    ``session``
                             tail, count, bytes (Q each)                         (``queued``)
``t`` topic (UTF-8)          QoS (B; MQTT 5 bit 3), [MQTT 5 part], payload      ``retain``
``e`` owner                  MQTT 5 session: Session Expiry Interval (I, s),     ``session``
                             deadline (Q, wall-clock ms; 0 while connected)
``w`` client id (UTF-8)      an MQTT 5 will waiting out its delay: deadline      -
                             (Q, wall-clock ms), then as in ``mqtt/wills.py``
==========================  ==================================================  ==========

Recovery never crash-loops: a record that does not decode (``check_*`` below: lengths,
QoS, UTF-8, topic syntax) is handed to ``store.quarantine`` (moved aside, counted, logged
with its key) and recovery goes on without it; the records of a session whose own record
was quarantined go with it, so a new session can never inherit them.

The user entry (format 2): a recovered session knows which user owned it, so the read
ACL (and ``%u`` patterns) apply to what is delivered to it while its client is still
offline. It is marked by a zero-length "filter", which no subscription can have (an empty
filter is invalid, MQTT-4.7.3-1), so a format-1 record (no entry) still decodes: its user is
unknown (``None``) and its deliveries are checked when the client reconnects, as before.
An older oxiedge would reject the entry as a bad filter and quarantine the session, which is
why the data dir's format version moved to 2 (an older oxiedge refuses it, changing nothing).

An outbound packet identifier is derived from the seq (``packet_id_of``), so sending a
message never rewrites its record, and a restarted server re-sends in-flight messages
under the identifiers the client already saw (MQTT-4.4.0-1). An ack deletes the record by
``(owner, seq)``, never by content. ``view_documents`` shows all records as ``_mqtt``
documents for ``oxiedge find``.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from oxiedge.mqtt.topics import topic_filter_problem
from oxiedge.store.encoding import prefix_end
from oxiedge.store.qlog import LogStore
from oxiedge.store.qlog_recover import floor_of

CF = "mqtt"
SESSION = b"s"
MSG = b"m"
REL = b"r"
RX2 = b"x"
RETAIN = b"t"
COUNT = b"c"
EXPIRY = b"e"

_Q = 8  # bytes of owner / seq


class RawStore(LogStore, Protocol):
    """The part of ``oxiedge.store.Store`` the MQTT broker uses (``LogStore``: its queues)."""

    def iter_raw(
        self, cf: str, prefix: bytes = b"", start: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]: ...


def packet_id_of(seq: int) -> int:
    """The outbound packet identifier of a session's message ``seq`` (1..65535)."""
    return seq % 65535 + 1


def owner_bytes(owner: int) -> bytes:
    return owner.to_bytes(_Q, "big")


def msg_key(owner_b: bytes, seq: int) -> bytes:
    return MSG + owner_b + seq.to_bytes(_Q, "big")


def rel_key(owner_b: bytes, seq: int) -> bytes:
    return REL + owner_b + seq.to_bytes(_Q, "big")


def count_key(owner_b: bytes) -> bytes:
    return COUNT + owner_b


def expiry_key(owner_b: bytes) -> bytes:
    return EXPIRY + owner_b


def encode_expiry(interval: int, deadline: float | None) -> bytes:
    """An ``e`` record: the interval and the wall-clock deadline (None: connected)."""
    ms = 0 if deadline is None else max(1, round(deadline * 1000))
    return interval.to_bytes(4, "big") + ms.to_bytes(_Q, "big")


def decode_expiry(value: bytes) -> tuple[int, float | None]:
    """``(interval, deadline or None)`` of an ``e`` record; ValueError if it is not one."""
    if len(value) != 4 + _Q:
        raise ValueError(f"expiry record of {len(value)} bytes")
    ms = int.from_bytes(value[4:], "big")
    return int.from_bytes(value[:4], "big"), (ms / 1000 if ms else None)


def rx2_key(owner_b: bytes, packet_id: int) -> bytes:
    return RX2 + owner_b + packet_id.to_bytes(2, "big")


def rx2_value(arrival: int) -> bytes:
    """The value of an ``rx2`` record: the id's arrival number in its session, so recovery
    knows which held id is the oldest (``InboundQos2``, ``mqtt/inbound2.py``); packet ids wrap
    and clients reuse free ones, so their numbers do not tell."""
    return arrival.to_bytes(_Q, "big")


def session_key(client_id: str) -> bytes:
    return SESSION + client_id.encode("utf-8")


def retain_key(topic: str) -> bytes:
    return RETAIN + topic.encode("utf-8")


#: Message flag bit 3: an MQTT 5 message - after the topic its expiry deadline (Q, wall-clock
#: milliseconds, 0 = none) and its property block (``forward5.Message5.record``).
MSG_V5 = 8


def encode_msg(qos: int, retain: bool, topic_b: bytes, payload: bytes) -> bytes:
    return (
        bytes((qos | (4 if retain else 0),)) + len(topic_b).to_bytes(2, "big") + topic_b + payload
    )


def v5_part_end(value: bytes, off: int) -> int:
    """Where the MQTT 5 part (deadline, property block) starting at ``off`` ends."""
    n, shift, off = 0, 0, off + _Q
    while True:
        byte = value[off]
        off += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80 or shift > 21:
            break
    if off + n > len(value):
        raise ValueError("MQTT 5 property block does not fit the record")
    return off + n


def decode_msg(value: bytes) -> tuple[int, bool, str, bytes]:
    """``(qos, retain, topic, payload)`` of a message record (an MQTT 5 one's properties
    skipped: ``forward5.message_of`` reads them)."""
    flags = value[0]
    end = 3 + int.from_bytes(value[1:3], "big")
    start = v5_part_end(value, end) if flags & MSG_V5 else end
    return flags & 3, bool(flags & 4), value[3:end].decode("utf-8"), bytes(value[start:])


def encode_session(owner: int, subs: dict[str, int], user: str | None = None) -> bytes:
    """A session record; ``user`` None (unknown) writes no user entry, ``""`` anonymous."""
    parts = [owner_bytes(owner)]
    if user is not None:
        raw = user.encode("utf-8")
        parts.append(b"\0\0" + len(raw).to_bytes(2, "big") + raw)
    for flt, value in subs.items():
        raw = flt.encode("utf-8")
        sid = value >> 4  # MQTT 5: a Subscription Identifier follows the byte (bit 4)
        parts.append(len(raw).to_bytes(2, "big") + raw + (
            bytes((value,)) if not sid else bytes(((value & 15) | 16,)) + sid.to_bytes(4, "big")))
    return b"".join(parts)


def decode_session(value: bytes) -> tuple[int, dict[str, int], str | None]:
    """``(owner, subscriptions, user)``; user None: a record without the entry (format 1).
    Raises ValueError for an entry that does not fit the record."""
    owner = int.from_bytes(value[:_Q], "big")
    subs: dict[str, int] = {}
    user: str | None = None
    off = _Q
    if value[off : off + 2] == b"\0\0":
        end = off + 4 + int.from_bytes(value[off + 2 : off + 4], "big")
        if len(value) < off + 4 or end > len(value):
            raise ValueError("user entry longer than the session record")
        user = value[off + 4 : end].decode("utf-8")
        off = end
    while off < len(value):
        end = off + 2 + int.from_bytes(value[off : off + 2], "big")
        if end >= len(value):
            raise ValueError("subscription entry longer than the session record")
        flags = value[end]
        if flags & 16:  # MQTT 5: with its Subscription Identifier
            if end + 5 > len(value):
                raise ValueError("subscription identifier longer than the session record")
            subs[value[off + 2 : end].decode("utf-8")] = (flags & 15) | (
                int.from_bytes(value[end + 1 : end + 5], "big") << 4)
            off = end + 5
            continue
        subs[value[off + 2 : end].decode("utf-8")] = flags
        off = end + 1
    return owner, subs, user


# ------------------------------------------------------------------ recovery checks
# Each raises ValueError naming what is wrong; recovery quarantines the record.


def _check_qos(qos: int) -> int:
    if qos > 2:
        raise ValueError(f"QoS {qos}")
    return qos


def check_topic(topic: str) -> str:
    """``topic`` if a message may carry it, else ValueError."""
    if not topic or "+" in topic or "#" in topic or "\0" in topic:
        raise ValueError(f"invalid topic {topic!r}")
    return topic


def check_session(key: bytes, value: bytes) -> tuple[str, int, dict[str, int], str | None]:
    """``(client id, owner, subscriptions, user)`` of a session record, validated."""
    client_id = bytes(key[1:]).decode("utf-8")
    if len(value) < _Q:
        raise ValueError("session record shorter than its owner id")
    owner, subs, user = decode_session(value)
    if owner <= 0:
        raise ValueError(f"owner {owner}")
    for flt, qos in subs.items():
        _check_qos(qos & 3)  # (MQTT 5: No Local 4, Retain As Published 8, identifier << 4)
        problem = topic_filter_problem(flt)
        if problem:
            raise ValueError(f"subscription {flt!r}: {problem}")
    return client_id, owner, subs, user


def check_msg_value(value: bytes) -> tuple[int, bool, str, bytes]:
    """``(qos, retain, topic, payload)`` of a message record's value, validated."""
    if len(value) < 3 or 3 + int.from_bytes(value[1:3], "big") > len(value):
        raise ValueError("message header does not match its length")
    qos, retain, topic, payload = decode_msg(value)
    _check_qos(qos)
    check_topic(topic)
    return qos, retain, topic, payload


def check_msg(key: bytes, value: bytes) -> tuple[int, int, bool, str, bytes]:
    """``(seq, qos, retain, topic, payload)`` of a message record, validated."""
    if len(key) != 1 + 2 * _Q:
        raise ValueError(f"message key of {len(key)} bytes")
    return (int.from_bytes(key[1 + _Q :], "big"), *check_msg_value(value))


def check_retained(key: bytes, value: bytes) -> tuple[str, int, bytes]:
    if not value:
        raise ValueError("empty retained record")
    """``(topic, QoS byte, rest)``: with ``MSG_V5`` set in the QoS byte the rest starts
    with the MQTT 5 part (``forward5.message_of``)."""
    _check_qos(value[0] & ~MSG_V5)
    return check_topic(bytes(key[1:]).decode("utf-8")), value[0], bytes(value[1:])


def _quarantine(store: RawStore, key: bytes, value: bytes | None, what: str,
                exc: Exception) -> None:
    store.quarantine(CF, bytes(key), None if value is None else bytes(value), f"{what}: {exc}")


def _owners(store: RawStore, kind: bytes) -> set[int]:
    """Owners that have records of ``kind`` (one seek per owner, not per record)."""
    owners: set[int] = set()
    start = kind
    while True:
        item = next(iter(store.iter_raw(CF, kind, start=start)), None)
        if item is None:
            return owners
        owner_b = bytes(item[0][1 : 1 + _Q])
        owners.add(int.from_bytes(owner_b, "big"))
        nxt = prefix_end(kind + owner_b)
        if nxt is None or len(owner_b) < _Q:
            return owners
        start = nxt


def _quarantine_orphans(store: RawStore, known: set[int]) -> None:
    """Move aside the records of owners without a session (theirs was quarantined)."""
    for kind, what in ((MSG, "message"), (REL, "PUBREL obligation"), (RX2, "inbound QoS 2"),
                       (COUNT, "queue counters")):
        for owner in _owners(store, kind) - known:
            for key, value in store.iter_raw(CF, kind + owner_bytes(owner)):
                store.quarantine(CF, bytes(key), bytes(value),
                                 f"{what} of session owner {owner}, whose record is gone")


def stage_delete_session(store: RawStore, client_id: str, owner: int) -> None:
    """Stage removal of a session and every record it owns."""
    ob = owner_bytes(owner)
    store.stage_delete_key(CF, session_key(client_id))
    store.stage_delete_key(CF, count_key(ob))
    store.stage_delete_key(CF, expiry_key(ob))
    for kind in (MSG, REL, RX2):
        end = prefix_end(kind + ob)
        assert end is not None  # the kind byte is never 0xff
        store.stage_delete_range(CF, kind + ob, end)


@dataclass
class RecoveredSession:
    """A persistent session as found on disk (its queued messages stay there: the
    session's ``SessionQueue.recover`` reads only their counters, head and tail)."""

    client_id: str
    owner: int
    subs: dict[str, int]
    user: str | None = None  # "" anonymous; None: not recorded (a format-1 record)
    rel: list[int] = field(default_factory=list)  # seqs awaiting PUBCOMP
    # inbound packet id awaiting PUBREL -> its arrival number (``rx2_value``; 0 if unknown)
    rx2: dict[int, int] = field(default_factory=dict)
    # MQTT 5: (Session Expiry Interval, wall-clock deadline or None: it was connected)
    expiry: tuple[int, float | None] | None = None

    @property
    def next_seq(self) -> int:
        """One past the newest PUBREL obligation (the queue knows its own tail)."""
        return self.rel[-1] + 1 if self.rel else 0


def load_sessions(store: RawStore) -> list[RecoveredSession]:
    """Read every persistent session record with its QoS 2 state (not its messages).
    Only quarantine moves are staged (``view_documents`` reads a live store this way)."""
    out: list[RecoveredSession] = []
    bad_session = False
    for key, value in store.iter_raw(CF, SESSION):
        try:
            client_id, owner, subs, user = check_session(key, value)
        except ValueError as exc:  # UnicodeDecodeError is a ValueError
            _quarantine(store, key, value, "session", exc)
            bad_session = True
            continue
        rs = RecoveredSession(client_id, owner, subs, user)
        ob = owner_bytes(owner)
        for rkey, rval in store.iter_raw(CF, REL + ob):
            if len(rkey) == 1 + 2 * _Q:
                rs.rel.append(int.from_bytes(rkey[1 + _Q :], "big"))
            else:
                _quarantine(store, rkey, rval, f"PUBREL obligation of {client_id!r}",
                            ValueError(f"key of {len(rkey)} bytes"))
        for xkey, xval in store.iter_raw(CF, RX2 + ob):
            pid = int.from_bytes(xkey[1 + _Q :], "big")
            if len(xkey) == 1 + _Q + 2 and pid:
                rs.rx2[pid] = int.from_bytes(xval[:_Q], "big")  # (b"": written before 2026-12)
            else:
                _quarantine(store, xkey, xval, f"inbound QoS 2 state of {client_id!r}",
                            ValueError(f"key of {len(xkey)} bytes, packet id {pid}"))
        raw = store.get_raw(CF, expiry_key(ob))
        if raw is not None:
            try:
                rs.expiry = decode_expiry(raw)
            except ValueError as exc:
                _quarantine(store, expiry_key(ob), raw, f"session expiry of {client_id!r}", exc)
        out.append(rs)
    if bad_session:
        _quarantine_orphans(store, {rs.owner for rs in out})
    return out


def session_summaries(store: RawStore) -> Iterator[tuple[str, dict[str, int], int, int]]:
    """``(client id, subscriptions, queued messages, PUBREL obligations)`` per persistent
    session, counting keys without decoding payloads (offline listings)."""
    for key, value in store.iter_raw(CF, SESSION):
        try:
            client_id, owner, subs, _user = check_session(key, value)
        except ValueError as exc:
            _quarantine(store, key, value, "session", exc)
            continue
        ob = owner_bytes(owner)
        queued = sum(1 for _ in queued_records(store, ob))
        rel = sum(1 for _ in store.iter_raw(CF, REL + ob))
        yield client_id, subs, queued, rel


def session_expiries(store: RawStore) -> dict[str, tuple[int, float | None]]:
    """Client id -> ``(interval, deadline or None)`` of every MQTT 5 session's ``e`` record,
    read only (offline listings: a record that does not decode is left out, not moved)."""
    owners: dict[int, str] = {}
    for key, value in store.iter_raw(CF, SESSION):
        try:
            client_id, owner, _subs, _user = check_session(key, value)
        except ValueError:
            continue
        owners[owner] = client_id
    out: dict[str, tuple[int, float | None]] = {}
    for key, value in store.iter_raw(CF, EXPIRY):
        cid = owners.get(int.from_bytes(key[1:1 + _Q], "big"))
        try:
            if cid is not None:
                out[cid] = decode_expiry(value)
        except ValueError:
            continue
    return out


def load_retained_records(store: RawStore) -> Iterator[tuple[str, int, bytes]]:
    """``(topic, QoS byte, rest)`` of every retained message (``check_retained``)."""
    for key, value in store.iter_raw(CF, RETAIN):
        try:
            yield check_retained(key, value)
        except ValueError as exc:
            _quarantine(store, key, value, "retained message", exc)


def load_retained(store: RawStore) -> Iterator[tuple[str, int, bytes]]:
    """``(topic, qos, payload)`` of every retained message (listings)."""
    for topic, flags, rest in load_retained_records(store):
        try:
            start = v5_part_end(rest, 0) if flags & MSG_V5 else 0
        except (ValueError, IndexError):
            continue  # (``RetainedStore.load`` quarantines it)
        yield topic, flags & 3, rest[start:]


# ------------------------------------------------------------------ document views


def _payload_fields(payload: bytes) -> dict[str, Any]:
    try:
        return {"payload": payload.decode("utf-8"), "bytes": len(payload)}
    except UnicodeDecodeError:
        return {
            "payload": base64.b64encode(payload).decode(),
            "_payload_encoding": "base64",
            "bytes": len(payload),
        }


def queued_records(store: RawStore, ob: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The message records of the session ``ob`` still queued: from its queue's floor on
    (acknowledged ones below it may wait for their run's range delete: not shown)."""
    floor = floor_of(store, CF, count_key(ob))
    return store.iter_raw(CF, MSG + ob, start=msg_key(ob, floor) if floor else None)


def view_documents(store: RawStore) -> Iterator[dict[str, Any]]:
    """Every MQTT record on disk in document shape (the ``_mqtt`` view)."""
    for rs in load_sessions(store):
        messages = []
        for mkey, mval in queued_records(store, owner_bytes(rs.owner)):
            try:
                messages.append(check_msg(mkey, mval))
            except ValueError as exc:
                _quarantine(store, mkey, mval, f"message of session {rs.client_id!r}", exc)
        doc: dict[str, Any] = {"_kind": "session", "client": rs.client_id, "owner": rs.owner,
                               "subscriptions": len(rs.subs), "queued": len(messages)}
        if rs.user is not None:  # a format-1 record does not know its user
            doc["user"] = rs.user or None  # anonymous: null
        yield doc
        for flt, qos in rs.subs.items():
            yield {"_kind": "sub", "client": rs.client_id, "filter": flt, "qos": qos & 3}
        for seq, qos, retain, topic, payload in messages:
            yield {"_kind": "msg", "client": rs.client_id, "seq": seq, "topic": topic,
                   "qos": qos, "retain": retain, **_payload_fields(payload)}  # fmt: skip
        for seq in rs.rel:
            yield {"_kind": "rel", "client": rs.client_id, "seq": seq,
                   "packet_id": packet_id_of(seq)}  # fmt: skip
        for pid in sorted(rs.rx2):
            yield {"_kind": "rx2", "client": rs.client_id, "packet_id": pid}
    for topic, qos, payload in load_retained(store):
        yield {"_kind": "retain", "topic": topic, "qos": qos, **_payload_fields(payload)}
