"""The uplink's AMQP client handshake without a socket: server frames in, exact frames out.

Each server method is encoded to its wire bytes and parsed back with the link's own
``UpstreamFrames`` (what the link does with bytes from the socket); what the handshake
answers is compared byte for byte with the frames it must be.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiedge.amqp import spec
from oxiedge.amqp.codec import Command, FrameParser, encode_method
from oxiedge.uplink.amqp_client import UpstreamFailure, UpstreamFrames
from oxiedge.uplink.amqp_handshake import (
    ClientHandshake,
    ClientSetup,
    client_properties,
    negotiate,
    tune_ok,
)

START = spec.ConnectionStart(0, 9, {"product": b"RabbitMQ", "version": b"3.12.1"},
                             b"AMQPLAIN PLAIN", b"en_US")
TUNE = spec.ConnectionTune(2047, 131072, 60)


def setup(**kw: object) -> ClientSetup:
    values: dict[str, object] = {"username": "dev", "password": "s3cret",
                                 "connection_name": "oxiedge d1 uplink up", "vhost": "site"}
    values.update(kw)
    return ClientSetup(**values)  # type: ignore[arg-type]


def wire(channel: int, method: spec.Method) -> Command:
    """``method`` as the upstream sends it: encoded, then parsed as the link parses it."""
    frames = UpstreamFrames()
    frames.feed(encode_method(channel, method))
    cmd = frames.next_event()
    assert isinstance(cmd, Command)
    return cmd


def sent(data: bytes) -> list[tuple[int, spec.Method]]:
    """The frames the handshake wrote, decoded (channel, method)."""
    parser = FrameParser(131072, expect_header=False)
    parser.feed(data)
    out = []
    while (cmd := parser.next_event()) is not None:
        assert isinstance(cmd, Command)
        out.append((cmd.channel, cmd.method))
    return out


def past_tune(hs: ClientHandshake) -> bytes:
    """Start and tune answered; returns what the tune was answered with."""
    hs.receive(wire(0, START))
    answer = hs.receive(wire(0, TUNE))
    assert answer is not None
    return answer


# ----------------------------------------------------------------- exact bytes
def test_opens_with_the_protocol_header() -> None:
    assert ClientHandshake(setup()).start() == b"AMQP\x00\x00\x09\x01"


def test_start_is_answered_with_plain_credentials_and_our_capabilities() -> None:
    hs = ClientHandshake(setup())
    answer = hs.receive(wire(0, START))
    assert answer == encode_method(0, spec.ConnectionStartOk(
        client_properties("oxiedge d1 uplink up"), "PLAIN", b"\0dev\0s3cret", "en_US"))
    assert hs.waiting_for == "connection.tune" and not hs.done


def test_tune_is_answered_with_tune_ok_and_connection_open_in_one_write() -> None:
    hs = ClientHandshake(setup(heartbeat=30))
    hs.receive(wire(0, START))
    answer = hs.receive(wire(0, TUNE))
    assert answer == (encode_method(0, spec.ConnectionTuneOk(2, 131072, 30))
                      + encode_method(0, spec.ConnectionOpen("site")))
    assert (hs.heartbeat, hs.frame_max) == (30, 131072)
    assert hs.waiting_for == "connection.open-ok"


def test_each_reply_sends_the_next_request_and_the_last_ends_it() -> None:
    hs = ClientHandshake(setup())
    past_tune(hs)
    assert hs.receive(wire(0, spec.ConnectionOpenOk())) == encode_method(1, spec.ChannelOpen())
    assert hs.receive(wire(1, spec.ChannelOpenOk())) == encode_method(1, spec.ConfirmSelect())
    assert hs.receive(wire(1, spec.ConfirmSelectOk())) == b""
    assert hs.done and hs.waiting_for == ""
    assert hs.summary() == "RabbitMQ 3.12.1, heartbeat 30 s, frame_max 131072"


# ----------------------------------------------------------------- the plan, as a table
PLANS = [
    ("forwarding only", {}, [
        (0, "connection.open"), (1, "channel.open"), (1, "confirm.select")]),
    ("an exchange of its own is declared", {"exchange": "telemetry"}, [
        (0, "connection.open"), (1, "channel.open"), (1, "confirm.select"),
        (1, "exchange.declare")]),
    ("commands: queue, bindings, unbindings, qos, consumer on channel 2",
     {"queue": "oxiedge.d1.up", "bind_keys": ("d1.cmd.#", "all.*"),
      "unbind_keys": ("d1.old",)}, [
        (0, "connection.open"), (1, "channel.open"), (1, "confirm.select"),
        (2, "channel.open"), (2, "queue.declare"), (2, "queue.bind"), (2, "queue.bind"),
        (2, "queue.unbind"), (2, "basic.qos"), (2, "basic.consume")]),
    ("commands dropped: the orphaned queue is deleted",
     {"queue": "oxiedge.d1.up", "unbind_keys": ("d1.cmd.#",)}, [
        (0, "connection.open"), (1, "channel.open"), (1, "confirm.select"),
        (2, "channel.open"), (2, "queue.delete")]),
]


@pytest.mark.parametrize(("why", "kw", "requests"), PLANS, ids=[p[0] for p in PLANS])
def test_requests_after_tune(why: str, kw: dict[str, object],
                             requests: list[tuple[int, str]]) -> None:
    hs = ClientHandshake(setup(**kw))
    answer = past_tune(hs)
    seen = [(sent(answer)[-1][0], sent(answer)[-1][1].NAME)]
    replies = {"connection.open": spec.ConnectionOpenOk, "channel.open": spec.ChannelOpenOk,
               "confirm.select": spec.ConfirmSelectOk,
               "exchange.declare": spec.ExchangeDeclareOk,
               "queue.declare": spec.QueueDeclareOk, "queue.bind": spec.QueueBindOk,
               "queue.unbind": spec.QueueUnbindOk, "queue.delete": spec.QueueDeleteOk,
               "basic.qos": spec.BasicQosOk, "basic.consume": spec.BasicConsumeOk}
    while True:
        channel, name = seen[-1]
        answer = hs.receive(wire(channel, replies[name]()))
        assert answer is not None
        if not answer:
            break
        ((channel, method),) = sent(answer)
        seen.append((channel, method.NAME))
    assert seen == requests and hs.done


def test_command_queue_details() -> None:
    hs = ClientHandshake(setup(queue="oxiedge.d1.up", queue_type="quorum", prefetch=100_000,
                               exchange="telemetry", bind_keys=("d1.cmd.*",)))
    past_tune(hs)
    hs.receive(wire(0, spec.ConnectionOpenOk()))
    hs.receive(wire(1, spec.ChannelOpenOk()))
    hs.receive(wire(1, spec.ConfirmSelectOk()))
    assert hs.receive(wire(1, spec.ExchangeDeclareOk())) == encode_method(2, spec.ChannelOpen())
    assert hs.receive(wire(2, spec.ChannelOpenOk())) == encode_method(2, spec.QueueDeclare(
        0, "oxiedge.d1.up", durable=True, arguments={"x-queue-type": "quorum"}))
    assert hs.receive(wire(2, spec.QueueDeclareOk("oxiedge.d1.up"))) == encode_method(
        2, spec.QueueBind(0, "oxiedge.d1.up", "telemetry", "d1.cmd.*", arguments={}))
    assert hs.receive(wire(2, spec.QueueBindOk())) == encode_method(
        2, spec.BasicQos(0, 0xFFFF))  # prefetch capped to what basic.qos can say
    assert hs.receive(wire(2, spec.BasicQosOk())) == encode_method(
        2, spec.BasicConsume(0, "oxiedge.d1.up", "", no_ack=False, arguments={}))
    assert hs.receive(wire(2, spec.BasicConsumeOk("ctag"))) == b"" and hs.done


# ----------------------------------------------------------------- refusals and strangers
def test_a_refused_command_channel_ends_the_handshake_and_forwarding_goes_on() -> None:
    hs = ClientHandshake(setup(queue="q", bind_keys=("a.#",)))
    past_tune(hs)
    hs.receive(wire(0, spec.ConnectionOpenOk()))
    hs.receive(wire(1, spec.ChannelOpenOk()))
    hs.receive(wire(1, spec.ConfirmSelectOk()))
    hs.receive(wire(2, spec.ChannelOpenOk()))
    close = spec.ChannelClose(406, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type'",
                              spec.QueueDeclare.CLASS_ID, spec.QueueDeclare.METHOD_ID)
    assert hs.receive(wire(2, close)) == encode_method(2, spec.ChannelCloseOk())
    assert hs.done
    assert hs.inbound_refused == ("upstream closed the channel: 406 PRECONDITION_FAILED - "
                                  "inequivalent arg 'x-queue-type' (after queue.declare)")
    assert hs.summary().endswith("; commands (--in) unavailable: " + hs.inbound_refused)


@pytest.mark.parametrize(("channel", "method"), [
    (0, spec.ConnectionClose(403, "ACCESS_REFUSED", 10, 40)),  # the link answers, fails
    (0, spec.ConnectionBlocked("low on disk")),                  # the link pauses
    (1, spec.ChannelFlow(False)),
    (1, spec.ChannelClose(404, "NOT_FOUND", 40, 10)),            # not the command channel
    (1, spec.ConnectionOpenOk()),                                # the right reply, wrong channel
    (0, spec.ConnectionTune(0, 0, 0)),                           # a second tune
])
def test_what_is_not_the_handshakes_is_left_to_the_link(channel: int,
                                                        method: spec.Method) -> None:
    hs = ClientHandshake(setup())
    past_tune(hs)
    assert hs.receive(wire(channel, method)) is None
    assert hs.waiting_for == "connection.open-ok"  # unchanged


def test_before_tune_only_tune_is_the_handshakes() -> None:
    hs = ClientHandshake(setup())
    hs.receive(wire(0, START))
    assert hs.receive(wire(0, spec.ConnectionClose(403, "ACCESS_REFUSED", 10, 11))) is None
    assert hs.waiting_for == "connection.tune"


def test_after_the_end_nothing_is_the_handshakes() -> None:
    hs = ClientHandshake(setup())
    past_tune(hs)
    for channel, method in [(0, spec.ConnectionOpenOk()), (1, spec.ChannelOpenOk()),
                            (1, spec.ConfirmSelectOk())]:
        hs.receive(wire(channel, method))
    assert hs.done and hs.receive(wire(1, spec.ConfirmSelectOk())) is None


@pytest.mark.parametrize(("first", "reason"), [
    (spec.ConnectionTune(0, 0, 0), "expected connection.start, got connection.tune"),
    (spec.ConnectionStart(8, 0, {}, b"PLAIN", b"en_US"),
     "upstream speaks AMQP 8-0, not 0-9-1"),
    (spec.ConnectionStart(0, 9, {}, b"EXTERNAL AMQPLAIN", b"en_US"),
     "upstream offers no PLAIN login (only EXTERNAL AMQPLAIN)"),
])
def test_an_upstream_we_cannot_speak_to_fails(first: spec.Method, reason: str) -> None:
    with pytest.raises(UpstreamFailure, match=f"^{re.escape(reason)}$"):
        ClientHandshake(setup()).receive(wire(0, first))


def test_what_a_closed_connection_means_at_each_step() -> None:
    hs = ClientHandshake(setup())
    assert "before connection.start (not an AMQP 0-9-1 server?)" in str(hs.eof_reason())
    hs.receive(wire(0, START))
    assert hs.eof_reason() == "access refused: connection closed after login as 'dev'"
    hs.receive(wire(0, TUNE))
    assert hs.eof_reason() is None  # plainly "connection closed by upstream"


# ----------------------------------------------------------------- negotiation
def test_tune_negotiation_follows_rabbitmq_clients() -> None:
    assert negotiate(30, 60) == 30 and negotiate(0, 60) == 60 and negotiate(30, 0) == 30
    ok = tune_ok(spec.ConnectionTune(2047, 131072, 60), heartbeat=1.5, frame_max=131072)
    assert (ok.channel_max, ok.frame_max, ok.heartbeat) == (2, 131072, 2)  # publishes + commands
    ok = tune_ok(spec.ConnectionTune(0, 0, 0), heartbeat=0)
    assert ok.heartbeat == 0 and ok.frame_max == 131072
    assert tune_ok(spec.ConnectionTune(0, 1024, 0), heartbeat=5).frame_max == 4096


def test_a_lower_frame_max_and_no_heartbeat_are_taken_from_the_upstream() -> None:
    hs = ClientHandshake(setup(heartbeat=0))
    hs.receive(wire(0, START))
    answer = hs.receive(wire(0, spec.ConnectionTune(0, 8192, 0)))
    assert answer is not None
    assert sent(answer)[0] == (0, spec.ConnectionTuneOk(2, 8192, 0))
    assert (hs.heartbeat, hs.frame_max) == (0, 8192)


# ----------------------------------------------------------------- anything at all
STRANGERS = st.sampled_from([
    spec.ConnectionStart(0, 9, {}, b"PLAIN", b"en_US"), spec.ConnectionTune(0, 4096, 5),
    spec.ConnectionOpenOk(), spec.ChannelOpenOk(), spec.ConfirmSelectOk(),
    spec.ChannelClose(403, "no", 50, 10), spec.ConnectionClose(320, "bye", 0, 0),
    spec.ConnectionBlocked("x"), spec.QueueDeclareOk("q"), spec.BasicConsumeOk("t")])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), STRANGERS), max_size=20))
def test_any_command_order_answers_or_fails_cleanly(script: list[tuple[int, spec.Method]]
                                                   ) -> None:
    """Whatever the upstream sends in whatever order: bytes, None or UpstreamFailure."""
    hs = ClientHandshake(setup(queue="q", bind_keys=("a.#",)))
    for channel, method in script:
        try:
            answer = hs.receive(wire(channel, method))
        except UpstreamFailure:
            return
        assert answer is None or isinstance(answer, bytes)
