"""Stream queue scenarios (``x-queue-type: stream``) over AMQP 0-9-1, beside RabbitMQ's.

``amqp-stream-publish``: persistent publishes with confirms (``--amqp-window`` in flight)
into one stream, as ``amqp-confirm-1`` into a durable queue. ``amqp-stream-consume``: fill
a stream with ``--drain-count`` messages, then one consumer reads it from
``x-stream-offset: first`` with ``--prefetch`` credit and one basic.ack per message (acks
only give credit back on a stream). Both run on RabbitMQ 3.9+ unchanged.
"""

from __future__ import annotations

import struct
import time
import uuid
from typing import Any

from bench.amqpwire import (
    BASIC_DELIVER,
    CHANNEL_CLOSE,
    CONNECTION_CLOSE,
    FRAME_METHOD,
    AmqpError,
    RawAmqp,
    ack_frame,
    describe_close,
    shortstr,
)
from bench.brokers import Target
from bench.result import Meter, Options, Result
from bench.scen_amqp import _need_amqp, _pika_params, confirm_publish

_IDS = struct.Struct(">HH")
STREAM_ARGS = {"x-queue-type": "stream"}


def offset_table(spec: str) -> bytes:
    """The encoded field table ``{"x-stream-offset": spec}``."""
    value = spec.encode()
    body = shortstr("x-stream-offset") + b"S" + struct.pack(">I", len(value)) + value
    return struct.pack(">I", len(body)) + body


class Stream:
    """A stream declared for one scenario run; ``delete()`` removes it."""

    def __init__(self, t: Target, tag: str) -> None:
        import pika

        self.name = f"bench-{tag}-{uuid.uuid4().hex[:10]}"
        self.conn = pika.BlockingConnection(_pika_params(t))
        self.ch: Any = self.conn.channel()
        self.ch.queue_declare(self.name, durable=True, arguments=STREAM_ARGS)

    def length(self) -> int:
        return int(self.ch.queue_declare(self.name, durable=True, arguments=STREAM_ARGS)
                   .method.message_count)

    def delete(self) -> None:
        try:
            self.ch.queue_delete(self.name)
            self.conn.close()
        except Exception:
            pass


def stream_publish(t: Target, o: Options) -> Result:
    """Persistent publishes with confirms into one stream, one connection."""
    _need_amqp(t)
    s = Stream(t, "stream-publish")
    meter = Meter(t.pid)
    try:
        meter.start()
        acked, lost, t0, t1 = confirm_publish(t, s.name, o.count, o,
                                              time.perf_counter() + o.duration)
        meter.stop()
    finally:
        s.delete()
    r = Result("amqp-stream-publish", t.name, unit="confirms/s", count=acked,
               elapsed=t1 - t0, lost=lost)
    r.value = acked / r.elapsed if r.elapsed else 0.0
    return meter.fill(r)


def stream_consume(t: Target, o: Options) -> Result:
    """Fill a stream, then read it from the first offset with prefetch and manual acks."""
    _need_amqp(t)
    s = Stream(t, "stream-consume")
    try:
        filled, _lost, _a, _b = confirm_publish(t, s.name, o.drain_count, o)
        length = filled
        c = RawAmqp(*_need_amqp(t), user=t.user, password=t.password)
        c.qos(o.prefetch)
        meter = Meter(t.pid)
        t0 = meter.start()
        c.consume(s.name, "bench-stream", arguments=offset_table("first"))
        got, last = _read(c, length, t0 + o.duration, o.idle_timeout)
        meter.stop()
        c.close()
    finally:
        s.delete()
    r = Result("amqp-stream-consume", t.name, count=got, elapsed=(last or t0) - t0,
               lost=length - got)
    r.value = got / r.elapsed if r.elapsed > 0 else 0.0
    r.extra = {"filled": filled}
    return meter.fill(r)


def _read(c: RawAmqp, want: int, deadline: float, idle: float) -> tuple[int, float]:
    """Ack every delivery until ``want`` came (acks of one read in one write)."""
    got = 0
    last = 0.0
    first = True
    while got < want and time.perf_counter() < deadline:
        if not first:
            try:
                c.fill(idle)
            except TimeoutError:
                break
        first = False
        acks = []
        for ftype, _ch, payload in c.frames():
            if ftype != FRAME_METHOD:
                continue
            ids = _IDS.unpack_from(payload)
            if ids == BASIC_DELIVER:
                tag = struct.unpack_from(">Q", payload, 5 + payload[4])[0]
                acks.append(ack_frame(1, tag))
            elif ids in (CONNECTION_CLOSE, CHANNEL_CLOSE):
                raise AmqpError(describe_close(payload[4:]))
        if acks:
            c.sock.sendall(b"".join(acks))
            got += len(acks)
            last = time.perf_counter()
    return got, last
