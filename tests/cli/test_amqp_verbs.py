"""The AMQP verbs (``oxiedge queue|exchange|binding|connection ...``) against a real server:
good input, bad input, a missing object; what they declare is what a client sees and what
survives a restart."""

from __future__ import annotations

import json
import threading

import pika
import pytest

from tests.conftest import ServerProcess


def _rows(res: object) -> list[dict[str, object]]:
    return [json.loads(line) for line in res.stdout.splitlines()]  # type: ignore[attr-defined]


def _refused(server: ServerProcess, *args: str, code: int = 1) -> str:
    res = server.cli(*args, check=False)
    assert res.returncode == code, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    return " ".join(res.stderr.split())  # (rich wraps long lines)


def _amqp(server: ServerProcess) -> pika.BlockingConnection:
    assert server.amqp_port is not None
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", server.amqp_port, connection_attempts=3, retry_delay=0.2))


def test_declare_bind_route_purge_delete_and_restart(server: ServerProcess) -> None:
    out = server.cli("queue", "declare", "jobs", "--arg", "x-queue-type=quorum",
                     "--arg", "x-max-length=1000", "--arg", "x-dead-letter-exchange=dlx")
    assert "queue 'jobs' declared (durable)" in out.stdout
    (row,) = [r for r in _rows(server.cli("queues", "--json")) if r["name"] == "jobs"]
    # Typed as a client's field table: the integer is an integer, the type applies.
    assert row["arguments"] == {"x-queue-type": "quorum", "x-max-length": 1000,
                                "x-dead-letter-exchange": "dlx"}
    assert row["type"] == "quorum" and row["limit"] == 1000 and row["durable"] is True
    again = server.cli("queue", "declare", "jobs", "--arg", "x-queue-type=quorum",
                       "--arg", "x-max-length=1000", "--arg", "x-dead-letter-exchange=dlx")
    assert "already declared" in again.stdout
    # The broker's own checks, in RabbitMQ's words.
    assert "inequivalent arguments for queue 'jobs'" in _refused(
        server, "queue", "declare", "jobs", "--arg", "x-max-length=5")
    assert "invalid arg 'x-max-length'" in _refused(
        server, "queue", "declare", "other", "--arg", "x-max-length=lots")
    assert "reserved prefix 'amq.*'" in _refused(server, "queue", "declare", "amq.mine")
    assert "expected KEY=VALUE" in _refused(server, "queue", "declare", "q", "--arg", "oops",
                                            code=2)
    assert "not implemented" in _refused(server, "exchange", "declare", "ex", "-t", "bogus")

    server.cli("exchange", "declare", "events", "--type", "topic")
    server.cli("binding", "add", "events", "jobs", "--routing-key", "job.#")
    assert "already bound" in server.cli("binding", "add", "events", "jobs", "-k",
                                         "job.#").stdout
    assert "no queue 'ghost'" in _refused(server, "binding", "add", "events", "ghost")
    assert "no exchange 'nowhere'" in _refused(server, "binding", "add", "nowhere", "jobs")
    with _amqp(server) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        for i in range(3):  # routed through the binding the CLI made
            ch.basic_publish("events", "job.print", f"m{i}".encode(),
                             pika.BasicProperties(delivery_mode=2))
    assert "not empty" in _refused(server, "queue", "delete", "jobs", "--if-empty")
    assert json.loads(server.cli("queue", "purge", "jobs", "--json").stdout) == {
        "name": "jobs", "messages": 3}
    assert "no queue 'ghost'" in _refused(server, "queue", "purge", "ghost")

    server.restart()  # durable records, as a client's declarations write them
    assert any(r["name"] == "jobs" and r["limit"] == 1000
               for r in _rows(server.cli("queues", "--json")))
    assert {"exchange": "events", "queue": "jobs", "routing_key": "job.#",
            "durable": True} in _rows(server.cli("bindings", "--json"))
    server.cli("binding", "remove", "events", "jobs", "-k", "job.#")
    assert "no binding from exchange 'events'" in _refused(
        server, "binding", "remove", "events", "jobs", "-k", "job.#")
    server.cli("exchange", "delete", "events")
    assert "no exchange 'events'" in _refused(server, "exchange", "delete", "events")
    assert "not permitted" in _refused(server, "exchange", "delete", "amq.topic")
    assert "deleted with 0 ready messages" in server.cli("queue", "delete", "jobs").stdout
    assert "no queue 'jobs'" in _refused(server, "queue", "delete", "jobs")
    server.restart()
    assert not any(r["name"] == "jobs" for r in _rows(server.cli("queues", "--json")))


def test_connections_channels_consumers_and_close(server: ServerProcess) -> None:
    server.cli("queue", "declare", "work")
    conn = _amqp(server)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=5)
    tag = ch.basic_consume("work", lambda *a: None)
    (row,) = _rows(server.cli("connections", "--json"))
    assert row["user"] == "guest" and row["state"] == "running"
    assert row["channels"] == 1 and row["consumers"] == 1
    (crow,) = _rows(server.cli("channels", "--json"))
    assert crow["connection"] == row["name"] and crow["consumers"] == 1
    (consumer,) = _rows(server.cli("consumers", "--json"))
    assert consumer["queue"] == "work" and consumer["consumer_tag"] == tag
    assert consumer["ack_required"] is True and consumer["prefetch"] == 5
    assert "in use" in _refused(server, "queue", "delete", "work", "--if-unused")

    closed: list[BaseException] = []

    def pump() -> None:
        try:
            conn.process_data_events(time_limit=10)
        except pika.exceptions.ConnectionClosedByBroker as exc:
            closed.append(exc)

    reader = threading.Thread(target=pump)
    reader.start()
    server.cli("connection", "close", str(row["name"]), "--reason", "maintenance")
    reader.join(15)
    assert closed, "the client was not told"
    exc = closed[0]
    assert isinstance(exc, pika.exceptions.ConnectionClosedByBroker)
    assert exc.reply_code == 320 and "maintenance" in exc.reply_text
    assert _rows(server.cli("connections", "--json")) == []
    assert "no AMQP connection" in _refused(server, "connection", "close", str(row["name"]))


def test_blocking_state_during_an_alarm(server: ServerProcess) -> None:
    with _amqp(server):
        server.cli("limits", "--disk-free-limit", "1000TB")
        try:
            (row,) = _rows(server.cli("connections", "--json"))
            assert row["state"] == "blocking"  # (it has not published into the alarm)
        finally:
            server.cli("limits", "--disk-free-limit", "1MB")


@pytest.mark.parametrize("verb", [("channels",), ("connections",),
                                  ("exchange", "declare", "x")])
def test_without_a_server(tmp_path: object, verb: tuple[str, ...]) -> None:
    from tests.conftest import run_cli

    res = run_cli(tmp_path, *verb)  # type: ignore[arg-type]
    assert res.returncode == 1 and "start it with `oxiedge serve`" in " ".join(res.stderr.split())


def test_delete_cancels_consumers_and_headers_bindings(server: ServerProcess) -> None:
    server.cli("queue", "declare", "lights", "--transient")
    server.cli("exchange", "declare", "match", "-t", "headers", "--transient")
    server.cli("binding", "add", "match", "lights", "--arg", "x-match=all",
               "--arg", "color=red", "--arg", "level=3")
    assert "x-match" in _refused(server, "binding", "add", "match", "lights",
                                 "--arg", "x-match=some")  # the broker's 406 check
    with _amqp(server) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("match", "", b"on", pika.BasicProperties(
            headers={"color": "red", "level": 3}))
        ch.basic_publish("match", "", b"off", pika.BasicProperties(
            headers={"color": "red", "level": "3"}))  # a string is not the integer 3
        (row,) = [r for r in _rows(server.cli("queues", "--json")) if r["name"] == "lights"]
        assert row["ready"] == 1 and row["durable"] is False
        cancelled: list[str] = []
        ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
        tag = ch.basic_consume("lights", lambda c, m, p, b: c.basic_ack(m.delivery_tag))
        conn.process_data_events(time_limit=0.5)
        server.cli("binding", "remove", "match", "lights", "--arg", "x-match=all",
                   "--arg", "color=red", "--arg", "level=3")
        assert "deleted" in server.cli("queue", "delete", "lights").stdout
        deadline = 50
        while not cancelled and deadline:
            conn.process_data_events(time_limit=0.1)
            deadline -= 1
        assert cancelled == [tag]  # basic.cancel, as for a client's queue.delete


def test_connection_rates(server: ServerProcess) -> None:
    server.cli("queue", "declare", "sink")
    stop = threading.Event()

    def publish() -> None:
        conn = _amqp(server)
        ch = conn.channel()
        while not stop.is_set():
            ch.basic_publish("", "sink", b"x")
            conn.process_data_events(time_limit=0.01)
        conn.close()

    worker = threading.Thread(target=publish)
    worker.start()
    try:
        (row,) = _rows(server.cli("connections", "--interval", "0.5", "--json"))
        (plain,) = _rows(server.cli("connections", "--interval", "0", "--json"))
    finally:
        stop.set()
        worker.join(10)
    assert row["published"] > 0 and row["publish_rate"] > 0 and row["deliver_rate"] == 0
    keys = list(row)
    assert keys.index("publish_rate") == keys.index("published") + 1
    assert "publish_rate" not in plain


def test_with_rates() -> None:
    from oxiedge.cli.amqp import with_rates

    row = {"name": "a", "published": 30, "delivered": 5}
    assert with_rates(row, {"published": 10, "delivered": 5}, 2.0) == {
        "name": "a", "published": 30, "publish_rate": 10.0, "delivered": 5,
        "deliver_rate": 0.0}
    assert with_rates(row, None, 2.0)["publish_rate"] is None  # new since the first look


def test_names_that_look_like_markup_print_as_they_are(server: ServerProcess) -> None:
    """A queue may be named anything a client sends ("[/]" is rich's markup): listings and
    errors print it literally, on one line, and never crash."""
    server.cli("queue", "declare", "[/]odd [red]name")
    listing = server.cli("queues")
    assert "Traceback" not in listing.stderr
    assert "[/]odd" in listing.stdout and "[red]" in listing.stdout  # (not eaten as markup)
    assert _refused(server, "queue", "delete", "[/]gone") == (
        "error: NOT_FOUND - no queue '[/]gone' in vhost '/'")
