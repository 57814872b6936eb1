"""Interop with pika's callback-style SelectConnection: confirms, consume, ack."""

from __future__ import annotations

from typing import Any

import pika

from tests.amqp.conftest import params

N = 200


def test_select_connection_confirms_and_consumes(server: Any) -> None:
    state: dict[str, Any] = {"acked": set(), "nacked": 0, "received": [], "error": None,
                             "returned": 0, "next": 1}

    def on_open(conn: Any) -> None:
        conn.channel(on_open_callback=on_channel)

    def on_channel(ch: Any) -> None:
        state["ch"] = ch
        ch.add_on_return_callback(lambda *a: state.__setitem__("returned",
                                                               state["returned"] + 1))
        ch.confirm_delivery(on_confirm, callback=lambda _f: ch.queue_declare(
            "sel", durable=True, callback=on_declared))

    def on_confirm(frame: Any) -> None:
        m = frame.method
        tags = range(max(state["acked"], default=0) + 1, m.delivery_tag + 1) if m.multiple \
            else [m.delivery_tag]
        if isinstance(m, pika.spec.Basic.Ack):
            state["acked"].update(tags)
        else:
            state["nacked"] += 1
        if len(state["acked"]) == N + 1:  # + the unroutable mandatory one
            ch = state["ch"]
            ch.basic_qos(prefetch_count=10,
                         callback=lambda _f: ch.basic_consume("sel", on_message))

    def on_declared(_frame: Any) -> None:
        ch = state["ch"]
        for i in range(N):
            ch.basic_publish("", "sel", b"m%d" % i,
                             pika.BasicProperties(delivery_mode=2, correlation_id=str(i)))
        ch.basic_publish("amq.direct", "nobody", b"x", mandatory=True)

    def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
        state["received"].append((body, props.correlation_id))
        if len(state["received"]) % 5 == 0:  # multiple-ack in steps below the prefetch
            ch.basic_ack(method.delivery_tag, multiple=True)
        if len(state["received"]) == N:
            ch.queue_declare("sel", passive=True, callback=lambda f: finish(f))

    def finish(frame: Any) -> None:
        state["left"] = frame.method.message_count
        state["conn"].close()

    def on_error(_conn: Any, err: Any) -> None:
        state["error"] = err
        state["conn"].ioloop.stop()

    conn = pika.SelectConnection(params(server.amqp_port), on_open_callback=on_open,
                                 on_open_error_callback=on_error,
                                 on_close_callback=lambda c, r: c.ioloop.stop())
    state["conn"] = conn
    conn.ioloop.call_later(20, conn.ioloop.stop)  # a hang fails instead of blocking
    conn.ioloop.start()
    assert state["error"] is None
    assert state["acked"] == set(range(1, N + 2)) and state["nacked"] == 0
    assert state["returned"] == 1
    assert state["received"] == [(b"m%d" % i, str(i)) for i in range(N)]
    assert state["left"] == 0
