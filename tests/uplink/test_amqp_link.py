"""The AMQP uplink link against a real RabbitMQ node (and, for failures, tiny loopback peers).

``RecordingIO`` below is a real (in-memory) implementation of the manager's side of a link:
an outbox list it hands out, the confirms and inbound deliveries it records. Everything on
the wire is real: RabbitMQ from Debian's package, TLS with a trustme CA, a TCP forwarder
that can freeze, and raw sockets that answer garbage.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiedge.amqp import spec
from oxiedge.amqp.codec import Command, FrameParser, encode_method
from oxiedge.uplink.amqp_client import (
    ConfirmTracker,
    UpstreamFailure,
    UpstreamFrames,
    publish_bytes,
)
from oxiedge.uplink.amqp_link import returned_seq, run_amqp_link
from oxiedge.uplink.link import (
    Endpoint,
    LinkError,
    LinkOptions,
    OutMessage,
    PublishRefused,
    parse_endpoint,
)

from .proxy import Proxy
from .rabbit import Rabbit


# ----------------------------------------------------------------------------- helpers
class RecordingIO:
    """The manager's side of one link, in memory: an outbox, confirms, deliveries."""

    def __init__(self, deliver: str = "ok") -> None:
        self.pending: list[OutMessage] = []
        self.confirmed_seqs: list[int] = []
        self.returns: list[tuple[int, str]] = []  # (seq, why) given back by the upstream
        self.parked: list[tuple[int, str]] = []
        self.delivered: list[tuple[str, bytes]] = []
        self.deliver_calls = 0
        self.deliver_mode = deliver  # ok | hang | crash | refuse
        self.up_calls: list[tuple[Endpoint, str]] = []
        self.changed = trio.Event()
        self._seq = 0

    def _poke(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def add(self, topic: str, payload: bytes) -> int:
        self._seq += 1
        self.pending.append(OutMessage(self._seq, topic, payload))
        self._poke()
        return self._seq

    async def take(self, limit: int) -> list[OutMessage]:
        while not self.pending:
            await self.changed.wait()
        out, self.pending = self.pending[:limit], self.pending[limit:]
        return out

    def confirmed(self, seq: int) -> None:
        self.confirmed_seqs.append(seq)
        self._poke()

    async def deliver(self, topic: str, payload: bytes, props: Any = None) -> None:
        self.deliver_calls += 1
        self._poke()
        if self.deliver_mode == "hang":
            await trio.sleep_forever()
        if self.deliver_mode == "crash":
            raise RuntimeError("local store exploded")
        if self.deliver_mode == "refuse":
            raise LinkError(f"cannot publish locally on {topic!r}")
        self.delivered.append((topic, payload))
        self._poke()

    def up(self, endpoint: Endpoint, detail: str = "") -> None:
        self.up_calls.append((endpoint, detail))
        self._poke()

    def returned(self, seq: int, reason: str) -> None:
        self.returns.append((seq, reason))
        self._poke()

    def park(self, seq: int, reason: str) -> None:
        self.parked.append((seq, reason))
        self._poke()

    async def until(self, cond: Callable[[], bool], timeout: float = 10.0) -> None:
        with trio.fail_after(timeout):
            while not cond():
                await self.changed.wait()


def opts(**kw: Any) -> LinkOptions:
    kw.setdefault("name", "up")
    kw.setdefault("device_id", "dev-" + uuid.uuid4().hex[:8])
    kw.setdefault("connect_timeout", 5.0)
    return LinkOptions(**kw)


def token() -> str:
    return "t" + uuid.uuid4().hex[:10]


async def sync(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """A blocking pika helper, off the trio thread."""
    return await trio.to_thread.run_sync(lambda: fn(*args, **kw))


async def fails_with(endpoint: Endpoint, options: LinkOptions, io: RecordingIO,
                     timeout: float = 10.0) -> LinkError:
    with trio.fail_after(timeout), pytest.raises(LinkError) as info:
        await run_amqp_link(endpoint, options, io)
    return info.value


class RunningLink:
    """``run_amqp_link`` in a background task; ``.error`` is what it raised."""

    def __init__(self, nursery: trio.Nursery, endpoint: Endpoint, options: LinkOptions,
                 io: RecordingIO) -> None:
        self.scope = trio.CancelScope()
        self.error: BaseException | None = None
        self.done = trio.Event()
        nursery.start_soon(self._run, endpoint, options, io)

    async def _run(self, endpoint: Endpoint, options: LinkOptions, io: RecordingIO) -> None:
        try:
            with self.scope:
                await run_amqp_link(endpoint, options, io)
        except Exception as exc:
            self.error = exc
        finally:
            self.done.set()

    async def stop(self) -> None:
        self.scope.cancel()
        with trio.fail_after(5):
            await self.done.wait()


async def one_shot_server(nursery: trio.Nursery, answer: bytes | None) -> int:
    """A listener that reads the client's protocol header, writes ``answer`` (``None``:
    nothing, ever) and keeps the socket open; returns its port."""

    async def handle(stream: trio.SocketStream) -> None:
        async with stream:
            await stream.receive_some(8)
            if answer is not None:
                await stream.send_all(answer)
            await trio.sleep_forever()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    nursery.start_soon(trio.serve_listeners, handle, listeners)
    return int(listeners[0].socket.getsockname()[1])


# ----------------------------------------------------------------------------- sans-IO
def test_client_module_does_not_import_trio() -> None:
    code = ("import sys, oxiedge.uplink.amqp_client; "
            "sys.exit(1 if 'trio' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_confirm_tracker_single_multiple_and_duplicates() -> None:
    tracker = ConfirmTracker()
    tags = [tracker.published(seq) for seq in (10, 11, 12, 13, 14)]
    assert tags == [1, 2, 3, 4, 5]
    assert tracker.settle(2, multiple=False) == [11]
    assert tracker.settle(4, multiple=True) == [10, 12, 13]
    assert tracker.settle(4, multiple=True) == []     # duplicate: nothing more
    assert tracker.settle(2, multiple=False) == []
    assert tracker.settle(99, multiple=False) == []   # never used
    assert len(tracker) == 1 and tracker.settle(5, multiple=False) == [14]


def test_confirm_tracker_pending_is_what_a_refusal_may_concern() -> None:
    tracker = ConfirmTracker()
    for seq in (10, 11, 12, 13):
        tracker.published(seq)
    tracker.settle(2, multiple=True)
    assert tracker.pending() == [12, 13]


def test_publish_bytes_split_into_frames_no_larger_than_frame_max() -> None:
    body = os.urandom(10_000)
    raw = publish_bytes("amq.topic", "a.b", body, seq=7, topic="a/b", device_id="d1",
                        link_name="up", timestamp=1_700_000_000, frame_max=4096)
    # Frames: method, header, then ceil(10000 / 4088) = 3 bodies, each ≤ frame_max.
    sizes, pos = [], 0
    while pos < len(raw):
        size = int.from_bytes(raw[pos + 3 : pos + 7], "big")
        sizes.append(size + 8)
        pos += size + 8
    assert len(sizes) == 5 and max(sizes) <= 4096
    parser = FrameParser(4096, expect_header=False)
    parser.feed(raw)
    cmd = parser.next_event()
    assert isinstance(cmd, Command) and cmd.body == body and cmd.properties is not None
    method = cmd.method
    assert isinstance(method, spec.BasicPublish)
    assert (method.exchange, method.routing_key, method.mandatory) == ("amq.topic", "a.b", True)
    props, _ = spec.BasicProperties.decode(cmd.properties)
    assert props.delivery_mode == 2 and props.message_id == "d1/up/7"
    assert props.app_id == "oxiedge" and props.timestamp == 1_700_000_000
    assert props.headers == {"x-oxiedge-device": "d1", "x-oxiedge-topic": "a/b"}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.lists(st.integers(1, 7), max_size=8))
def test_garbage_frames_raise_upstream_failure_only(data: bytes, cuts: list[int]) -> None:
    frames = UpstreamFrames()
    pos = 0
    try:
        for cut in [*cuts, len(data)]:
            frames.feed(data[pos : pos + cut])
            pos += cut
            while frames.next_event() is not None:
                pass
    except UpstreamFailure:
        pass


# ----------------------------------------------------------------------------- outbound
async def test_publish_confirmed_once_each_and_in_queue_in_order(rabbit: Rabbit) -> None:
    tok = token()
    queue = f"sink.{tok}"
    await sync(rabbit.declare_sink, queue, f"{tok}.#")
    endpoint = parse_endpoint(rabbit.url())
    options = opts()
    io = RecordingIO()
    seqs = [io.add(f"{tok}/sensor/{i}", f"reading {i}".encode()) for i in range(50)]
    async with trio.open_nursery() as nursery:
        link = RunningLink(nursery, endpoint, options, io)
        await io.until(lambda: len(io.confirmed_seqs) >= 50)
        await link.stop()
    assert link.error is None
    assert sorted(io.confirmed_seqs) == seqs and len(io.confirmed_seqs) == 50
    assert io.up_calls and io.up_calls[0][0] == endpoint
    assert "RabbitMQ" in io.up_calls[0][1]
    got = await sync(rabbit.drain, queue, expect=50)
    assert [rk for rk, _, _ in got] == [f"{tok}.sensor.{i}" for i in range(50)]
    assert [body for _, body, _ in got] == [f"reading {i}".encode() for i in range(50)]
    info = got[3][2]
    assert info["delivery_mode"] == 2 and info["app_id"] == "oxiedge"
    assert info["message_id"] == f"{options.device_id}/up/{seqs[3]}"
    assert info["x-oxiedge-device"] == options.device_id
    assert info["x-oxiedge-topic"] == f"{tok}/sensor/3"
    assert isinstance(info["timestamp"], int) and info["timestamp"] > 1_600_000_000


async def test_prefix_custom_exchange_and_returned_message(
        rabbit: Rabbit, caplog: pytest.LogCaptureFixture) -> None:
    tok = token()
    exchange = f"oxiedge.test.{tok}"
    options = opts(prefix=f"site/{tok}/", exchange=exchange)
    io = RecordingIO()
    async with trio.open_nursery() as nursery:
        link = RunningLink(nursery, parse_endpoint(rabbit.url()), options, io)
        await io.until(lambda: bool(io.up_calls))
        # The link declared the exchange (durable topic): nothing is bound yet, so the
        # first message comes back as Basic.Return. Its ack is NOT a confirm: the upstream
        # did not take it, so the link reports it returned (the manager keeps it).
        first = io.add("temp", b"lost")
        await io.until(lambda: bool(io.returns))
        await sync(rabbit.declare_sink, f"sink.{tok}", "#", exchange)
        second = io.add("temp", b"21.5")
        await io.until(lambda: second in io.confirmed_seqs)
        await link.stop()
    assert link.error is None
    assert [seq for seq, _ in io.returns] == [first]
    assert first not in io.confirmed_seqs
    assert f"routing key 'site.{tok}.temp'" in io.returns[0][1]
    assert "NO_ROUTE" in io.returns[0][1]
    got = await sync(rabbit.drain, f"sink.{tok}", expect=1)
    assert [(rk, body) for rk, body, _ in got] == [(f"site.{tok}.temp", b"21.5")]
    assert got[0][2]["x-oxiedge-topic"] == "temp"  # the LOCAL topic


def test_returned_seq_comes_from_our_message_id_only() -> None:
    def props(mid: str | None) -> bytes:
        return spec.BasicProperties(message_id=mid).encode()

    assert returned_seq(props("dev-1/up/42"), "dev-1", "up") == 42
    assert returned_seq(props("dev-1/other/42"), "dev-1", "up") is None
    assert returned_seq(props("dev-2/up/42"), "dev-1", "up") is None
    assert returned_seq(props("dev-1/up/x42"), "dev-1", "up") is None
    assert returned_seq(props(None), "dev-1", "up") is None
    assert returned_seq(b"\xff", "dev-1", "up") is None  # garbage properties
    assert returned_seq(None, "dev-1", "up") is None


async def test_untranslatable_topic_is_parked_not_stuck_nor_dropped(rabbit: Rabbit) -> None:
    tok = token()
    await sync(rabbit.declare_sink, f"sink.{tok}", f"{tok}.#")
    io = RecordingIO()
    bad = io.add(f"{tok}/v1.2", b"a dot has no routing-key form")
    good = io.add(f"{tok}/ok", b"fine")
    async with trio.open_nursery() as nursery:
        link = RunningLink(nursery, parse_endpoint(rabbit.url()), opts(), io)
        await io.until(lambda: good in io.confirmed_seqs and bool(io.parked))
        await link.stop()
    assert [seq for seq, _ in io.parked] == [bad]
    assert bad not in io.confirmed_seqs  # kept by the manager, not confirmed away
    got = await sync(rabbit.drain, f"sink.{tok}", expect=1)
    assert [(rk, body) for rk, body, _ in got] == [(f"{tok}.ok", b"fine")]


async def test_large_body_spans_many_frames(rabbit: Rabbit) -> None:
    tok = token()
    await sync(rabbit.declare_sink, f"sink.{tok}", f"{tok}.#")
    body = os.urandom(1_000_000)  # > frame_max (131072): ~8 body frames
    io = RecordingIO()
    seq = io.add(f"{tok}/blob", body)
    async with trio.open_nursery() as nursery:
        link = RunningLink(nursery, parse_endpoint(rabbit.url()), opts(), io)
        await io.until(lambda: seq in io.confirmed_seqs)
        await link.stop()
    got = await sync(rabbit.drain, f"sink.{tok}", expect=1)
    assert len(got) == 1 and got[0][1] == body


# ----------------------------------------------------------------------------- inbound
async def test_inbound_acked_only_after_deliver_returns(rabbit: Rabbit) -> None:
    tok = token()
    options = opts(prefix=f"site/{tok}/", inbound=("cmd/#",), window=8)
    endpoint = parse_endpoint(rabbit.url())
    # 1) deliver never returns: the message stays unacked; the link is stopped.
    io = RecordingIO(deliver="hang")
    async with trio.open_nursery() as nursery:
        link = RunningLink(nursery, endpoint, options, io)
        await io.until(lambda: bool(io.up_calls))
        await sync(rabbit.publish, f"site.{tok}.cmd.reboot", b"now")
        await io.until(lambda: io.deliver_calls == 1)
        assert await sync(rabbit.count, options.queue) == 0   # delivered ...
        with trio.fail_after(5):  # ... and not acked (queue stats are refreshed
            while await sync(rabbit.unacked, options.queue) != 1:  # periodically: poll)
                await trio.sleep(0.1)
        await link.stop()
    # 2) deliver crashes (a manager bug): the link ends with it, still no ack.
    io = RecordingIO(deliver="crash")
    async with trio.open_nursery() as nursery:
        link = RunningLink(nursery, endpoint, options, io)
        with trio.fail_after(10):
            await link.done.wait()
    assert isinstance(link.error, RuntimeError) and io.deliver_calls == 1
    # 3) the next connection gets it again; acked once deliver returned.
    io = RecordingIO()
    async with trio.open_nursery() as nursery:
        link = RunningLink(nursery, endpoint, options, io)
        await io.until(lambda: len(io.delivered) == 1)
        assert io.delivered == [("cmd/reboot", b"now")]
        # Acked (the ack is sent right after deliver returns): wait for RabbitMQ to know.
        with trio.fail_after(10):
            while await sync(rabbit.count, options.queue) != 0:
                await trio.sleep(0.05)
        await link.stop()
    assert link.error is None
    assert await sync(rabbit.count, options.queue) == 0  # not requeued: it was acked


async def test_inbound_refused_or_untranslatable_is_rejected(rabbit: Rabbit) -> None:
    tok = token()
    options = opts(prefix=f"site/{tok}/", inbound=("cmd/+",), queue_type="classic")
    io = RecordingIO(deliver="refuse")
    async with trio.open_nursery() as nursery:
        link = RunningLink(nursery, parse_endpoint(rabbit.url()), options, io)
        await io.until(lambda: bool(io.up_calls))
        await sync(rabbit.publish, f"site.{tok}.cmd.a", b"1")
        await io.until(lambda: io.deliver_calls == 1)
        # Straight into the queue by its name: no local topic for it → rejected unseen.
        await sync(rabbit.publish, options.queue, b"2", exchange="")
        io.deliver_mode = "ok"
        await sync(rabbit.publish, f"site.{tok}.cmd.b", b"3")
        await io.until(lambda: len(io.delivered) == 1)
        await link.stop()
    assert link.error is None
    assert io.delivered == [("cmd/b", b"3")] and io.deliver_calls == 2
    assert await sync(rabbit.count, options.queue) == 0  # both rejected without requeue


# ----------------------------------------------------------------------------- TLS, auth
async def test_tls_with_the_test_ca(rabbit: Rabbit) -> None:
    tok = token()
    await sync(rabbit.declare_sink, f"sink.{tok}", f"{tok}.#")
    io = RecordingIO()
    seq = io.add(f"{tok}/x", b"over tls")
    endpoint = parse_endpoint(rabbit.url(tls=True))
    assert endpoint.tls and endpoint.host == "localhost"
    async with trio.open_nursery() as nursery:
        link = RunningLink(nursery, endpoint, opts(ca_file=rabbit.ca_file), io)
        await io.until(lambda: seq in io.confirmed_seqs)
        await link.stop()
    assert link.error is None
    got = await sync(rabbit.drain, f"sink.{tok}", expect=1)
    assert got[0][1] == b"over tls"


async def test_tls_without_the_ca_fails_certificate_verification(rabbit: Rabbit) -> None:
    endpoint = parse_endpoint(rabbit.url(tls=True, password="s3cret"))
    err = await fails_with(endpoint, opts(), RecordingIO())
    assert "certificate verify failed" in str(err)
    assert endpoint.redacted() in str(err) and "s3cret" not in str(err)
    err = await fails_with(endpoint, opts(ca_file="/nonexistent/ca.pem"), RecordingIO())
    assert "TLS setup" in str(err) and "s3cret" not in str(err)


async def test_wrong_password_is_access_refused(rabbit: Rabbit) -> None:
    io = RecordingIO()
    err = await fails_with(parse_endpoint(rabbit.url(password="wrong")), opts(), io)
    assert str(err).startswith("access refused") and "wrong" not in str(err)
    assert io.up_calls == []


async def test_refused_command_queue_spares_forwarding(rabbit: Rabbit) -> None:
    """A device user allowed to publish to amq.topic but not to declare its command queue:
    the inbound channel is refused, publishes still flow (on their own channel)."""
    tok = token()
    user = f"dev{tok}"
    await sync(rabbit.ctl, "add_user", user, "pw")
    await sync(rabbit.ctl, "set_permissions", "-p", "/", user, "^$", "^amq\\.topic$", "^$")
    await sync(rabbit.declare_sink, f"sink.{tok}", f"{tok}.#")
    io = RecordingIO()
    seq = io.add(f"{tok}/t", b"still forwarded")
    options = opts(inbound=("cmd/#",), queue_type="classic")
    async with trio.open_nursery() as nursery:
        link = RunningLink(nursery, parse_endpoint(rabbit.url(user=user, password="pw")),
                           options, io)
        await io.until(lambda: seq in io.confirmed_seqs)
        await link.stop()
    assert link.error is None
    assert "commands (--in) unavailable" in io.up_calls[0][1]
    assert "ACCESS_REFUSED" in io.up_calls[0][1] or "403" in io.up_calls[0][1]
    got = await sync(rabbit.drain, f"sink.{tok}", expect=1)
    assert [body for _rk, body, _ in got] == [b"still forwarded"]
    await sync(rabbit.ctl, "delete_user", user)


async def test_unknown_vhost_is_refused(rabbit: Rabbit) -> None:
    url = rabbit.url().rstrip("/") + "/nosuchvhost"
    err = await fails_with(parse_endpoint(url), opts(), RecordingIO())
    assert "530" in str(err) and "vhost nosuchvhost not found" in str(err)


# ----------------------------------------------------------------------------- failures
async def test_silent_link_detected_within_two_heartbeats(rabbit: Rabbit) -> None:
    io = RecordingIO()
    with Proxy("127.0.0.1", rabbit.port) as proxy:
        async with trio.open_nursery() as nursery:
            endpoint = Endpoint("amqp", "127.0.0.1", proxy.port, "guest", "guest")
            link = RunningLink(nursery, endpoint, opts(heartbeat=1), io)
            await io.until(lambda: bool(io.up_calls))
            assert "heartbeat 1 s" in io.up_calls[0][1]
            # Idle for over two intervals: our heartbeats keep RabbitMQ from closing the
            # connection, and its heartbeats keep us from giving up (no event to await here).
            with trio.move_on_after(2.5):
                await link.done.wait()
            assert link.error is None and not link.done.is_set()
            proxy.freeze()
            frozen_at = trio.current_time()
            with trio.fail_after(6):
                await link.done.wait()
            elapsed = trio.current_time() - frozen_at
            nursery.cancel_scope.cancel()
    assert isinstance(link.error, LinkError)
    assert "no heartbeat from upstream in 2 s" in str(link.error)
    assert elapsed <= 2 * 1 + 1.0  # the bound, plus scheduling slack on a busy box


async def test_cancellation_closes_the_socket_promptly(rabbit: Rabbit) -> None:
    io = RecordingIO()
    with Proxy("127.0.0.1", rabbit.port) as proxy:
        async with trio.open_nursery() as nursery:
            endpoint = Endpoint("amqp", "127.0.0.1", proxy.port)
            link = RunningLink(nursery, endpoint, opts(), io)
            await io.until(lambda: bool(io.up_calls))
            await link.stop()
            assert await trio.to_thread.run_sync(proxy.client_closed.wait, 1.0)
            nursery.cancel_scope.cancel()
    assert link.error is None


async def test_refused_connect_and_handshake_timeout_name_the_endpoint() -> None:
    async with trio.open_nursery() as nursery:
        silent = await one_shot_server(nursery, None)
        with trio.socket.socket() as s:  # a port nothing listens on
            await s.bind(("127.0.0.1", 0))
            closed_port = s.getsockname()[1]
        err = await fails_with(Endpoint("amqp", "127.0.0.1", closed_port, "u", "pw"),
                               opts(), RecordingIO())
        assert f"amqp://u:***@127.0.0.1:{closed_port}" in str(err) and "pw" not in str(err)
        assert "cannot connect" in str(err)
        t0 = trio.current_time()
        err = await fails_with(Endpoint("amqp", "127.0.0.1", silent),
                               opts(connect_timeout=0.5), RecordingIO())
        assert "AMQP handshake timed out after 0.5 s" in str(err)
        assert trio.current_time() - t0 < 2
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(("answer", "expected"), [
    (b"AMQP\x00\x00\x09\x01", "refused AMQP 0-9-1"),
    (b"\x01\x00\x00\x00\x00\x00\x02\x00\x0a\xce", "malformed frame"),          # 2-byte method
    (b"\x01\x00\x00\x00\x00\x00\x04\x00\x0a\x00\x0a\x00", "malformed frame"),  # bad frame end
    (b"\x09\x00\x00\x00\x00\x00\x00\xce", "malformed frame"),                  # frame type 9
    (b"\x01\x00\x00\x00\x00\x00\x05\x00\x0a\x00\x0a\x00\xce", "malformed frame"),
    (b"", "connection closed by upstream"),
])
async def test_garbage_from_upstream_is_a_link_error(answer: bytes, expected: str) -> None:
    async with trio.open_nursery() as nursery:
        if answer:
            port = await one_shot_server(nursery, answer)
        else:  # accept, read the header, close
            async def close_at_once(stream: trio.SocketStream) -> None:
                await stream.receive_some(8)
                await stream.aclose()
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            port = listeners[0].socket.getsockname()[1]
            nursery.start_soon(trio.serve_listeners, close_at_once, listeners)
        err = await fails_with(Endpoint("amqp", "127.0.0.1", port), opts(connect_timeout=2),
                               RecordingIO(), timeout=5)
        assert expected in str(err)
        nursery.cancel_scope.cancel()


@pytest.fixture(scope="module")
def own_rabbit(tmp_path_factory: pytest.TempPathFactory) -> Any:
    node = Rabbit.start(Path(tmp_path_factory.mktemp("rabbit-own")))
    try:
        yield node
    finally:
        node.stop()


async def test_upstream_stopped_mid_stream(own_rabbit: Rabbit) -> None:
    tok = token()
    await sync(own_rabbit.declare_sink, f"sink.{tok}", f"{tok}.#")
    io = RecordingIO()
    options = opts(heartbeat=5)

    async def produce() -> None:  # a steady stream of sensor readings
        for i in range(100_000):
            io.add(f"{tok}/r", str(i).encode())
            await trio.sleep(0.005)

    try:
        async with trio.open_nursery() as nursery:
            link = RunningLink(nursery, parse_endpoint(own_rabbit.url()), options, io)
            nursery.start_soon(produce)
            await io.until(lambda: len(io.confirmed_seqs) >= 20)
            await sync(own_rabbit.stop)
            with trio.fail_after(10):
                await link.done.wait()
            nursery.cancel_scope.cancel()
    finally:  # the next test on this node needs it up, whatever happened here
        await sync(own_rabbit.start_again)
    # RabbitMQ says why before it goes (320 CONNECTION_FORCED). Its close may race our
    # next publish into a reset; the link then still reports the reason it had read.
    assert isinstance(link.error, LinkError)
    assert ("CONNECTION_FORCED" in str(link.error)
            or "closed by upstream" in str(link.error)), link.error
    # Every message the upstream confirmed survived its restart (quorum queue: confirmed
    # = replicated and fsynced); unconfirmed ones the manager would resend.
    got = await sync(own_rabbit.drain, f"sink.{tok}", expect=len(io.confirmed_seqs))
    stored = {int(info["message_id"].rsplit("/", 1)[1]) for _, _, info in got}
    assert set(io.confirmed_seqs) <= stored and len(io.confirmed_seqs) >= 20


async def test_nack_from_upstream_is_a_link_error(rabbit: Rabbit) -> None:
    tok = token()
    # A full queue with overflow=reject-publish nacks the publishes it refuses (classic:
    # a quorum queue applies the limit a message late, which makes a flaky test).
    await sync(rabbit.declare_sink, f"sink.{tok}", f"{tok}.#",
               arguments={"x-max-length": 1, "x-overflow": "reject-publish",
                          "x-queue-type": "classic"})
    io = RecordingIO()
    first = io.add(f"{tok}/a", b"fits")
    second = io.add(f"{tok}/a", b"refused")
    err = await fails_with(parse_endpoint(rabbit.url()), opts(), io)
    assert f"upstream refused 1 message(s) (basic.nack; seq {second})" in str(err)
    # The refused one stays in the outbox; the first is acked after its fsync, which may
    # come after the (immediate) nack: confirms are not ordered across outcomes.
    assert second not in io.confirmed_seqs and set(io.confirmed_seqs) <= {first}


async def test_channel_close_on_inequivalent_exchange(rabbit: Rabbit) -> None:
    exchange = f"oxiedge.direct.{token()}"

    def declare_direct() -> None:
        conn = rabbit.connection()
        try:
            conn.channel().exchange_declare(exchange, "direct", durable=True)
        finally:
            conn.close()

    await sync(declare_direct)
    err = await fails_with(parse_endpoint(rabbit.url()), opts(exchange=exchange),
                           RecordingIO())
    assert "upstream closed the channel: 406 PRECONDITION_FAILED" in str(err)


async def test_refusals_about_the_message_or_the_upstream_differ(rabbit: Rabbit) -> None:
    """403/406 after a publish refuse that message (PublishRefused: the manager parks it);
    404 (our exchange deleted upstream) is about the upstream: a plain LinkError, so the
    manager reconnects and resends instead of parking the whole backlog."""
    tok = token()
    exchange = f"oxiedge.gone.{tok}"
    io = RecordingIO()
    io.add(f"{tok}/a", b"1")
    deleted = False

    def delete_exchange() -> None:
        conn = rabbit.connection()
        try:
            conn.channel().exchange_delete(exchange)
        finally:
            conn.close()

    async def take(limit: int) -> list[OutMessage]:
        nonlocal deleted
        if not deleted:  # declared by the link's handshake: delete it before publishing
            deleted = True
            await sync(delete_exchange)
        return await RecordingIO.take(io, limit)

    io.take = take  # type: ignore[method-assign]
    err = await fails_with(parse_endpoint(rabbit.url()), opts(exchange=exchange), io)
    assert "404" in str(err) and not isinstance(err, PublishRefused), err
    assert io.parked == [] and io.confirmed_seqs == []


class PokingHandler(logging.Handler):
    """Collects the link's log lines and wakes ``RecordingIO.until`` on each."""

    def __init__(self, io: RecordingIO) -> None:
        super().__init__(logging.INFO)
        self.io = io
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        self.io._poke()


async def test_blocked_upstream_stops_taking_until_unblocked(own_rabbit: Rabbit) -> None:
    tok = token()
    await sync(own_rabbit.declare_sink, f"sink.{tok}", f"{tok}.#")
    io = RecordingIO()
    handler = PokingHandler(io)
    logger = logging.getLogger("oxiedge")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        async with trio.open_nursery() as nursery:
            link = RunningLink(nursery, parse_endpoint(own_rabbit.url()), opts(), io)
            await io.until(lambda: bool(io.up_calls))
            # A memory alarm: RabbitMQ blocks a connection when it next publishes, and
            # tells it with Connection.Blocked.
            await sync(own_rabbit.ctl, "set_vm_memory_high_watermark", "0")
            a = io.add(f"{tok}/a", b"a")
            await io.until(lambda: any("blocked publishing" in x for x in handler.lines))
            # A take() that was already waiting when the notice came may still hand out
            # one batch (held, not sent); after that nothing is taken while blocked.
            b = io.add(f"{tok}/b", b"b")
            with trio.move_on_after(0.5):   # negative checks: there is no event to await
                await io.until(lambda: not io.pending)
            c = io.add(f"{tok}/c", b"c")
            with trio.move_on_after(0.5):
                await io.until(lambda: not io.pending)
            assert io.pending and io.pending[-1].seq == c  # not taken while blocked
            assert io.confirmed_seqs == []
            await sync(own_rabbit.ctl, "set_vm_memory_high_watermark", "0.4")
            await io.until(lambda: len(io.confirmed_seqs) == 3)
            await link.stop()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        await sync(own_rabbit.ctl, "set_vm_memory_high_watermark", "0.4")
    assert link.error is None and sorted(io.confirmed_seqs) == [a, b, c]
    got = await sync(own_rabbit.drain, f"sink.{tok}", expect=3)
    assert [body for _, body, _ in got] == [b"a", b"b", b"c"]


# ----------------------------------------------------------------------------- scripted peer
class ScriptedUpstream:
    """A minimal AMQP server written with the broker's codec, for what RabbitMQ does not
    do on demand (Channel.Flow, a spontaneous Basic.Cancel, a bogus method)."""

    def __init__(self) -> None:
        self.port = 0
        self.stream: trio.SocketStream | None = None
        self.parser = FrameParser(131072, expect_header=True)
        self.connected = trio.Event()

    async def serve(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._accept, listeners)

    async def _accept(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.connected.set()
        await trio.sleep_forever()

    async def send(self, method: spec.Method, channel: int = 1) -> None:
        assert self.stream is not None
        await self.stream.send_all(encode_method(channel, method))

    async def expect(self, kind: type[spec.Method]) -> Command:
        assert self.stream is not None
        with trio.fail_after(5):
            while True:
                event = self.parser.next_event()
                if isinstance(event, Command):
                    assert isinstance(event.method, kind), event
                    return event
                if event is None:
                    data = await self.stream.receive_some(65536)
                    assert data, "client closed"
                    self.parser.feed(data)

    async def handshake(self) -> None:
        await self.connected.wait()
        await self.send(spec.ConnectionStart(0, 9, {"product": "scripted"}, b"PLAIN",
                                             b"en_US"), 0)
        ok = await self.expect(spec.ConnectionStartOk)
        assert isinstance(ok.method, spec.ConnectionStartOk)
        assert ok.method.response == b"\0guest\0guest"
        caps = ok.method.client_properties["capabilities"]
        assert caps["publisher_confirms"] and caps["connection.blocked"]
        await self.send(spec.ConnectionTune(0, 131072, 0), 0)
        await self.expect(spec.ConnectionTuneOk)
        await self.expect(spec.ConnectionOpen)
        await self.send(spec.ConnectionOpenOk(), 0)
        await self.expect(spec.ChannelOpen)
        await self.send(spec.ChannelOpenOk())
        await self.expect(spec.ConfirmSelect)
        await self.send(spec.ConfirmSelectOk())


@asynccontextmanager
async def scripted_link(io: RecordingIO) -> AsyncIterator[tuple[ScriptedUpstream, RunningLink]]:
    """A link that completed its handshake with a ``ScriptedUpstream``; cancelled at the end."""
    peer = ScriptedUpstream()
    async with trio.open_nursery() as nursery:
        await nursery.start(peer.serve)
        link = RunningLink(nursery, Endpoint("amqp", "127.0.0.1", peer.port), opts(), io)
        await peer.handshake()
        await io.until(lambda: bool(io.up_calls))
        yield peer, link
        nursery.cancel_scope.cancel()


async def test_channel_flow_pauses_publishing() -> None:
    io = RecordingIO()
    async with scripted_link(io) as (peer, link):
        await peer.send(spec.ChannelFlow(False))
        ok = await peer.expect(spec.ChannelFlowOk)
        assert isinstance(ok.method, spec.ChannelFlowOk) and ok.method.active is False
        a = io.add("t/a", b"a")    # taken by the take() already waiting, then held
        with trio.move_on_after(0.3):  # negative checks: there is no event to await
            await io.until(lambda: not io.pending)
        b = io.add("t/b", b"b")
        with trio.move_on_after(0.3):
            await io.until(lambda: not io.pending)
        assert [m.seq for m in io.pending] == [b]
        await peer.send(spec.ChannelFlow(True))
        await peer.expect(spec.ChannelFlowOk)
        first = await peer.expect(spec.BasicPublish)
        assert first.body == b"a"
        second = await peer.expect(spec.BasicPublish)
        assert second.body == b"b"
        await peer.send(spec.BasicAck(2, multiple=True))
        await io.until(lambda: len(io.confirmed_seqs) == 2)
        assert io.confirmed_seqs == [a, b]
        # A spontaneous Basic.Cancel (queue deleted upstream) ends the link.
        await peer.send(spec.BasicCancel("ctag", nowait=True))
        with trio.fail_after(5):
            await link.done.wait()
    assert isinstance(link.error, LinkError) and "cancelled the consumer" in str(link.error)


@pytest.mark.parametrize(("method", "expected"), [
    (spec.QueueDeclareOk("q", 0, 0), "unexpected queue.declare-ok from upstream"),
    (spec.ConnectionClose(320, "CONNECTION_FORCED - broker forced connection closure with "
                          "reason 'shutdown'"),
     "upstream closed the connection: 320 CONNECTION_FORCED"),
    (spec.ChannelClose(404, "NOT_FOUND - no exchange 'x'", 60, 40),
     "upstream closed the channel: 404 NOT_FOUND - no exchange 'x' (after basic.publish)"),
])
async def test_unexpected_method_and_closes_from_upstream(method: spec.Method,
                                                          expected: str) -> None:
    io = RecordingIO()
    async with scripted_link(io) as (peer, link):
        channel = 0 if isinstance(method, spec.ConnectionClose) else 1
        await peer.send(method, channel)
        if isinstance(method, spec.ConnectionClose):
            await peer.expect(spec.ConnectionCloseOk)  # answered before giving up
        if isinstance(method, spec.ChannelClose):
            await peer.expect(spec.ChannelCloseOk)
        with trio.fail_after(5):
            await link.done.wait()
    assert isinstance(link.error, LinkError) and expected in str(link.error)


async def test_a_reset_after_the_upstreams_close_reports_the_close() -> None:
    """RabbitMQ's shutdown sends Connection.Close (320) and drops the socket; a publish
    racing it fails with a reset. The reason, already in our receive buffer, is what the
    link reports, not "connection reset by peer". Which of the link's reader and publisher
    trio runs first is up to its scheduler: ten rounds make both orders all but certain."""
    close = encode_method(0, spec.ConnectionClose(
        320, "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"))
    for _ in range(10):
        io = RecordingIO()
        async with scripted_link(io) as (peer, link):
            assert peer.stream is not None
            sock = peer.stream.socket
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            # No checkpoint between these: the close and the reset (linger 0) arrive
            # together, and the publisher wakes in the same round as the reader.
            assert os.write(sock.fileno(), close) == len(close)
            io.add("t/a", b"a")
            sock.close()
            with trio.fail_after(5):
                await link.done.wait()
        assert isinstance(link.error, LinkError)
        assert "upstream closed the connection: 320 CONNECTION_FORCED" in str(link.error), \
            link.error
