"""MQTT 5 properties ⇄ AMQP 0-9-1 basic properties, as RabbitMQ converts them (sans-IO).

Theory of operation
-------------------
A publish crossing ``amq.topic`` keeps what both protocols can say, by the rules of
RabbitMQ's inter-protocol conversions (MQTT 5.0 ⇄ AMQP 0.9.1), so that an application
written against RabbitMQ reads the same fields from oxiedge. docs/mqtt.md ("MQTT 5 ⇄
AMQP 0-9-1") has the table; in short:

================================  ===========================================================
MQTT 5 (``staged.MessageProps``)  AMQP 0-9-1 basic properties
================================  ===========================================================
Content Type                      ``content_type`` (MQTT → AMQP: only an ASCII value of at
                                  most 255 bytes; AMQP → MQTT: any UTF-8 value without NUL)
Correlation Data                  ``correlation_id`` when it is a valid short string (UTF-8,
                                  no NUL, < 256 bytes), else the long-string header
                                  ``x-correlation-id``; back: ``correlation_id``, else that
                                  header (a long string)
Response Topic                    the long-string header ``x-reply-to-topic`` in AMQP topic
                                  form (``/`` ⇄ ``.``), not ``reply_to``
User Properties                   headers (long strings; a name of 256 bytes or more is left
                                  out; the first of duplicate names wins; sorted by name;
                                  at most ``USER_HEADER_BUDGET`` encoded bytes, in order,
                                  the rest left out and counted).
                                  Back: every header but the two above whose value is simple:
                                  a UTF-8 long string without NUL as is, integers and
                                  timestamps in decimal, floats in Erlang's ``%.20e``,
                                  booleans ``true``/``false``, void as empty; byte arrays,
                                  arrays, tables and decimals are left out
Message Expiry Interval           ``expiration``: the interval left in milliseconds;
                                  back: the message expires ``expiration`` ms after it was
                                  published (forwarded in whole seconds, rounded up, at
                                  most 0xFFFFFFFF: MQTT's longest)
QoS 0 / QoS ≥ 1                   ``delivery_mode`` 1 / 2 (and back: 2 → QoS 1, else QoS 0)
Payload Format Indicator          not carried: AMQP 0-9-1 has no field for it
================================  ===========================================================
"""

from __future__ import annotations

import math

from oxiedge.amqp import spec
from oxiedge.amqp.errors import AmqpError
from oxiedge.amqp.fields import Raw, decode_value, encode_longstr
from oxiedge.amqp.properties import EXPIRATION, HEADERS, headers_of
from oxiedge.staged import MessageProps

#: The headers RabbitMQ carries Correlation Data (when it cannot be ``correlation_id``) and
#: the Response Topic in.
X_CORRELATION_ID = "x-correlation-id"
X_REPLY_TO_TOPIC = "x-reply-to-topic"

_CONTENT_TYPE = 0x8000
_CORRELATION_ID = 0x0400
#: The basic properties that carry something across (flags word): a publish with none of
#: them (only ``delivery_mode``, say) maps to no properties at one test's cost.
_CARRIED = _CONTENT_TYPE | HEADERS | _CORRELATION_ID | EXPIRATION
#: MQTT topic ⇄ AMQP topic form: ``/`` and ``.`` trade places.
_SWAP = str.maketrans("/.", "./")
#: An MQTT string or binary field is at most this long (1.5.4, 1.5.6).
_MQTT_MAX = 65535
_INTEGERS = frozenset(b"bBsuIiIlLT")
#: MQTT's longest Message Expiry Interval (4 bytes of seconds), in milliseconds.
_EXPIRY_MAX_MS = 0xFFFFFFFF * 1000
#: The encoded bytes of the header-table entries User Properties may take: an MQTT 5 packet
#: may carry megabytes of them, and an AMQP content header is one frame that a consumer
#: with the smallest ``frame_max`` (4096, amqplib's default) must be able to take.
USER_HEADER_BUDGET = 3072


def valid_shortstr(data: bytes) -> bool:
    """RabbitMQ's short string condition: under 256 bytes, UTF-8, no NUL."""
    if len(data) > 255 or b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _mqtt_string(text: str) -> bool:
    """Whether ``text`` can be an MQTT UTF-8 string (no NUL, no lone surrogate, short)."""
    if "\0" in text:
        return False
    try:
        return len(text.encode("utf-8")) <= _MQTT_MAX
    except UnicodeEncodeError:  # (surrogateescape'd bytes that were not UTF-8)
        return False


# ------------------------------------------------------------------ MQTT → AMQP
def to_amqp(props: MessageProps, persistent: bool, now: float) -> spec.BasicProperties:
    """The basic properties of a publish with ``props`` routed into ``amq.topic``;
    ``now`` is the wall clock (the expiry deadline becomes the interval left)."""
    return to_amqp_counted(props, persistent, now)[0]


def to_amqp_counted(props: MessageProps, persistent: bool, now: float
                    ) -> tuple[spec.BasicProperties, int]:
    """:func:`to_amqp`, and how many User Properties the header budget left out."""
    headers: dict[str, object] = {}
    correlation_id = None
    corr = props.correlation_data
    if corr is not None:
        if valid_shortstr(corr):
            correlation_id = corr.decode("utf-8")
        else:  # a long string of any bytes, as RabbitMQ writes it (not a byte array)
            headers[X_CORRELATION_ID] = Raw(b"S" + encode_longstr(corr))
    if props.response_topic is not None:
        headers[X_REPLY_TO_TOPIC] = props.response_topic.translate(_SWAP)
    left, dropped = USER_HEADER_BUDGET, 0
    for name, value in props.user_properties:
        size = len(name.encode("utf-8"))
        if name in headers or size >= 256:
            continue
        size += 6 + len(value.encode("utf-8", "surrogatepass"))  # shortstr, 'S', long
        if size > left:
            dropped += 1
            continue
        left -= size
        headers[name] = value
    ctype = props.content_type
    if ctype is not None and not (len(ctype) < 256 and ctype.isascii()):
        ctype = None
    exp = props.expires_at
    expiration = None if exp is None else str(max(0, math.ceil(exp - now)) * 1000)
    return spec.BasicProperties(
        content_type=ctype,
        headers={k: headers[k] for k in sorted(headers, key=str.encode)} if headers else None,
        delivery_mode=2 if persistent else 1,
        correlation_id=correlation_id,
        expiration=expiration,
    ), dropped


# ------------------------------------------------------------------ AMQP → MQTT
def from_amqp(raw: bytes, now: float) -> MessageProps | None:
    """The MQTT 5 properties of an AMQP publish whose basic properties are ``raw`` (flags
    word onwards, already checked by ``amqp.properties.scan_properties``); None when it
    carries none. ``now``: the wall clock at publish (``expiration`` counts from it)."""
    if len(raw) < 2 or not (raw[0] << 8 | raw[1]) & _CARRIED:
        return None  # (the common case: delivery_mode alone)
    try:
        p = spec.BasicProperties.decode(raw)[0]
        headers = headers_of(raw)
    except (AmqpError, IndexError, ValueError):
        return None
    ctype = p.content_type
    if ctype is not None and not _mqtt_string(ctype):
        ctype = None
    response_topic = None
    value = _longstr(headers.get(X_REPLY_TO_TOPIC))
    if value is not None:
        del headers[X_REPLY_TO_TOPIC]
        if _mqtt_string(value):
            response_topic = value.translate(_SWAP)
    corr: bytes | None = None
    if p.correlation_id is not None:
        corr = p.correlation_id.encode("utf-8", "surrogateescape")
    else:
        field = headers.get(X_CORRELATION_ID)
        if field is not None and field[:1] == b"S":
            del headers[X_CORRELATION_ID]
            corr = bytes(field[5:])
            if len(corr) > _MQTT_MAX:
                corr = None
    user = tuple((name, text) for name, text in
                 ((name, _simple(field)) for name, field in headers.items())
                 if text is not None and _mqtt_string(name))
    ms = _expiration_ms(p.expiration)
    expires_at = None if ms is None else now + ms / 1000
    if ctype is None and response_topic is None and corr is None and not user \
            and expires_at is None:
        return None
    return MessageProps(None, expires_at, ctype, response_topic, corr, user)


def _expiration_ms(text: str | None) -> int | None:
    """An ``expiration``'s milliseconds: ASCII digits only (``str.isdigit`` also takes
    digits ``int`` refuses, such as ``²``); one past MQTT's longest Message Expiry Interval
    is that longest, so the deadline fits a subscriber's PUBLISH and a record."""
    if text is None or not (text.isascii() and text.isdigit()):
        return None
    return _EXPIRY_MAX_MS if len(text) > 13 else min(int(text), _EXPIRY_MAX_MS)


def _longstr(field: Raw | None) -> str | None:
    """A long-string header's text (None: absent, another type, or not UTF-8)."""
    if field is None or field[:1] != b"S":
        return None
    try:
        return bytes(field[5:]).decode("utf-8")
    except UnicodeDecodeError:
        return None


def _simple(field: Raw) -> str | None:
    """A header value as a User Property's text, if it is a simple value (module doc)."""
    kind = field[0]
    if kind == 0x53:  # 'S'
        text = _longstr(field)
        return text if text is not None and _mqtt_string(text) else None
    if kind == 0x74:  # 't'
        return "true" if field[1] else "false"
    if kind in _INTEGERS:
        return str(int(decode_value(field)[0]))
    if kind in (0x66, 0x64):  # 'f', 'd'
        return f"{decode_value(field)[0]:.20e}"
    if kind == 0x56:  # 'V'
        return ""
    return None  # 'x' byte array, 'A' array, 'F' table, 'D' decimal
