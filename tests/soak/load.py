"""Load generators for the soak suite: paho / pika threads that record what was acknowledged.

Every message carries a unique id in its JSON payload: ``{"src": NAME, "n": N, ...}`` where
``src`` names one publisher of one cycle and ``n`` counts up from 0. ``attempted`` is every
id handed to the client library (it may or may not have reached the server), ``acked`` the
ids whose acknowledgement the client saw: PUBACK for QoS 1, PUBCOMP for QoS 2 (paho reports
QoS 2 only at PUBCOMP, which comes after the PUBREC that made the promise, so this is a
subset of what the server promised: conservative), the publisher confirm for AMQP.
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as mqtt
import pika

CONNECT_TIMEOUT = 10.0


def payload(src: str, n: int, rng: random.Random) -> bytes:
    """A JSON object with the id and a random-size filler (so record sizes vary)."""
    return json.dumps({"src": src, "n": n, "pad": "x" * rng.randrange(0, 300)}).encode()


def ident(body: bytes | bytearray | str) -> tuple[str, int]:
    """The ``(src, n)`` id in a payload."""
    doc = json.loads(body)
    return str(doc["src"]), int(doc["n"])


@dataclass
class Source:
    """What one publisher tried and what was acknowledged to it."""

    name: str
    attempted: list[int] = field(default_factory=list)
    acked: set[int] = field(default_factory=set)
    error: str | None = None

    def ids(self, which: str = "acked") -> set[tuple[str, int]]:
        nums = self.acked if which == "acked" else set(self.attempted)
        return {(self.name, n) for n in nums}


def _pace(start: float, n: int, rate: float, stop: threading.Event) -> None:
    """Wait until message ``n`` is due at ``rate``/s (or the stop event)."""
    due = start + n / rate
    left = due - time.monotonic()
    if left > 0:
        stop.wait(left)


class MqttPublisher(threading.Thread):
    """A paho client (clean session) publishing ``count`` ids to ``topic`` at ``rate``/s,
    pipelined (up to 20 in flight), until ``stop`` is set or the connection is lost."""

    def __init__(
        self,
        port: int,
        src: str,
        topic: str,
        qos: int,
        count: int,
        rate: float,
        stop: threading.Event,
        seed: int,
    ) -> None:
        super().__init__(daemon=True, name=f"mqtt-pub-{src}")
        self.port, self.topic, self.qos, self.count, self.rate = port, topic, qos, count, rate
        self.stop_event = stop
        self.rng = random.Random(seed)
        self.source = Source(src)
        self._mids: dict[int, int] = {}
        self._acked_mids: set[int] = set()
        self._lock = threading.Lock()
        self._connected = threading.Event()
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=src, clean_session=True
        )
        self.client.max_inflight_messages_set(20)
        self.client.on_connect = lambda *_a: self._connected.set()
        self.client.on_publish = self._on_publish

    def _on_publish(self, _c: Any, _u: Any, mid: int, _rc: Any, _p: Any) -> None:
        with self._lock:
            self._acked_mids.add(mid)

    def run(self) -> None:
        try:
            self.client.connect("127.0.0.1", self.port, keepalive=30)
            self.client.loop_start()
            if not self._connected.wait(CONNECT_TIMEOUT):
                self.source.error = "no CONNACK"
                return
            start = time.monotonic()
            for n in range(self.count):
                _pace(start, n, self.rate, self.stop_event)
                if self.stop_event.is_set() or not self.client.is_connected():
                    break
                info = self.client.publish(
                    self.topic, payload(self.source.name, n, self.rng), self.qos
                )
                if info.rc != mqtt.MQTT_ERR_SUCCESS:
                    break
                self.source.attempted.append(n)
                self._mids[int(info.mid)] = n
            self.stop_event.wait(30)  # keep the loop running for the outstanding acks
        except Exception as exc:  # the kill: connection refused/reset
            self.source.error = repr(exc)

    def finish(self) -> Source:
        """Stop the network loop (no reconnect to anything) and resolve the acked ids."""
        self.join(40)
        self.client.loop_stop()
        with self._lock:
            # mids are unique: fewer than 65535 publishes per client
            self.source.acked = {self._mids[m] for m in self._acked_mids if m in self._mids}
        try:
            self.client.disconnect()
        except Exception:
            pass
        return self.source


def amqp_params(port: int) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        "127.0.0.1",
        port,
        socket_timeout=5,
        blocked_connection_timeout=10,
        connection_attempts=1,
        heartbeat=30,
    )


def close_quietly(conn: pika.BlockingConnection | None) -> None:
    """Close a pika connection that may be gone already (the server was killed)."""
    if conn is not None and conn.is_open:
        try:
            conn.close()
        except Exception:
            pass


class AmqpPublisher(threading.Thread):
    """pika with publisher confirms: persistent messages, one confirm awaited per publish."""

    def __init__(
        self,
        port: int,
        src: str,
        exchange: str,
        routing_key: str,
        count: int,
        rate: float,
        stop: threading.Event,
        seed: int,
    ) -> None:
        super().__init__(daemon=True, name=f"amqp-pub-{src}")
        self.port, self.exchange, self.key, self.count, self.rate = (
            port,
            exchange,
            routing_key,
            count,
            rate,
        )
        self.stop_event = stop
        self.rng = random.Random(seed)
        self.source = Source(src)

    def run(self) -> None:
        conn = None
        try:
            conn = pika.BlockingConnection(amqp_params(self.port))
            ch = conn.channel()
            ch.confirm_delivery()
            props = pika.BasicProperties(delivery_mode=2, content_type="application/json")
            start = time.monotonic()
            for n in range(self.count):
                _pace(start, n, self.rate, self.stop_event)
                if self.stop_event.is_set():
                    break
                self.source.attempted.append(n)
                # returns after the broker's basic.ack; raises on nack or a lost connection
                ch.basic_publish(
                    self.exchange, self.key, payload(self.source.name, n, self.rng), props
                )
                self.source.acked.add(n)
        except Exception as exc:
            self.source.error = repr(exc)
        finally:
            close_quietly(conn)

    def finish(self) -> Source:
        self.join(40)
        return self.source


class AmqpConsumer(threading.Thread):
    """Consumes ``queue``: acks a random share of deliveries, leaves the rest unacked.

    AMQP does not confirm a consumer's ack. oxiedge documents (docs/amqp.md) that staged acks
    are durable before the reply to the consumer connection's next synchronous method other
    than basic.get, so every ``sync_every`` seconds a passive queue.declare round trip moves
    the acks sent before it from ``acked_pending`` to ``acked_durable``. Only those may be
    asserted never to come back; a pending ack may or may not survive the kill.
    """

    def __init__(
        self,
        port: int,
        queue: str,
        ack_share: float,
        stop: threading.Event,
        seed: int,
        sync_every: float = 0.25,
    ) -> None:
        super().__init__(daemon=True, name=f"amqp-consumer-{queue}")
        self.port, self.queue, self.ack_share = port, queue, ack_share
        self.stop_event = stop
        self.rng = random.Random(seed)
        self.sync_every = sync_every
        self.received: list[tuple[str, int]] = []
        self.left: set[tuple[str, int]] = set()
        self.acked_pending: set[tuple[str, int]] = set()
        self.acked_durable: set[tuple[str, int]] = set()
        self.error: str | None = None

    def run(self) -> None:
        conn = None
        try:
            conn = pika.BlockingConnection(amqp_params(self.port))
            ch = conn.channel()

            def on_message(chan: Any, method: Any, _props: Any, body: bytes) -> None:
                mid = ident(body)
                self.received.append(mid)
                if self.rng.random() < self.ack_share:
                    chan.basic_ack(method.delivery_tag)
                    self.acked_pending.add(mid)
                else:
                    self.left.add(mid)

            ch.basic_consume(self.queue, on_message)
            last = time.monotonic()
            while not self.stop_event.is_set():
                conn.process_data_events(time_limit=0.05)
                if self.acked_pending and time.monotonic() - last >= self.sync_every:
                    sent = set(self.acked_pending)
                    ch.queue_declare(self.queue, passive=True)  # the acks before it are durable
                    self.acked_durable |= sent
                    self.acked_pending -= sent
                    last = time.monotonic()
        except Exception as exc:
            self.error = repr(exc)
        finally:
            close_quietly(conn)

    def finish(self) -> AmqpConsumer:
        self.join(40)
        return self


class SlowAmqpConsumer(threading.Thread):
    """A consumer slower than the publishers: prefetch ``prefetch``, ``delay`` s per message,
    then ack. ``acked`` counts the acks sent."""

    def __init__(
        self, port: int, queue: str, prefetch: int, delay: float, stop: threading.Event
    ) -> None:
        super().__init__(daemon=True, name=f"slow-consumer-{queue}")
        self.port, self.queue, self.prefetch, self.delay = port, queue, prefetch, delay
        self.stop_event = stop
        self.acked = 0
        self.ids: list[tuple[str, int]] = []
        self.redelivered = 0
        self.error: str | None = None
        self.conn: pika.BlockingConnection | None = None

    def run(self) -> None:
        try:
            self.conn = pika.BlockingConnection(amqp_params(self.port))
            ch = self.conn.channel()
            ch.basic_qos(prefetch_count=self.prefetch)

            def on_message(chan: Any, method: Any, _props: Any, body: bytes) -> None:
                if self.stop_event.is_set():
                    # pika keeps dispatching inside one process_data_events call while the
                    # server keeps sending: stop acking so the prefetch window closes
                    return
                self.ids.append(ident(body))
                self.redelivered += bool(method.redelivered)
                time.sleep(self.delay)  # the slowness under test
                chan.basic_ack(method.delivery_tag)
                self.acked += 1

            ch.basic_consume(self.queue, on_message)
            while not self.stop_event.is_set():
                self.conn.process_data_events(time_limit=0.1)
        except Exception as exc:
            self.error = repr(exc)

    def close(self) -> None:
        self.join(30)
        if self.conn is not None and self.conn.is_open:
            self.conn.close()


class RawQos2Publisher(threading.Thread):
    """QoS 2 over a raw socket, one message at a time, so the ack recorded is the PUBREC
    itself - the moment the promise is made (paho only reports PUBCOMP)."""

    def __init__(
        self,
        port: int,
        src: str,
        topic: str,
        count: int,
        rate: float,
        stop: threading.Event,
        seed: int,
    ) -> None:
        super().__init__(daemon=True, name=f"raw-qos2-{src}")
        self.port, self.topic, self.count, self.rate = port, topic, count, rate
        self.stop_event = stop
        self.rng = random.Random(seed)
        self.source = Source(src)

    def run(self) -> None:
        from oxiedge.mqtt.codec import encode
        from oxiedge.mqtt.packets import Pubcomp, Publish, Pubrec, Pubrel
        from tests.mqtt.rawclient import RawSession

        try:
            s = RawSession(self.port)
            s.connect(self.source.name)
            start = time.monotonic()
            for n in range(self.count):
                _pace(start, n, self.rate, self.stop_event)
                if self.stop_event.is_set():
                    break
                pid = n % 65535 + 1
                body = payload(self.source.name, n, self.rng)
                self.source.attempted.append(n)
                s.send(encode(Publish(self.topic, body, 2, False, False, pid)))
                assert s.next() == Pubrec(pid)
                self.source.acked.add(n)  # PUBREC: every durable copy is on disk
                s.send(encode(Pubrel(pid)))
                assert s.next() == Pubcomp(pid)
        except Exception as exc:  # the kill
            self.source.error = repr(exc)

    def finish(self) -> Source:
        self.join(40)
        return self.source
