"""A backlog queued in the outbox while the upstream is down survives SIGKILL, then arrives
once and in order; what the upstream returned is kept, over SIGKILL too (parked messages
over SIGKILL: ``test_uplink_guarantees.py``); an outbox written by the previous layout is
forwarded.

Real ``oxiedge serve`` processes, the session's RabbitMQ (behind a frozen proxy: the upstream
is down until it thaws) and a Mosquitto of this module's own (stopped and started again).
The link never connected before the kill, so nothing was in flight: every message must
arrive exactly once, in publish order (one publisher, one topic order, QoS 1 / confirms).
"""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any

import pytest

from .proxy import Proxy
from .test_uplink_e2e import (
    Local,
    delete_queues,
    drained,
    unique,
    uplink_status,
    wait_status,
)
from .test_uplink_guarantees import _declare_exchange

#: A data dir written by the tree before the outbox was a queue log (84358fd): uplink ``up1``
#: (MQTT, ``--prefix old/``, an upstream that refused connections), device ``olddev``, 300
#: QoS 1 messages ``old-00000``... on ``sensors/r0`` .. ``r2`` in turn, then SIGKILL.
OLD_DATA = Path(__file__).parent / "data" / "outbox_s21.tar.gz"
#: More than one window of the queue log (1,024), so the backlog is read back in parts.
N = 2_500


@pytest.mark.timeout(300)  # 2,500 messages through a real upstream, two restarts
def test_amqp_backlog_over_sigkill_arrives_once_in_order_and_returned_ones_stay(
        rabbit: Any, start_server: Any) -> None:
    dev = unique("okill")
    exchange = _declare_exchange(rabbit, dev)
    queue, later = unique("sink"), unique("late")
    rabbit.declare_sink(queue, "sensors.ok.#", exchange)
    proxy = Proxy("127.0.0.1", rabbit.port)
    proxy.freeze()  # the upstream is down: connections hang, no byte moves
    try:
        srv = start_server("--device-id", dev)
        srv.cli("uplink", "add", "up1", f"amqp://guest:guest@127.0.0.1:{proxy.port}/",
                "--out", "sensors/#", "--exchange", exchange, "--window", "64")
        batch = [(f"sensors/ok/{i % 3}", f"{dev}-{i:05}".encode()) for i in range(N)]
        lost = [("sensors/none", f"{dev}-lost{i}".encode()) for i in range(5)]
        for k, msg in enumerate(lost):  # spread among the others: nothing routes them
            batch.insert(k * 500 + 7, msg)
        kept = len(lost)
        with Local(srv.mqtt_port) as pub:
            pub.publish_all(batch, timeout=120)
        total = len(batch)
        wait_status(srv, "up1", lambda s: s["backlog_messages"] == total, f"backlog {total}")

        srv.kill()  # the whole backlog only on disk
        srv.start()
        st = uplink_status(srv, "up1")
        assert st["backlog_messages"] == total and st["inflight"] == 0, st
        proxy.thaw()  # the upstream is back
        st = wait_status(srv, "up1", lambda s: s["backlog_messages"] == kept
                         and s["returned_waiting"] == len(lost) and s["inflight"] == 0,
                         "sent, the unroutable ones kept as returned", timeout=120)
        assert st["confirmed"] == N and st["resent"] == 0, st
        got = [body for _, body, _ in rabbit.drain(queue, expect=N, timeout=30)]
        assert got == [p for t, p in batch if t.startswith("sensors/ok/")]  # once, in order

        # They are on disk (set aside): another SIGKILL keeps them, they come back again.
        srv.kill()
        srv.start()
        wait_status(srv, "up1", lambda s: s["returned_waiting"] == len(lost)
                    and s["backlog_messages"] == kept, "returned after restart", timeout=60)
        rabbit.declare_sink(later, "sensors.none", exchange)
        wait_status(srv, "up1", lambda s: s["backlog_messages"] == 0 and s["inflight"] == 0,
                    "the returned ones taken once routable", timeout=90)
        got = [body for _, body, _ in rabbit.drain(later, expect=len(lost), timeout=10)]
        assert sorted(got) == sorted(p for _, p in lost)
    finally:
        proxy.close()
        delete_queues(rabbit, [queue, later])


@pytest.mark.timeout(300)
def test_mqtt_backlog_over_sigkill_arrives_once_in_order(
        tmp_path: Path, start_server: Any) -> None:
    from .mosquitto import Mosquitto

    mq = Mosquitto.start(tmp_path / "mosquitto")
    sub = None
    try:
        dev = unique("mkill")
        sub_id = f"sink-{dev}"
        sub = mq.subscriber(f"site/{dev}/#", sub_id)
        sub.close()  # its persistent session keeps collecting on the broker
        mq.stop()
        srv = start_server("--device-id", dev, data=tmp_path / "data")
        srv.cli("uplink", "add", "up1", mq.url(), "--out", "sensors/#",
                "--prefix", "site/{device}/", "--window", "64")
        batch = [(f"sensors/t{i % 2}", f"{dev}-{i:05}".encode()) for i in range(N)]
        with Local(srv.mqtt_port) as pub:
            pub.publish_all(batch, timeout=120)
        total = len(batch)
        wait_status(srv, "up1", lambda s: s["backlog_messages"] == total, f"backlog {total}")

        srv.kill()
        srv.start()
        assert uplink_status(srv, "up1")["backlog_messages"] == total
        mq.start_again()
        sub = mq.subscriber(f"site/{dev}/#", sub_id)
        st = wait_status(srv, "up1", drained, "drained", timeout=120)
        assert st["confirmed"] == N and st["resent"] == 0, st
        got = sub.wait_for(N, timeout=60)
        assert got == [(f"site/{dev}/{t}", p) for t, p in batch]  # once, in order
    finally:
        if sub is not None:
            sub.close()
        mq.stop()


def test_a_data_dir_of_the_previous_outbox_layout_forwards_what_it_holds(
        tmp_path: Path, start_server: Any) -> None:
    from .mosquitto import Mosquitto

    data = tmp_path / "data"
    data.mkdir()
    with tarfile.open(OLD_DATA) as tar:
        tar.extractall(data, filter="data")
    mq = Mosquitto.start(tmp_path / "mosquitto")
    sub = None
    try:
        sub = mq.subscriber("old/#", "sink-old")
        srv = start_server("--device-id", "olddev", data=data)
        assert uplink_status(srv, "up1")["backlog_messages"] == 300
        srv.cli("uplink", "add", "up1", mq.url(), "--out", "sensors/#", "--prefix", "old/")
        got = sub.wait_for(300, timeout=60)
        assert got == [(f"old/sensors/r{i % 3}", b"old-%05d" % i) for i in range(300)]
        wait_status(srv, "up1", drained, "drained")
        srv.kill()
        srv.start()
        assert uplink_status(srv, "up1")["backlog_messages"] == 0
    finally:
        if sub is not None:
            sub.close()
        mq.stop()
