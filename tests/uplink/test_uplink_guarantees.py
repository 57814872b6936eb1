"""The uplink never deletes what the upstream did not take (issue 13, item 5).

Real ``oxiedge serve`` processes, the session's real RabbitMQ and the module's Mosquitto:

* a publish RabbitMQ returns (Basic.Return: no queue for its routing key) stays in the
  outbox, survives a SIGKILL, is retried with back-off and arrives once a queue is bound;
* after a change of protocol, what can no longer be sent (an MQTT topic with a ``.`` has no
  routing key) is parked - kept, counted, shown - and sent when the uplink can again;
* ``uplink remove`` discards on purpose and says how many.

Each test publishes to its own exchange, so no other test's bindings can route its messages.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from .test_uplink_e2e import Local, delete_queues, mqtt_collect, unique, wait_log, wait_status


def _declare_exchange(rabbit: Any, tag: str) -> str:
    """A durable topic exchange of this test's own (what the AMQP uplink declares too)."""
    name = f"oxiedge.test.{tag}"
    conn = rabbit.connection()
    try:
        conn.channel().exchange_declare(name, "topic", durable=True)
    finally:
        conn.close()
    return name


def _dead_port() -> int:
    """A loopback port nothing listens on (bound and closed: connect is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _size_limit_applies(rabbit: Any, exchange: str) -> bool:
    """Whether a new channel refuses a 10 kB body now (max_message_size lowered at run time).

    RabbitMQ 3.x reads the setting for each new channel; 4.0.5 (Debian trixie) does not:
    there a 10 kB publish is confirmed after ``application:set_env``.
    """
    import pika.exceptions

    conn = rabbit.connection()
    try:
        channel = conn.channel()
        channel.confirm_delivery()
        channel.basic_publish(exchange, "size-probe", b"x" * 10_000)  # routed nowhere
        return False
    except pika.exceptions.ChannelClosedByBroker as exc:
        return exc.reply_code == 406
    finally:
        if conn.is_open:
            conn.close()


def test_returned_messages_stay_survive_sigkill_and_arrive_once_routable(
        rabbit: Any, start_server: Any) -> None:
    dev = unique("ret")
    exchange = _declare_exchange(rabbit, dev)
    srv = start_server("--device-id", dev)
    srv.cli("uplink", "add", "up1", rabbit.url(), "--out", "sensors/#", "--exchange", exchange)
    wait_status(srv, "up1", lambda s: s["state"] == "connected", "connected")
    batch = [(f"sensors/r{i % 2}", f"{dev}-{i}".encode()) for i in range(5)]
    with Local(srv.mqtt_port) as pub:
        pub.publish_all(batch)
    # Nothing is bound to the exchange: RabbitMQ returns each one, then acks it.
    st = wait_status(srv, "up1", lambda s: s["returned_waiting"] == 5, "5 returned")
    assert st["backlog_messages"] == 5 and st["confirmed"] == 0, st
    assert st["returned"] >= 5 and "returned by the upstream" in st["warning"], st
    assert "no queue for routing key 'sensors.r" in st["warning"], st
    wait_log(srv, "upstream returned message")
    # Retried with back-off: they come back again, nothing is lost meanwhile.
    st = wait_status(srv, "up1", lambda s: s["retried"] >= 5 and s["returned"] >= 10,
                     "retried and returned again", timeout=20)
    assert st["backlog_messages"] == 5, st
    srv.kill()  # the returned records are on disk, not only in memory
    srv.start()
    st = wait_status(srv, "up1", lambda s: s["returned_waiting"] == 5, "returned after restart")
    assert st["backlog_messages"] == 5, st
    queue = unique("sink")
    rabbit.declare_sink(queue, "sensors.#", exchange)
    try:
        wait_status(srv, "up1", lambda s: s["backlog_messages"] == 0 and s["inflight"] == 0,
                    "drained once a queue is bound", timeout=90)
        got = rabbit.drain(queue, expect=5, timeout=10)
        assert sorted(body for _, body, _ in got) == sorted(p for _, p in batch)
        st = wait_status(srv, "up1", lambda s: s["warning"] == "", "warning cleared")
        assert st["returned_waiting"] == 0 and st["confirmed"] == 5, st
    finally:
        delete_queues(rabbit, [queue])


def test_protocol_change_parks_what_cannot_be_sent_and_frees_it_again(
        rabbit: Any, mosquitto: Any, start_server: Any) -> None:
    dev = unique("park")
    exchange = _declare_exchange(rabbit, dev)
    queue = unique("sink")
    sub = mosquitto.subscriber("sensors/#", f"sub-{dev}")
    srv = start_server("--device-id", dev)
    try:
        # An MQTT uplink whose upstream is down: the messages wait in the outbox.
        srv.cli("uplink", "add", "up1", f"mqtt://127.0.0.1:{_dead_port()}", "--out",
                "sensors/#")
        dotted = ("sensors/v1.2/fw", f"{dev}-dotted".encode())  # fine in MQTT, no AMQP key
        plain = [("sensors/a", f"{dev}-a{i}".encode()) for i in range(3)]
        with Local(srv.mqtt_port) as pub:
            pub.publish_all([plain[0], dotted, plain[1], plain[2]])
        wait_status(srv, "up1", lambda s: s["backlog_messages"] == 4, "4 queued")
        # Now to RabbitMQ: the queued dotted topic has no routing key there.
        rabbit.declare_sink(queue, "sensors.#", exchange)
        srv.cli("uplink", "add", "up1", rabbit.url(), "--out", "sensors/#",
                "--exchange", exchange)
        st = wait_status(srv, "up1", lambda s: s["backlog_messages"] == 1 and s["parked"] == 1,
                         "the dotted one parked, the rest sent")
        assert st["confirmed"] == 3 and "parked" in st["warning"], st
        wait_log(srv, "cannot be sent as the uplink is defined now")
        got = rabbit.drain(queue, expect=3, timeout=10)
        assert [body for _, body, _ in got] == [p for _, p in plain]
        # Parked is kept on disk: a SIGKILL and the start-up check park it again.
        srv.kill()
        srv.start()
        st = wait_status(srv, "up1", lambda s: s["parked"] == 1, "parked after restart")
        assert st["backlog_messages"] == 1, st
        wait_log(srv, "cannot be sent as the uplink is defined at start-up")
        # Back to an MQTT upstream (a live one): the parked message can go, and does.
        srv.cli("uplink", "add", "up1", mosquitto.url(), "--out", "sensors/#")
        mqtt_collect(sub, {dotted[1]})
        st = wait_status(srv, "up1", lambda s: s["backlog_messages"] == 0 and s["parked"] == 0,
                         "the parked one sent")
        assert st["warning"] == "", st
    finally:
        sub.close()
        delete_queues(rabbit, [queue])


def test_remove_discards_on_purpose_and_says_how_many(start_server: Any) -> None:
    srv = start_server("--device-id", unique("rm"))
    srv.cli("uplink", "add", "up1", f"amqp://127.0.0.1:{_dead_port()}/", "--out", "s/#")
    with Local(srv.mqtt_port) as pub:
        pub.publish_all([("s/a", b"1"), ("s/b", b"2"), ("s/c", b"3")])
    wait_status(srv, "up1", lambda s: s["backlog_messages"] == 3, "3 queued")
    res = srv.cli("uplink", "remove", "up1")
    assert "3 unsent message(s) discarded" in res.stdout, res.stdout
    wait_log(srv, "uplink up1 removed (3 unsent message(s) discarded)")


def test_a_topic_the_upstream_refuses_is_parked_and_the_rest_flows(
        rabbit: Any, start_server: Any) -> None:
    """RabbitMQ closes the channel (403) over a publish whose routing key the user may not
    write: that topic's messages are parked, found by probing one message at a time, and
    everything else goes through (it used to wedge the uplink: resent first, refused again)."""
    dev = unique("acl")
    exchange = _declare_exchange(rabbit, dev)
    user, password = f"u-{dev}", "pw"
    rabbit.ctl("add_user", user, password)
    queue = unique("sink")
    try:
        rabbit.ctl("set_permissions", "-p", "/", user, ".*", ".*", ".*")
        rabbit.ctl("set_topic_permissions", "-p", "/", user, exchange, r"^sensors\.ok",
                   r"^sensors\.ok")
        rabbit.declare_sink(queue, "sensors.#", exchange)
        srv = start_server("--device-id", dev)
        srv.cli("uplink", "add", "up1", f"amqp://127.0.0.1:{_dead_port()}/", "--out",
                "sensors/#", "--exchange", exchange)
        ok = [("sensors/ok", f"{dev}-ok{i}".encode()) for i in range(4)]
        secret = [("sensors/secret", f"{dev}-secret{i}".encode()) for i in range(2)]
        with Local(srv.mqtt_port) as pub:  # queued while the upstream is unreachable
            pub.publish_all([ok[0], secret[0], ok[1], ok[2], secret[1], ok[3]])
        wait_status(srv, "up1", lambda s: s["backlog_messages"] == 6, "6 queued")
        # All six go out in one window: the refusal does not say which one it was.
        srv.cli("uplink", "add", "up1", rabbit.url(user=user, password=password), "--out",
                "sensors/#", "--exchange", exchange)
        st = wait_status(srv, "up1", lambda s: s["backlog_messages"] == 2 and s["parked"] == 2,
                         "the refused topic parked, the rest sent", timeout=60)
        assert "access refused by upstream" in st["warning"], st
        assert "sensors.secret" in st["warning"], st
        wait_log(srv, "sending one message at a time to find it")
        got = rabbit.drain(queue, expect=4, timeout=10)
        assert {body for _, body, _ in got} == {p for _, p in ok}  # duplicates allowed
        # New messages of the refused topic are parked at once, without another refusal.
        reconnects = st["reconnects"]
        with Local(srv.mqtt_port) as pub:
            pub.publish_all([("sensors/secret", f"{dev}-secret2".encode()),
                             ("sensors/ok", f"{dev}-ok4".encode())])
        st = wait_status(srv, "up1", lambda s: s["parked"] == 3 and s["backlog_messages"] == 3,
                         "the new secret parked")
        assert st["reconnects"] == reconnects, st
        # The upstream allows it now; changing the uplink re-checks what is parked.
        rabbit.ctl("set_topic_permissions", "-p", "/", user, exchange, ".*", ".*")
        srv.cli("uplink", "add", "up1", rabbit.url(user=user, password=password), "--out",
                "sensors/#", "--exchange", exchange, "--heartbeat", "20")
        wait_status(srv, "up1", lambda s: s["backlog_messages"] == 0 and s["parked"] == 0,
                    "the parked ones sent")
        got += rabbit.drain(queue, expect=4, timeout=10)
        bodies = {body for _, body, _ in got}
        assert {p for _, p in secret} | {f"{dev}-secret2".encode()} <= bodies
    finally:
        delete_queues(rabbit, [queue])
        rabbit.ctl("delete_user", user)


def test_a_message_the_upstream_refuses_parks_only_that_message(
        rabbit: Any, start_server: Any) -> None:
    """406 (a body over RabbitMQ's ``max_message_size``) refuses the message, not its
    topic: the big one is parked, the small ones of the same topic go."""
    dev = unique("big")
    exchange = _declare_exchange(rabbit, dev)
    queue = unique("sink")
    rabbit.declare_sink(queue, "sensors.#", exchange)
    # Read by each new channel: only the uplink's connection below sees the low limit.
    before = rabbit.ctl("eval", "application:get_env(rabbit, max_message_size).").strip()
    rabbit.ctl("eval", "application:set_env(rabbit, max_message_size, 4096).")
    try:
        if not _size_limit_applies(rabbit, exchange):
            pytest.skip("this RabbitMQ does not apply a max_message_size set at run time "
                        "(4.0.5: a 10 kB body is confirmed); nothing refuses the message")
        srv = start_server("--device-id", dev)
        srv.cli("uplink", "add", "up1", f"amqp://127.0.0.1:{_dead_port()}/", "--out",
                "sensors/#", "--exchange", exchange)
        small = [("sensors/a", f"{dev}-small{i}".encode()) for i in range(3)]
        with Local(srv.mqtt_port) as pub:
            pub.publish_all([small[0], ("sensors/a", b"x" * 10_000), small[1], small[2]])
        wait_status(srv, "up1", lambda s: s["backlog_messages"] == 4, "4 queued")
        srv.cli("uplink", "add", "up1", rabbit.url(), "--out", "sensors/#",
                "--exchange", exchange)
        st = wait_status(srv, "up1", lambda s: s["backlog_messages"] == 1 and s["parked"] == 1,
                         "the big one parked, the small ones sent", timeout=60)
        assert "406" in st["warning"], st
        # Removing the uplink discards it on purpose, and says what it discards.
        res = srv.cli("uplink", "remove", "up1")
        assert "1 unsent message(s) discarded, of them 1 parked" in res.stdout, res.stdout
    finally:
        if before.startswith("{ok,"):
            rabbit.ctl("eval", f"application:set_env(rabbit, max_message_size, "
                               f"{before[4:-1]}).")
        else:
            rabbit.ctl("eval", "application:unset_env(rabbit, max_message_size).")
    try:
        got = rabbit.drain(queue, expect=3, timeout=10)
        assert {body for _, body, _ in got} == {p for _, p in small}
    finally:
        delete_queues(rabbit, [queue])
