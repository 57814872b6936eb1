"""AMQP scenarios: raw pre-encoded frames with confirms for throughput, pika for latency.

Every scenario declares its own durable queue (with the target's ``queue_args``, e.g.
``x-queue-type: quorum`` on RabbitMQ) and deletes it afterwards.
"""

from __future__ import annotations

import os
import struct
import threading
import time
import uuid
from typing import Any

from bench.amqpwire import (
    BASIC_ACK,
    BASIC_DELIVER,
    BASIC_NACK,
    CHANNEL_CLOSE,
    CONNECTION_CLOSE,
    FRAME_METHOD,
    AmqpError,
    ConfirmTracker,
    RawAmqp,
    ack_frame,
    describe_close,
    publish_frames,
)
from bench.brokers import Target
from bench.result import Meter, Options, Result, Skip, latency_result, paced

_TAG_BITS = struct.Struct(">QB")
_IDS = struct.Struct(">HH")


def _need_amqp(t: Target) -> tuple[str, int]:
    if t.amqp is None:
        raise Skip(f"{t.name} has no AMQP listener")
    return t.amqp


def _pika_params(t: Target) -> Any:
    import pika

    assert t.amqp is not None
    return pika.ConnectionParameters(t.amqp[0], t.amqp[1], socket_timeout=10,
                                     blocked_connection_timeout=30,
                                     credentials=pika.PlainCredentials(t.user, t.password))


class Queue:
    """A durable queue declared for one scenario run; ``delete()`` removes it."""

    def __init__(self, t: Target, tag: str) -> None:
        import pika

        self.name = f"bench-{tag}-{uuid.uuid4().hex[:10]}"
        self.conn = pika.BlockingConnection(_pika_params(t))
        ch = self.conn.channel()
        ch.queue_declare(self.name, durable=True, arguments=t.queue_args or None)
        self.ch = ch

    def depth(self) -> int:
        return int(self.ch.queue_declare(self.name, passive=True).method.message_count)

    def delete(self) -> None:
        try:
            self.ch.queue_delete(self.name)
            self.conn.close()
        except Exception:
            pass


def confirm_publish(t: Target, queue: str, n: int, o: Options,
                    deadline: float | None = None) -> tuple[int, int, float, float]:
    """Publish ``n`` persistent messages with ``o.amqp_window`` unconfirmed at most.

    Returns (acked, nacked, start, end) with perf_counter times.
    """
    c = RawAmqp(*_need_amqp(t), user=t.user, password=t.password)
    c.confirm_select()
    one = publish_frames(1, "", queue, os.urandom(o.payload), persistent=True)
    size = len(one)
    window = max(1, o.amqp_window)
    ring = memoryview(one * window)
    sock = c.sock
    track = ConfirmTracker()
    sent = 0
    t0 = time.perf_counter()
    first = min(window, n)
    sock.sendall(ring[: first * size])
    sent = first
    try:
        while track.settled < sent:
            try:
                c.fill(o.idle_timeout)
            except TimeoutError:
                break
            for ftype, _ch, payload in c.frames():
                if ftype != FRAME_METHOD:
                    continue
                ids = _IDS.unpack_from(payload)
                if ids in (BASIC_ACK, BASIC_NACK):
                    tag, bits = _TAG_BITS.unpack_from(payload, 4)
                    track.settle(tag, bool(bits & 1), ids == BASIC_NACK)
                elif ids in (CONNECTION_CLOSE, CHANNEL_CLOSE):
                    raise AmqpError(describe_close(payload[4:]))
            room = window - (sent - track.settled)
            if room > 0 and sent < n and (deadline is None or time.perf_counter() < deadline):
                k = min(room, n - sent)
                sock.sendall(ring[: k * size])
                sent += k
        t1 = time.perf_counter()
    finally:
        ring.release()
        c.close()
    return track.acked, track.nacked + (sent - track.settled), t0, t1


def confirms(t: Target, o: Options, connections: int = 1,
             scenario: str = "amqp-confirm-1") -> Result:
    """Persistent publishes with confirms into one durable queue from N connections."""
    _need_amqp(t)
    q = Queue(t, scenario)
    meter = Meter(t.pid)
    per = max(1, o.count // connections)
    out: list[tuple[int, int, float, float] | BaseException] = [(0, 0, 0.0, 0.0)] * connections

    def one(i: int) -> None:
        try:
            out[i] = confirm_publish(t, q.name, per, o, deadline)
        except BaseException as e:  # reported below
            out[i] = e

    try:
        meter.start()
        deadline = time.perf_counter() + o.duration
        threads = [threading.Thread(target=one, args=(i,), daemon=True)
                   for i in range(connections)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(o.duration + o.idle_timeout + 60)
        meter.stop()
    finally:
        q.delete()
    for x in out:
        if isinstance(x, BaseException):
            raise x
    runs = [x for x in out if not isinstance(x, BaseException)]
    acked = sum(x[0] for x in runs)
    elapsed = max(x[3] for x in runs) - min(x[2] for x in runs)
    r = Result(scenario, t.name, unit="confirms/s", count=acked, elapsed=elapsed,
               lost=sum(x[1] for x in runs))
    r.value = acked / elapsed if elapsed else 0.0
    return meter.fill(r)


def confirms_8(t: Target, o: Options) -> Result:
    return confirms(t, o, o.connections, "amqp-confirm-8")


def drain(t: Target, o: Options) -> Result:
    """Fill a durable queue with ``drain_count`` messages, then consume with prefetch and
    one manual basic.ack per message (the acks of one read are sent in one write)."""
    _need_amqp(t)
    q = Queue(t, "drain")
    try:
        acked, _nacked, _a, _b = confirm_publish(t, q.name, o.drain_count, o)
        depth = q.depth()
        c = RawAmqp(*_need_amqp(t), user=t.user, password=t.password)
        c.qos(o.prefetch)
        meter = Meter(t.pid)
        t0 = meter.start()
        c.consume(q.name, "bench-drain")
        deadline = t0 + o.duration
        got = 0
        last = t0
        try:
            first = True
            while got < depth and time.perf_counter() < deadline:
                if not first:  # deliveries may already sit in the buffer after consume-ok
                    try:
                        c.fill(o.idle_timeout)
                    except TimeoutError:
                        break
                first = False
                acks = []
                for ftype, _ch, payload in c.frames():
                    if ftype != FRAME_METHOD:
                        continue
                    ids = _IDS.unpack_from(payload)
                    if ids == BASIC_DELIVER:
                        # consumer-tag shortstr, then the delivery tag.
                        tag = struct.unpack_from(">Q", payload, 5 + payload[4])[0]
                        acks.append(ack_frame(1, tag))
                    elif ids in (CONNECTION_CLOSE, CHANNEL_CLOSE):
                        raise AmqpError(describe_close(payload[4:]))
                if acks:
                    c.sock.sendall(b"".join(acks))
                    got += len(acks)
                    last = time.perf_counter()
            meter.stop()
        finally:
            c.close()
    finally:
        q.delete()
    r = Result("amqp-drain", t.name, count=got, elapsed=last - t0, lost=depth - got)
    r.value = got / r.elapsed if r.elapsed > 0 else 0.0
    r.extra = {"filled": acked, "depth": depth}
    return meter.fill(r)


def latency(t: Target, o: Options) -> Result:
    """pika publisher paced at ``rate`` msgs/s (persistent, no confirms) → pika consumer
    (prefetch 100, manual ack) on one durable queue; latency from publish to delivery."""
    import pika

    _need_amqp(t)
    q = Queue(t, "lat")
    n = o.latency_count
    lat: list[int] = []
    ready = threading.Event()
    errors: list[BaseException] = []
    consumer: dict[str, Any] = {}

    def consume() -> None:
        try:
            conn = pika.BlockingConnection(_pika_params(t))
            ch = conn.channel()
            consumer["conn"], consumer["ch"] = conn, ch
            ch.basic_qos(prefetch_count=o.prefetch)

            def on_msg(ch: Any, method: Any, _props: Any, body: bytes) -> None:
                lat.append(time.perf_counter_ns() - struct.unpack_from(">q", body)[0])
                ch.basic_ack(method.delivery_tag)
                if len(lat) >= n:
                    ch.stop_consuming()

            ch.basic_consume(q.name, on_msg)
            conn.call_later(o.duration + o.idle_timeout + 5, ch.stop_consuming)
            ready.set()
            ch.start_consuming()
            conn.close()
        except BaseException as e:
            errors.append(e)
            ready.set()

    th = threading.Thread(target=consume, daemon=True)
    th.start()
    ready.wait(15)
    meter = Meter(t.pid)
    try:
        conn = pika.BlockingConnection(_pika_params(t))
        ch = conn.channel()
        props = pika.BasicProperties(delivery_mode=2)
        pad = os.urandom(max(0, o.payload - 8))
        t0 = meter.start()
        sent = 0
        for _ in paced(n, o.rate, t0, o.duration):
            ch.basic_publish("", q.name, struct.pack(">q", time.perf_counter_ns()) + pad, props)
            sent += 1
        conn.close()
        # The consumer stops when it has n; when the run was cut short, wait for the tail.
        end_wait = time.monotonic() + o.idle_timeout
        while len(lat) < sent and time.monotonic() < end_wait and th.is_alive():
            time.sleep(0.01)
        t1 = meter.stop()
    finally:
        # Stop the consumer before deleting its queue: a server-side cancel (queue deleted)
        # racing pika's own basic.cancel makes pika raise KeyError on the consumer tag.
        if th.is_alive() and "conn" in consumer:
            try:
                consumer["conn"].add_callback_threadsafe(consumer["ch"].stop_consuming)
            except Exception:  # the consumer connection is already gone
                pass
        th.join(o.duration + o.idle_timeout + 10)
        q.delete()
    if errors:
        raise errors[0]
    r = Result("amqp-latency", t.name, elapsed=t1 - t0)
    latency_result(r, lat[:sent])
    r.lost = sent - len(lat)
    r.extra = {"rate": o.rate}
    return meter.fill(r)


def confirm_sequential(t: Target, o: Options) -> Result:
    """One persistent publish at a time into a durable queue, confirm mode (raw client);
    latency from the send to its ``basic.ack``: a lone publisher's commit round trip."""
    addr = _need_amqp(t)
    q = Queue(t, "cseq")
    c = RawAmqp(*addr, user=t.user, password=t.password)
    try:
        c.confirm_select()
        one = publish_frames(1, "", q.name, os.urandom(o.payload), persistent=True)
        sock = c.sock
        lat: list[int] = []
        meter = Meter(t.pid)
        t0 = meter.start()
        deadline = time.perf_counter() + o.duration
        for i in range(1, o.latency_count + 1):
            a = time.perf_counter_ns()
            sock.sendall(one)
            settled = False
            while not settled:
                c.fill(o.idle_timeout)
                for ftype, _ch, payload in c.frames():
                    if ftype != FRAME_METHOD:
                        continue
                    ids = _IDS.unpack_from(payload)
                    if ids == BASIC_ACK:
                        settled = _TAG_BITS.unpack_from(payload, 4)[0] >= i
                    elif ids == BASIC_NACK:
                        raise AmqpError(f"publish {i} was nacked")
                    elif ids in (CONNECTION_CLOSE, CHANNEL_CLOSE):
                        raise AmqpError(describe_close(payload[4:]))
            lat.append(time.perf_counter_ns() - a)
            if time.perf_counter() > deadline:
                break
        t1 = meter.stop()
    finally:
        c.close()
        q.delete()
    r = Result("amqp-confirm-seq", t.name, elapsed=t1 - t0)
    return meter.fill(latency_result(r, lat))
