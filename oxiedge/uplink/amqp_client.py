"""Sans-IO pieces of the uplink's AMQP 0-9-1 *client*: what to say, and what was meant.

The broker side of ``oxiedge.amqp`` already has the frame codec and the generated method
classes; this module adds what only a client needs, with no I/O and no trio (the link in
``amqp_link.py`` moves the bytes; the handshake, start-ok to basic.consume, is
``amqp_handshake.py``):

* ``UpstreamFrames``: the codec's :class:`FrameParser` used client-side (the server sends
  no protocol header, so ``expect_header=False``), with every malformed input turned into
  :class:`UpstreamFailure`, and RabbitMQ's "wrong protocol" reply recognised;
* ``publish_bytes``: one outbox message as Basic.Publish + content frames;
* ``ConfirmTracker``: publisher-confirm delivery tags → outbox sequence numbers;
* ``close_reason``: a one-line reason for a Connection.Close / Channel.Close.
"""

from __future__ import annotations

from dataclasses import replace

from oxiedge.amqp import spec
from oxiedge.amqp.codec import (
    PROTOCOL_HEADER,
    Command,
    FrameParser,
    Heartbeat,
    encode_content,
)
from oxiedge.amqp.constants import ACCESS_REFUSED, PRECONDITION_FAILED
from oxiedge.amqp.errors import AmqpError
from oxiedge.bridge.props import to_amqp
from oxiedge.staged import MessageProps

#: Largest frame we accept and propose (RabbitMQ's default); the server may lower it.
FRAME_MAX = 131072
#: The channel of publishes and their confirms.
CHANNEL = 1
#: The channel of the command (``--in``) consumer, apart so a refusal there spares channel 1.
INBOUND_CHANNEL = 2


class UpstreamFailure(Exception):
    """The upstream broke the protocol or refused us; the message is a one-line reason."""


# ----------------------------------------------------------------- closes
def close_reason(method: spec.ConnectionClose | spec.ChannelClose) -> str:
    """A one-line reason for a close the upstream sent (403 reads "access refused ...")."""
    what = "connection" if isinstance(method, spec.ConnectionClose) else "channel"
    text = method.reply_text
    if method.reply_code == ACCESS_REFUSED:
        return f"access refused by upstream: {text}"
    failed = spec.METHODS.get((method.class_id << 16) | method.method_id)
    on = f" (after {failed.NAME})" if failed is not None else ""
    return f"upstream closed the {what}: {method.reply_code} {text}{on}"


# ----------------------------------------------------------------- frames in
class UpstreamFrames:
    """Bytes from the upstream → commands and heartbeats, client side."""

    def __init__(self) -> None:
        # The server does not send a protocol header (spec 4.2.2: only the client does);
        # if it rejects ours it writes its own header instead and closes (checked below).
        self._parser = FrameParser(FRAME_MAX, expect_header=False)
        self._started = False

    @property
    def frame_max(self) -> int:
        return self._parser.frame_max

    @frame_max.setter
    def frame_max(self, value: int) -> None:
        self._parser.frame_max = value

    def feed(self, data: bytes | bytearray) -> None:
        """Append bytes received from the upstream."""
        self._parser.feed(bytes(data) if isinstance(data, bytearray) else data)

    def next_event(self) -> Command | Heartbeat | None:
        """The next complete command or heartbeat; ``None`` until more bytes arrive.

        Raises :class:`UpstreamFailure` for anything malformed (never ``IndexError`` &c.)."""
        if not self._started:
            head = self._parser.unconsumed()[:8]
            if head[:1] == PROTOCOL_HEADER[:1]:  # "A" (65) is no frame type: a header
                if len(head) < 8:
                    return None
                raise UpstreamFailure(f"upstream refused AMQP 0-9-1 (it answered {head!r})")
        try:
            event = self._parser.next_event()
        except AmqpError as exc:
            raise UpstreamFailure(f"malformed frame from upstream: {exc}") from None
        if event is not None:
            self._started = True
        return event


# ----------------------------------------------------------------- frames out
def publish_bytes(exchange: str, routing_key: str, payload: bytes, *, seq: int, topic: str,
                  device_id: str, link_name: str, timestamp: int, frame_max: int,
                  mqtt5: MessageProps | None = None, now: float = 0.0) -> bytes:
    """One outbox message as Basic.Publish + content header + body frames ≤ ``frame_max``.

    Persistent (``delivery-mode`` 2) and ``mandatory`` (an unroutable message comes back
    as Basic.Return instead of vanishing); ``message-id`` ``device/link/seq`` lets the
    consumer drop the duplicates an at-least-once resend after a reconnect produces.
    ``mqtt5``: the message's properties, mapped as across ``amq.topic`` (``bridge/props.py``:
    content type, correlation id, headers, ``expiration`` left at ``now``, wall clock)."""
    headers: dict[str, object] = {"x-oxiedge-device": device_id, "x-oxiedge-topic": topic}
    mapped = spec.BasicProperties() if mqtt5 is None else to_amqp(mqtt5, True, now)
    props = replace(mapped, headers={**(mapped.headers or {}), **headers}, delivery_mode=2,
                    message_id=f"{device_id}/{link_name}/{seq}", timestamp=timestamp,
                    app_id="oxiedge")
    try:
        method = spec.BasicPublish(0, exchange, routing_key, True, False)
        return encode_content(CHANNEL, method, props.encode(), payload, frame_max)
    except AmqpError as exc:  # a name longer than a shortstr's 255 bytes
        raise ValueError(str(exc)) from None


class ConfirmTracker:
    """Publisher confirms (RabbitMQ extension): after Confirm.Select the broker numbers
    every publish on the channel 1, 2, 3, ... and acks (or nacks) by that number, possibly
    several at once (``multiple``: every tag up to and including it)."""

    def __init__(self) -> None:
        self._next_tag = 1
        self._seqs: dict[int, int] = {}  # tag → seq, insertion (= tag) ordered

    def __len__(self) -> int:
        return len(self._seqs)

    def published(self, seq: int) -> int:
        """Record the next publish (call before its bytes are sent); returns its tag."""
        tag = self._next_tag
        self._next_tag += 1
        self._seqs[tag] = seq
        return tag

    def pending(self) -> list[int]:
        """The seqs published and not yet acked or nacked, in publish order."""
        return list(self._seqs.values())

    def settle(self, tag: int, multiple: bool) -> list[int]:
        """The seqs an ack/nack of ``tag`` settles, in publish order (removed here).

        A tag we never used or already settled settles nothing (a duplicate ack must not
        confirm a later message)."""
        if not multiple:
            seq = self._seqs.pop(tag, None)
            return [] if seq is None else [seq]
        done = []
        for t in self._seqs:
            if t > tag:
                break
            done.append(t)
        return [self._seqs.pop(t) for t in done]


def returned_seq(properties: bytes | None, device_id: str, link_name: str) -> int | None:
    """The outbox seq in a returned message's ``message-id`` (``DEVICE/UPLINK/SEQ``), if it
    is one of this uplink's."""
    if not properties:
        return None
    try:
        props, _ = spec.BasicProperties.decode(properties)
    except Exception:  # malformed properties from the upstream: not ours to trust
        return None
    mid = props.message_id
    if isinstance(mid, bytes):
        mid = mid.decode("utf-8", "replace")
    if not isinstance(mid, str):
        return None
    head, _, tail = mid.rpartition("/")
    if head != f"{device_id}/{link_name}" or not tail.isdigit():
        return None
    return int(tail)


_BASIC_PUBLISH = (spec.BasicPublish.CLASS_ID, spec.BasicPublish.METHOD_ID)
#: Channel-close codes after a publish that refuse that message (or its routing key) for
#: good: 403 no write permission, 406 over the node's max_message_size. Others (404: the
#: exchange is gone, ...) are about the upstream, not the message: reconnect and resend.
_REFUSES_MESSAGE = (ACCESS_REFUSED, PRECONDITION_FAILED)


def refuses_message(close: spec.ChannelClose) -> bool:
    """Whether the upstream's Channel.Close refuses the publish it answers, for good."""
    return (close.class_id, close.method_id) == _BASIC_PUBLISH \
        and close.reply_code in _REFUSES_MESSAGE
