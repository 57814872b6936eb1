"""Transactional publish scenarios (``tx.select`` + publishes + ``tx.commit``), beside
RabbitMQ's: what Spring AMQP's ``channelTransacted`` and other transactional publishers cost.

``amqp-tx-1`` commits every persistent publish (one commit round trip and one sync per
message: the transactional counterpart of ``amqp-confirm-seq``); ``amqp-tx-100`` sends 100
publishes then one ``tx.commit`` and waits for ``commit-ok`` before the next batch. The
headline is messages committed per second; the queue's depth afterwards is checked
against what was committed (``lost``). Both run on RabbitMQ unchanged (its transactions
are the same "batching" reading of the tx class).
"""

from __future__ import annotations

import os
import time

from bench.amqpwire import RawAmqp, method, publish_frames
from bench.brokers import Target
from bench.result import Meter, Options, Result
from bench.scen_amqp import Queue, _need_amqp


def _transactional(t: Target, o: Options, batch: int, name: str) -> Result:
    addr = _need_amqp(t)
    q = Queue(t, f"tx{batch}")
    c = RawAmqp(*addr, user=t.user, password=t.password)
    committed = 0
    try:
        c.sock.sendall(method(1, 90, 10))  # tx.select
        c.expect(90, 11)
        frames = publish_frames(1, "", q.name, os.urandom(o.payload), persistent=True) * batch
        commit = method(1, 90, 20)
        meter = Meter(t.pid)
        t0 = meter.start()
        deadline = time.perf_counter() + o.duration
        while committed + batch <= o.count and time.perf_counter() < deadline:
            c.sock.sendall(frames + commit)
            c.expect(90, 21, timeout=o.idle_timeout + 10)  # tx.commit-ok
            committed += batch
        t1 = meter.stop()
        depth = q.depth()
    finally:
        c.close()
        q.delete()
    r = Result(name, t.name, unit="msgs/s", count=committed, elapsed=t1 - t0,
               lost=max(0, committed - depth))
    r.value = committed / r.elapsed if r.elapsed else 0.0
    r.extra = {"batch": batch}
    return meter.fill(r)


def tx_each(t: Target, o: Options) -> Result:
    """tx.commit after every persistent publish, one connection."""
    return _transactional(t, o, 1, "amqp-tx-1")


def tx_batch(t: Target, o: Options) -> Result:
    """tx.commit after every 100 persistent publishes, one connection."""
    return _transactional(t, o, 100, "amqp-tx-100")
