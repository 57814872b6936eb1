"""Read back the durable destinations of the soak suite through real clients and the CLI."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import paho.mqtt.client as mqtt
import pika

from tests.conftest import ServerProcess

from .load import amqp_params, ident

Id = tuple[str, int]


def cli_json(srv: ServerProcess, *args: str) -> list[dict[str, Any]]:
    out = srv.cli(*args, "--json")
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def status(srv: ServerProcess) -> dict[str, Any]:
    return dict(json.loads(srv.cli("status", "--json").stdout))


class Subscriber:
    """A paho persistent-session client (clean_session=False) collecting deliveries."""

    def __init__(self, port: int, client_id: str) -> None:
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self._connack: queue.Queue[bool] = queue.Queue()
        self._subacks: queue.Queue[list[int]] = queue.Queue()
        self._gone = threading.Event()
        self.c = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=False
        )
        self.c.on_message = lambda _c, _u, m: self.messages.put(m)
        self.c.on_connect = lambda _c, _u, flags, _rc, _p: self._connack.put(
            bool(flags.session_present)
        )
        self.c.on_subscribe = lambda _c, _u, _mid, codes, _p: self._subacks.put(
            [int(c.value) for c in codes]
        )
        self.c.on_disconnect = lambda *_a: self._gone.set()
        self.c.connect("127.0.0.1", port, keepalive=30)
        self.c.loop_start()
        self.session_present = self._connack.get(timeout=10)

    def subscribe(self, *filters: tuple[str, int]) -> list[int]:
        self.c.subscribe(list(filters))
        return self._subacks.get(timeout=10)

    def take(self, n: int, timeout: float) -> list[mqtt.MQTTMessage]:
        deadline = time.monotonic() + timeout
        got: list[mqtt.MQTTMessage] = []
        while len(got) < n:
            left = deadline - time.monotonic()
            assert left > 0, f"only {len(got)} of {n} queued MQTT messages delivered"
            got.append(self.messages.get(timeout=left))
        return got

    def nothing_more(self, wait: float = 0.5) -> list[mqtt.MQTTMessage]:
        """Whatever else arrives within ``wait`` (asserting an absence)."""
        extra = []
        deadline = time.monotonic() + wait
        while (left := deadline - time.monotonic()) > 0:
            try:
                extra.append(self.messages.get(timeout=left))
            except queue.Empty:
                break
        return extra

    def close(self) -> None:
        # paho sends DISCONNECT after the PUBACK/PUBCOMP packets already queued
        self.c.disconnect()
        self._gone.wait(10)
        self.c.loop_stop()


def drain_mqtt(srv: ServerProcess, client_id: str) -> tuple[list[Id], list[Id]]:
    """Deliver everything queued for the offline persistent session ``client_id``.

    The expected count is the number of ``msg`` records on disk (``oxiedge find _mqtt``):
    the session is offline and no publisher runs, so it is stable. Returns (ids in delivery
    order, ids of the ``msg`` records)."""
    records = cli_json(srv, "find", "_mqtt", json.dumps({"_kind": "msg", "client": client_id}))
    on_disk = [ident(r["payload"]) for r in records]
    assert srv.mqtt_port is not None
    sub = Subscriber(srv.mqtt_port, client_id)
    try:
        assert sub.session_present, "the persistent session was lost"
        got = sub.take(len(records), timeout=30 + len(records) / 200)
        extra = sub.nothing_more()
        assert not extra, f"{len(extra)} MQTT deliveries beyond the {len(records)} msg records"
    finally:
        sub.close()
    return [ident(m.payload) for m in got], on_disk


def drain_amqp(srv: ServerProcess, queues: Iterable[str]) -> dict[str, list[Id]]:
    """basic.get every message of each queue (get-empty is the definite end), ack them, and
    make the acks durable with a synchronous round trip (docs/amqp.md)."""
    assert srv.amqp_port is not None
    conn = pika.BlockingConnection(amqp_params(srv.amqp_port))
    out: dict[str, list[Id]] = {}
    try:
        ch = conn.channel()
        for q in queues:
            ids: list[Id] = []
            last = None
            while True:
                method, _props, body = ch.basic_get(q)
                if method is None:
                    break
                ids.append(ident(body))
                last = method.delivery_tag
            if last is not None:
                ch.basic_ack(last, multiple=True)
            ch.queue_declare(q, passive=True)  # acks before it are on disk
            out[q] = ids
    finally:
        conn.close()
    return out


def ingest_ids(srv: ServerProcess, collection: str) -> list[Id]:
    """Ids of the ingest documents, in ``_id`` (insertion) order."""
    docs = cli_json(srv, "find", collection, "{}", "--sort", "_id")
    return [(str(d["src"]), int(d["n"])) for d in docs]


def order_violations(ids: list[Id]) -> list[tuple[str, int, int]]:
    """Per source, places where a number is not larger than the one before it."""
    last: dict[str, int] = {}
    bad = []
    for src, n in ids:
        if src in last and n <= last[src]:
            bad.append((src, last[src], n))
        last[src] = n
    return bad


def duplicates(ids: list[Id]) -> list[Id]:
    seen: set[Id] = set()
    dup = []
    for i in ids:
        if i in seen:
            dup.append(i)
        seen.add(i)
    return dup


def summary(ids: Iterable[Id], limit: int = 8) -> str:
    """A short, readable list of ids grouped by source."""
    by: dict[str, list[int]] = defaultdict(list)
    for src, n in sorted(ids):
        by[src].append(n)
    parts = [
        f"{src}: {ns[:limit]}{'...' if len(ns) > limit else ''} ({len(ns)})"
        for src, ns in by.items()
    ]
    return "; ".join(parts)
