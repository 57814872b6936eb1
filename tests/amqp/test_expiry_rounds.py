"""TTL expiry of a deep durable queue runs in bounded rounds (``queues.EXPIRE_ROUND``):
between two rounds every other connection is served, a consumer or
``basic.get`` never receives an expired message, and every expired message is removed, or
dead-lettered, exactly once - across a SIGKILL in the middle too.

The deep run is due before the test starts watching: its messages carry a per-message TTL
of 1 ms and wait behind a first message without one (RabbitMQ expires only at the head),
across a SIGKILL and a restart; taking that first message lets the run go. Progress is
observed, not timed: declare-ok counts that fall between "all" and "none" with a publisher's
confirm in between, and ``amqp.expiry_rounds_cut`` in ``oxiedge status``.
"""

from __future__ import annotations

import json
from typing import Any

import pika

from bench.backlog_amqp import message_body, publish
from tests.amqp.conftest import connect, wait_until
from tests.amqp.test_queue_backlog import WINDOW, Drainer, recovered

N = 100_000  # ~25 rounds of unread expiry
N_DL = 30_000  # ~120 rounds of dead-lettering
PERSISTENT = pika.BasicProperties(delivery_mode=2)


def status_amqp(srv: Any) -> dict[str, Any]:
    return dict(json.loads(srv.cli("status", "--json").stdout)["amqp"])


def fill_then_kill(srv: Any, queue: str, n: int, arguments: dict[str, Any] | None = None
                   ) -> None:
    """Declare ``queue`` and ``side``; publish b"first" (no TTL), then ``n`` persistent
    messages due at once behind it; SIGKILL, restart."""
    ch = connect(srv).channel()
    ch.queue_declare(queue, durable=True, arguments=arguments or {})
    ch.queue_declare("side", durable=True)
    ch.confirm_delivery()
    ch.basic_publish("", queue, b"first", PERSISTENT)
    ch.connection.close()
    publish(srv.amqp_port, queue, range(n), expiration="1")
    srv.kill()
    srv.start()
    assert recovered(srv).endswith(f"durable queues, {n + 1} messages")


def test_a_deep_expired_run_goes_in_rounds_while_others_are_served(start_server: Any
                                                                   ) -> None:
    """Another connection's confirms come back while the run is partly expired; live
    messages published behind it go, in order and once, to basic.get and to a consumer that
    arrives while it is expiring; an expired one never does."""
    srv = start_server()
    fill_then_kill(srv, "deep", N)
    c = connect(srv)
    ch, probe, burst = c.channel(), c.channel(), c.channel()
    ch.confirm_delivery()
    live = list(range(N, N + 300))  # no TTL of their own, behind the run
    for i in live:  # (not confirmed one by one: the declare-ok below comes after them)
        burst.basic_publish("", "deep", message_body(i, 100), PERSISTENT)
    assert probe.queue_declare("deep", passive=True).method.message_count == N + 1 + len(live)
    assert probe.basic_get("deep", auto_ack=True)[2] == b"first"  # the run is due: it goes
    got: list[bytes] = []  # basic.get while it expires: get-empty, or the next live one
    drainer = None
    counts: list[int] = []  # declare-ok of "deep", one after each confirmed publish
    sent = 0
    while not counts or counts[-1]:
        ch.basic_publish("", "side", message_body(sent, 100), PERSISTENT)  # (confirmed)
        sent += 1
        counts.append(probe.queue_declare("deep", passive=True).method.message_count)
        if drainer is None:
            if (m := ch.basic_get("deep", auto_ack=True))[0] is not None:
                got.append(m[2])
            if len(live) < counts[-1] < N + len(live):
                drainer = Drainer(srv.amqp_port, "deep")  # arrives in the middle
        assert sent < 100_000
    # A confirm came back after the run had started (b"first" went before it) and before
    # it ended: a declare-ok after it saw the run partly expired (with one synchronous call
    # for the whole run every count is all or none).
    assert any(len(live) < k < N + len(live) for k in counts), counts[:20]
    assert counts == sorted(counts, reverse=True)
    assert drainer is not None
    taken = drainer.take(len(live) - len(got))
    assert got + [message_body(i, 100) for i, _r in taken] == [
        message_body(i, 100) for i in live]
    amqp = status_amqp(srv)
    assert amqp["expired"] == N and amqp["delivered"] == len(live) + 1
    assert amqp["expiry_rounds_cut"] >= 2
    # b"first"'s window and the live ones; the rest went unread
    assert amqp["read_back_messages"] <= WINDOW + len(live)
    assert drainer.ahead == [] and probe.basic_get("deep")[0] is None
    assert probe.queue_declare("side", passive=True).method.message_count == sent
    srv.kill()  # (the last rounds' removal may not be on disk yet: it is done again)
    srv.start()
    c = connect(srv)
    probe = c.channel()
    wait_until(c, lambda: probe.queue_declare("deep", passive=True).method.message_count == 0)
    assert probe.queue_declare("side", passive=True).method.message_count == sent


def test_dead_lettering_a_deep_run_in_rounds_is_exactly_once_across_sigkill(
        start_server: Any) -> None:
    srv = start_server()
    ch = connect(srv).channel()
    ch.queue_declare("dlq", durable=True)
    ch.connection.close()
    fill_then_kill(srv, "ttl.dl", N_DL, {"x-dead-letter-exchange": "",
                                   "x-dead-letter-routing-key": "dlq"})
    c = connect(srv)
    ch = c.channel()

    def dead() -> int:
        return int(ch.queue_declare("dlq", passive=True).method.message_count)

    assert ch.basic_get("ttl.dl", auto_ack=True)[2] == b"first"  # the run is due: it goes
    wait_until(c, lambda: dead() > 0, timeout=30)
    srv.kill()  # in the middle of it (or just after: then nothing is left to do)
    srv.start()
    c = connect(srv)
    ch = c.channel()
    wait_until(c, lambda: dead() == N_DL, timeout=60)
    assert ch.queue_declare("ttl.dl", passive=True).method.message_count == 0
    _m, props, first = ch.basic_get("dlq", auto_ack=True)
    assert first == message_body(0, 100)
    assert props.headers["x-death"][0]["reason"] == "expired"
    assert props.headers["x-death"][0]["queue"] == "ttl.dl"
    rest = Drainer(srv.amqp_port, "dlq").take(N_DL - 1)
    assert [i for i, _r in rest] == list(range(1, N_DL))  # each once, in order
    amqp = status_amqp(srv)  # (this run's counts: what it dead-lettered after the kill)
    assert amqp["expired"] == amqp["dead_lettered"]


def test_a_priority_queue_expires_a_due_run_unread_below_its_live_levels(start_server: Any
                                                                         ) -> None:
    """A durable priority queue removes the due run of the level that is its head unread
    too; a higher level's live message is its head first (expiry happens at the head)."""
    srv = start_server()
    n = 20_000
    fill_then_kill(srv, "prio", n, {"x-max-priority": 3})  # (all of them at level 0)
    c = connect(srv)
    ch = c.channel()
    ch.confirm_delivery()
    ch.basic_publish("", "prio", b"high", pika.BasicProperties(delivery_mode=2, priority=2))
    assert ch.basic_get("prio", auto_ack=True)[2] == b"high"
    assert status_amqp(srv)["expired"] == 0  # (the run waited behind it)
    assert ch.basic_get("prio", auto_ack=True)[2] == b"first"  # the run is the head now
    wait_until(c, lambda: ch.queue_declare("prio", passive=True).method.message_count == 0)
    amqp = status_amqp(srv)
    assert amqp["expired"] == n and amqp["read_back_messages"] <= WINDOW
