"""MQTT scenarios: raw pre-encoded pipelined sockets for throughput, raw and paho for latency.

Throughput is counted on the receiving side: QoS 0 deliveries of one topic and payload
all have the same length, so a subscriber counts bytes (no per-packet parsing), and
PUBACKs are 4 bytes each.  A run ends when every message arrived or after
``idle_timeout`` seconds of silence (the shortfall is reported as ``lost``).

Every scenario runs in MQTT 3.1.1 or MQTT 5 (``Options.mqtt_level``, ``--mqtt-version``): the
same messages, MQTT 5 packets with an empty property block. MQTT 5 PUBACKs may carry a
reason code (Mosquitto answers 0x10 "no matching subscribers" to a publish nobody takes), so
they are counted by their length bytes instead of as 4-byte units.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import struct
import threading
import time
import uuid
from dataclasses import replace

from bench.brokers import Target
from bench.mqttwire import (
    PUBACK_LEN,
    RawMqtt,
    RingSender,
    count_packets,
    publish_packet,
    qos1_ring,
)
from bench.result import Meter, Options, Result, Skip, latency_result, paced

LOWAT = 64 * 1024
BRIDGE_MAX = 90_000


def _uid() -> str:
    return uuid.uuid4().hex[:10]


def _payload(o: Options) -> bytes:
    return os.urandom(o.payload)


def _need_mqtt(t: Target, scenario: str) -> tuple[str, int]:
    if not t.runs_mqtt(scenario):
        raise Skip(f"{t.name} has no MQTT listener for this scenario")
    assert t.mqtt is not None
    return t.mqtt


def _connect(addr: tuple[str, int], cid: str, clean: bool = True, level: int = 4) -> RawMqtt:
    c = RawMqtt(*addr, level=level)
    c.connect(cid, clean)
    return c


def qos0(t: Target, o: Options, subscribers: int = 1, scenario: str = "mqtt-qos0") -> Result:
    """One publisher streams QoS 0 as fast as TCP takes it; ``subscribers`` receive."""
    addr = _need_mqtt(t, scenario)
    topic = f"bench/{_uid()}/q0"
    subs = []
    for i in range(subscribers):
        c = _connect(addr, f"bsub-{_uid()}-{i}", level=o.mqtt_level)
        c.subscribe(topic, 0)
        subs.append(c)
    pub = _connect(addr, "bpub-" + _uid(), level=o.mqtt_level)
    pkt = publish_packet(topic, _payload(o), 0, level=o.mqtt_level)
    size = len(pkt)
    batch = 256
    chunk = pkt * batch
    state = {"sent": 0, "done": False}
    last = [0.0] * subscribers
    meter = Meter(t.pid)

    def send() -> None:
        deadline = time.perf_counter() + o.duration
        n = o.count
        sock = pub.sock
        while state["sent"] < n and time.perf_counter() < deadline:
            k = min(batch, n - state["sent"])
            sock.sendall(chunk if k == batch else pkt * k)
            state["sent"] += k
        state["done"] = True

    def receive_all() -> None:
        """One epoll loop over every subscriber socket.

        SO_RCVLOWAT makes a socket readable only once 64 KiB are queued, so a broker that
        writes one small segment per message (Mosquitto) does not cost the generator one
        wake-up per message; it drops back to 1 byte when the publisher is done, for the tail.
        """
        buf = bytearray(1 << 18)
        sel = selectors.DefaultSelector()
        for i, c in enumerate(subs):
            total[i] = len(c.buf)  # bytes already read past SUBACK
            seen[i] += c.buf
            c.sock.setblocking(False)
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, LOWAT)
            sel.register(c.sock, selectors.EVENT_READ, i)
        lowered = False
        quiet_since = None
        want = 0
        while True:
            if state["done"]:
                want = state["sent"] * size
                if not lowered:
                    for c in subs:
                        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
                    lowered = True
                if all(x >= want for x in total):
                    break
            events = sel.select(0.2)
            if not events:
                if state["done"]:
                    quiet_since = quiet_since or time.perf_counter()
                    if time.perf_counter() - quiet_since > o.idle_timeout:
                        break
                continue
            quiet_since = None
            now = time.perf_counter()
            for key, _ in events:
                i = key.data
                try:
                    n = key.fileobj.recv_into(buf)  # type: ignore[union-attr]
                except BlockingIOError:
                    continue
                if not n:
                    sel.unregister(key.fileobj)
                    continue
                if len(seen[i]) < size:
                    seen[i] += buf[: min(n, size - len(seen[i]))]
                total[i] += n
                last[i] = now
        sel.close()

    total = [0] * subscribers
    seen = [bytearray() for _ in range(subscribers)]
    receiver = threading.Thread(target=receive_all, daemon=True)
    receiver.start()
    t0 = meter.start()
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    sender.join()
    receiver.join(o.duration + o.idle_timeout + 30)
    meter.stop()
    end = max(last) if any(last) else time.perf_counter()
    for c in subs:
        c.sock.setblocking(True)
    for c in [*subs, pub]:
        c.disconnect()
    got = [x // size for x in total]
    # Counting bytes is only valid if the stream is our PUBLISH, unchanged, back to back.
    head_ok = [x % size == 0 and (x == 0 or bytes(seen[i][:size]) == pkt)
               for i, x in enumerate(total)]
    if not all(head_ok):
        raise RuntimeError("a subscriber stream was not whole copies of the published packet")
    r = Result(scenario, t.name, unit="deliveries/s" if subscribers > 1 else "msgs/s")
    r.count = sum(got)
    r.elapsed = end - t0
    r.value = r.count / r.elapsed if r.elapsed > 0 else 0.0
    r.lost = state["sent"] * subscribers - r.count
    r.extra = {"sent": state["sent"]}
    return meter.fill(r)


def fanout(t: Target, o: Options) -> Result:
    return qos0(t, o, subscribers=o.fanout, scenario="mqtt-fanout")


def _pipelined_qos1(c: RawMqtt, topic: str, o: Options, meter: Meter) -> tuple[int, float, int]:
    """Publish up to ``o.count`` QoS 1 messages with ``o.window`` in flight.

    Returns (PUBACKs received, elapsed seconds, publishes sent).
    """
    level = o.mqtt_level
    ring, size = qos1_ring(topic, _payload(o), level)
    pending = bytearray()
    ring_n = 65535
    sock = c.sock
    ring_out = RingSender(sock, ring, size, ring_n)
    n, window = o.count, min(o.window, ring_n - 1)
    acked = 0
    rem = 0  # bytes of a PUBACK split across reads
    buf = bytearray(1 << 16)

    t0 = meter.start()
    deadline = t0 + o.duration
    ring_out.send(min(window, n))
    sock.settimeout(o.idle_timeout)
    while acked < ring_out.sent:
        try:
            got = sock.recv_into(buf)
        except TimeoutError:
            break
        if not got:
            raise ConnectionError(f"broker closed the connection after {acked} PUBACKs")
        if level == 5:  # (reason codes make PUBACKs of varying length)
            pending += buf[:got]
            k = count_packets(pending)
        else:
            rem += got
            k = rem // PUBACK_LEN
            rem -= k * PUBACK_LEN
        acked += k
        if ring_out.sent < n and time.perf_counter() < deadline:
            ring_out.send(min(k, n - ring_out.sent))
    t1 = meter.stop()
    ring_out.release()
    return acked, t1 - t0, ring_out.sent


def qos1_pipelined(t: Target, o: Options) -> Result:
    """QoS 1 publishes with ``window`` in flight and no subscriber: PUBACKs/s."""
    addr = _need_mqtt(t, "mqtt-qos1")
    c = _connect(addr, "bpub-" + _uid(), level=o.mqtt_level)
    meter = Meter(t.pid)
    acked, elapsed, sent = _pipelined_qos1(c, f"bench/{_uid()}/q1", o, meter)
    c.disconnect()
    r = Result("mqtt-qos1", t.name, unit="PUBACKs/s", count=acked, elapsed=elapsed,
               lost=sent - acked)
    r.value = acked / elapsed if elapsed else 0.0
    return meter.fill(r)


def durable_offline(t: Target, o: Options) -> Result:
    """QoS 1 publishes (window in flight) to a topic an offline persistent session holds.

    Each message is queued for the offline subscriber; oxiedge and RabbitMQ must sync
    it before the PUBACK, Mosquitto keeps it in memory.  The session is cleaned after.
    """
    addr = _need_mqtt(t, "mqtt-durable-offline")
    topic = f"bench/{_uid()}/durable"
    sub_id = "bdur-" + _uid()
    s = _connect(addr, sub_id, clean=False, level=o.mqtt_level)
    s.subscribe(topic, 1)
    s.disconnect()
    c = _connect(addr, "bpub-" + _uid(), level=o.mqtt_level)
    meter = Meter(t.pid)
    try:
        acked, elapsed, sent = _pipelined_qos1(c, topic, o, meter)
    finally:
        c.disconnect()
        # A clean session discards the queued messages (MQTT-3.1.2-6).
        with contextlib.suppress(OSError):
            _connect(addr, sub_id, clean=True, level=o.mqtt_level).disconnect()
    r = Result("mqtt-durable-offline", t.name, unit="PUBACKs/s", count=acked,
               elapsed=elapsed, lost=sent - acked)
    r.value = acked / elapsed if elapsed else 0.0
    return meter.fill(r)


def qos1_sequential_raw(t: Target, o: Options) -> Result:
    """One QoS 1 PUBLISH at a time; latency from send to its PUBACK (raw socket)."""
    addr = _need_mqtt(t, "mqtt-qos1-seq")
    level = o.mqtt_level
    c = _connect(addr, "bseq-" + _uid(), level=level)
    topic = f"bench/{_uid()}/seq"
    payload = _payload(o)
    tail = (b"\x00" if level == 5 else b"") + payload
    head = publish_packet(topic, payload, 1, 1, level)[: -len(tail) - 2]
    sock = c.sock
    sock.settimeout(o.idle_timeout)
    lat: list[int] = []
    meter = Meter(t.pid)
    t0 = meter.start()
    deadline = time.perf_counter() + o.duration
    pack = struct.Struct(">H").pack
    for i in range(o.latency_count):
        pkt = head + pack(i % 65535 + 1) + tail
        a = time.perf_counter_ns()
        sock.sendall(pkt)
        got = b""
        want = PUBACK_LEN
        while len(got) < want:
            chunk = sock.recv(want - len(got))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            got += chunk
            if len(got) >= 2:
                want = 2 + got[1]  # (an MQTT 5 PUBACK may carry a reason code)
        lat.append(time.perf_counter_ns() - a)
        if time.perf_counter() > deadline:
            break
    t1 = meter.stop()
    c.disconnect()
    r = Result("mqtt-qos1-seq", t.name, elapsed=t1 - t0)
    return meter.fill(latency_result(r, lat))


def qos1_sequential_paho(t: Target, o: Options) -> Result:
    """The same with paho-mqtt (a real client library, its network thread included)."""
    import paho.mqtt.client as mqtt

    addr = _need_mqtt(t, "mqtt-qos1-seq-paho")
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bpaho-" + _uid(),
                    protocol=mqtt.MQTTv5 if o.mqtt_level == 5 else mqtt.MQTTv311)
    c.connect(addr[0], addr[1], keepalive=60)
    c.loop_start()
    topic = f"bench/{_uid()}/paho"
    payload = _payload(o)
    lat: list[int] = []
    meter = Meter(t.pid)
    try:
        deadline_connect = time.monotonic() + 10
        while not c.is_connected():
            if time.monotonic() > deadline_connect:
                raise ConnectionError("paho did not connect")
            time.sleep(0.005)
        t0 = meter.start()
        deadline = time.perf_counter() + o.duration
        for _ in range(o.latency_count):
            a = time.perf_counter_ns()
            info = c.publish(topic, payload, qos=1)
            info.wait_for_publish(timeout=o.idle_timeout)
            if not info.is_published():
                raise TimeoutError(f"no PUBACK within {o.idle_timeout:.1f}s")
            lat.append(time.perf_counter_ns() - a)
            if time.perf_counter() > deadline:
                break
        t1 = meter.stop()
    finally:
        c.disconnect()
        c.loop_stop()
    r = Result("mqtt-qos1-seq-paho", t.name, elapsed=t1 - t0)
    return meter.fill(latency_result(r, lat))


def qos1_delivery_paho(t: Target, o: Options) -> Result:
    """paho publisher paced at ``rate`` msgs/s, QoS 1 → paho subscriber (QoS 1, clean
    sessions, no durable copy); latency from publish to delivery (timestamp in the payload)."""
    import paho.mqtt.client as mqtt

    addr = _need_mqtt(t, "mqtt-qos1-latency-paho")
    topic = f"bench/{_uid()}/lat"
    n = o.latency_count
    lat: list[int] = []
    got_all = threading.Event()
    subscribed = threading.Event()

    def client(role: str) -> mqtt.Client:
        v5 = o.mqtt_level == 5  # (MQTT 5: Clean Start is CONNECT's, paho's default 1)
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"b{role}-" + _uid(),
                        protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311,
                        clean_session=None if v5 else True)
        c.connect(addr[0], addr[1], keepalive=60)
        return c

    def on_message(_c: mqtt.Client, _u: object, msg: mqtt.MQTTMessage) -> None:
        lat.append(time.perf_counter_ns() - struct.unpack_from(">q", msg.payload)[0])
        if len(lat) >= n:
            got_all.set()

    sub = client("lsub")
    sub.on_message = on_message
    sub.on_subscribe = lambda *_a: subscribed.set()
    sub.on_connect = lambda c, *_a: c.subscribe(topic, qos=1)
    sub.loop_start()
    pub = client("lpub")
    pub.loop_start()
    meter = Meter(t.pid)
    try:
        if not subscribed.wait(10):
            raise ConnectionError("paho subscriber did not subscribe")
        deadline_connect = time.monotonic() + 10
        while not pub.is_connected():
            if time.monotonic() > deadline_connect:
                raise ConnectionError("paho publisher did not connect")
            time.sleep(0.005)
        pad = os.urandom(max(0, o.payload - 8))
        t0 = meter.start()
        sent = 0
        for _ in paced(n, o.rate, t0, o.duration):
            pub.publish(topic, struct.pack(">q", time.perf_counter_ns()) + pad, qos=1)
            sent += 1
        end_wait = time.monotonic() + o.idle_timeout
        while len(lat) < sent and time.monotonic() < end_wait:
            got_all.wait(0.01)
        t1 = meter.stop()
    finally:
        for c in (pub, sub):
            c.disconnect()
            c.loop_stop()
    r = Result("mqtt-qos1-latency-paho", t.name, elapsed=t1 - t0)
    latency_result(r, lat[:sent])
    r.lost = max(0, sent - len(lat))
    r.extra = {"rate": o.rate}
    return meter.fill(r)


def bridge_mqtt_amqp(t: Target, o: Options) -> Result:
    """MQTT QoS 1 (window in flight) → ``amq.topic`` → a durable queue: PUBACKs/s.

    Skipped when one test message does not reach the bound queue (no bridge).
    """
    import pika

    addr = _need_mqtt(t, "bridge-mqtt-amqp")
    if t.amqp is None:
        raise Skip(f"{t.name} has no AMQP listener")
    uid = _uid()
    queue = "bench-bridge-" + uid
    params = pika.ConnectionParameters(t.amqp[0], t.amqp[1], socket_timeout=10,
                                       credentials=pika.PlainCredentials(t.user, t.password))
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.queue_declare(queue, durable=True, arguments=t.queue_args or None)
    ch.queue_bind(queue, "amq.topic", routing_key=f"bench.{uid}.#")
    topic = f"bench/{uid}/x"

    def depth() -> int:
        return int(ch.queue_declare(queue, passive=True).method.message_count)

    def wait_depth(want: int, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        d = depth()
        while d < want and time.monotonic() < deadline:
            conn.sleep(0.05)
            d = depth()
        return d

    try:
        probe = _connect(addr, "bprobe-" + uid, level=o.mqtt_level)
        probe.sock.sendall(publish_packet(topic, b"probe", 1, 1, o.mqtt_level))
        probe.read_packet()
        probe.disconnect()
        if wait_depth(1, 3.0) < 1:
            raise Skip(f"MQTT→AMQP bridge not there: a QoS 1 publish on {topic} did not reach a "
                       f"queue bound to amq.topic with bench.{uid}.#")
        ch.queue_purge(queue)
        c = _connect(addr, "bpub-" + uid, level=o.mqtt_level)
        meter = Meter(t.pid)
        # Stay below oxiedge's default per-queue bound (amqp_queue_limit 100,000, drop
        # oldest) so that every PUBACKed message must be found in the queue afterwards.
        ob = replace(o, count=min(o.count, BRIDGE_MAX))
        acked, elapsed, sent = _pipelined_qos1(c, topic, ob, meter)
        c.disconnect()
        in_queue = wait_depth(acked, 15.0)
        r = Result("bridge-mqtt-amqp", t.name, unit="PUBACKs/s", count=acked,
                   elapsed=elapsed, lost=max(0, acked - in_queue))
        r.value = acked / elapsed if elapsed else 0.0
        r.extra = {"in_queue": in_queue, "sent": sent}
        return meter.fill(r)
    finally:
        try:
            ch.queue_delete(queue)
            conn.close()
        except Exception:
            pass


