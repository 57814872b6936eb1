"""``run_mqtt_link`` against a real Mosquitto (and, for what Mosquitto cannot be made to
do - malformed packets, a refused subscription, QoS 2 - a tiny scripted MQTT peer on a real
loopback socket).

``FakeIO`` is the manager's side of the contract reduced to lists: an outbox handed out
through ``take`` within a window, the seqs confirmed, the messages delivered.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from oxiedge.mqtt.codec import Decoder, encode
from oxiedge.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
)
from oxiedge.uplink.link import Endpoint, LinkError, LinkOptions, OutMessage, parse_endpoint
from oxiedge.uplink.mqtt_link import MAX_PACKET_ID, _Link, keep_alive_seconds, run_mqtt_link

from .mosquitto import Mosquitto
from .proxy import Proxy

T = 20.0  # bound on every test's waits


class FakeIO:
    """The manager's side of one link: outbox, window, confirms, local deliveries."""

    def __init__(self, messages: Iterable[tuple[str, bytes]] = (), window: int = 64,
                 deliver: Callable[[str, bytes], Awaitable[None]] | None = None) -> None:
        self.outbox: deque[OutMessage] = deque(
            OutMessage(i, t, p) for i, (t, p) in enumerate(messages, 1))
        self.window = window
        self.inflight: set[int] = set()
        self.next_seq = len(self.outbox) + 1
        self.confirms: list[int] = []
        self.parked: list[tuple[int, str]] = []
        self.delivered: list[tuple[str, bytes]] = []
        self.deliver_calls = 0
        self.ups: list[tuple[Endpoint, str]] = []
        self._deliver = deliver
        self._waiters: list[trio.Event] = []

    def _changed(self) -> None:
        waiters, self._waiters = self._waiters, []
        for event in waiters:
            event.set()

    async def wait(self, predicate: Callable[[], bool], timeout: float = T) -> None:
        """Wait (bounded) until ``predicate()`` holds after some change."""
        with trio.fail_after(timeout):
            while not predicate():
                event = trio.Event()
                self._waiters.append(event)
                await event.wait()

    # -- LinkIO
    async def take(self, limit: int) -> list[OutMessage]:
        assert limit >= 1
        await self.wait(lambda: bool(self.outbox) and len(self.inflight) < self.window,
                        timeout=3600)
        batch: list[OutMessage] = []
        while self.outbox and len(batch) < min(limit, self.window - len(self.inflight)):
            msg = self.outbox.popleft()
            batch.append(msg)
            self.inflight.add(msg.seq)
        return batch

    def confirmed(self, seq: int) -> None:
        assert seq in self.inflight, f"seq {seq} confirmed but not in flight"
        self.inflight.discard(seq)
        self.confirms.append(seq)
        self._changed()

    async def deliver(self, topic: str, payload: bytes, props: Any = None) -> None:
        self.deliver_calls += 1
        self._changed()
        if self._deliver is not None:
            await self._deliver(topic, payload)
        self.delivered.append((topic, payload))
        self._changed()

    def up(self, endpoint: Endpoint, detail: str = "") -> None:
        self.ups.append((endpoint, detail))
        self._changed()

    def returned(self, seq: int, reason: str) -> None:  # AMQP only
        raise AssertionError("an MQTT link never reports returned messages")

    def park(self, seq: int, reason: str) -> None:
        assert seq in self.inflight, f"seq {seq} parked but not in flight"
        self.inflight.discard(seq)
        self.parked.append((seq, reason))
        self._changed()

    def add(self, topic: str, payload: bytes) -> None:
        self.outbox.append(OutMessage(self.next_seq, topic, payload))
        self.next_seq += 1
        self._changed()


def opts(name: str = "up", **kw: Any) -> LinkOptions:
    kw.setdefault("connect_timeout", 5.0)
    return LinkOptions(name=name, device_id=kw.pop("device_id", "dev1"), **kw)


@asynccontextmanager
async def running(url: str, options: LinkOptions, io: FakeIO) -> AsyncIterator[None]:
    """Run the link in the background while the body runs; wait for ``io.up`` first."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_mqtt_link, parse_endpoint(url), options, io)
        ups = len(io.ups)
        await io.wait(lambda: len(io.ups) > ups)
        yield
        nursery.cancel_scope.cancel()


async def expect_link_error(url: str, options: LinkOptions, io: FakeIO,
                            timeout: float = T) -> LinkError:
    with trio.fail_after(timeout), pytest.raises(LinkError) as info:
        await run_mqtt_link(parse_endpoint(url), options, io)
    return info.value


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    return await trio.to_thread.run_sync(fn, *args)


# --------------------------------------------------------------------------- outbound
async def test_publishes_confirmed_once_in_order_with_prefix(mosquitto: Mosquitto) -> None:
    n = 2000
    sub = await in_thread(mosquitto.subscriber, "site/dev1/#", "check-out-1")
    try:
        io = FakeIO([(f"sensors/t{i % 7}", b"%d" % i) for i in range(n)], window=100)
        async with running(mosquitto.url(), opts(prefix="site/dev1/"), io):
            await io.wait(lambda: len(io.confirms) == n)
        assert sorted(io.confirms) == list(range(1, n + 1))  # each exactly once
        assert io.ups[0][1].startswith(("MQTT 5, new session", "MQTT 5, session resumed"))
        got = await in_thread(sub.wait_for, n)
        assert got[:n] == [(f"site/dev1/sensors/t{i % 7}", b"%d" % i) for i in range(n)]
    finally:
        await in_thread(sub.close)


async def test_topic_too_long_upstream_is_parked_not_dropped(mosquitto: Mosquitto) -> None:
    # Staged under a shorter prefix, say: with this one its upstream name cannot exist.
    long_topic = "s/" + "x" * (65535 - 2)
    sub = await in_thread(mosquitto.subscriber, "site/dev1/#", "check-park-1")
    try:
        io = FakeIO([(long_topic, b"too long"), ("s/ok", b"fine")])
        async with running(mosquitto.url(), opts(prefix="site/dev1/"), io):
            await io.wait(lambda: io.confirms == [2] and len(io.parked) == 1)
        assert io.parked[0][0] == 1 and "65535" in io.parked[0][1]
        assert await in_thread(sub.wait_for, 1) == [("site/dev1/s/ok", b"fine")]
    finally:
        sub.close()


async def test_packet_ids_wrap_past_65535(mosquitto: Mosquitto) -> None:
    n = MAX_PACKET_ID + 3000
    io = FakeIO(((f"w/{i % 10}", b"") for i in range(n)), window=1000)
    async with running(mosquitto.url(), opts("wrap"), io):
        await io.wait(lambda: len(io.confirms) == n, timeout=40)
    assert sorted(io.confirms) == list(range(1, n + 1))


def test_packet_ids_cycle_and_skip_ids_in_flight() -> None:
    link = _Link.__new__(_Link)
    link.inflight = {1: 10, 3: 11}
    link._next_id = MAX_PACKET_ID - 1
    got = []
    for seq in range(4):
        pid = link._allocate_id()
        link.inflight[pid] = seq
        got.append(pid)
    assert got == [MAX_PACKET_ID - 1, MAX_PACKET_ID, 2, 4]


def test_keep_alive_seconds() -> None:
    assert keep_alive_seconds(30) == 30
    assert keep_alive_seconds(1.2) == 2
    assert keep_alive_seconds(0) == 0
    assert keep_alive_seconds(10**6) == 0xFFFF


# --------------------------------------------------------------------------- inbound
async def test_inbound_command_prefix_stripped(mosquitto: Mosquitto) -> None:
    io = FakeIO()
    options = opts("cmd1", prefix="site/dev1/", inbound=("cmd/#", "config/+"))
    async with running(mosquitto.url(), options, io):
        assert "subscribed to 2 filter(s)" in io.ups[0][1]
        await in_thread(mosquitto.publish, "site/dev1/cmd/reboot", b"now")
        await in_thread(mosquitto.publish, "site/dev2/cmd/reboot", b"not mine")
        await in_thread(mosquitto.publish, "site/dev1/config/x", b"qos0", 0)
        await io.wait(lambda: len(io.delivered) == 2)
    assert io.delivered == [("cmd/reboot", b"now"), ("config/x", b"qos0")]


async def test_inbound_acked_only_after_deliver_returns(mosquitto: Mosquitto) -> None:
    """A deliver that never returns: no PUBACK, so the upstream redelivers the command to
    the next connection with the same client id."""
    options = opts("cmd2", prefix="site/dev1/", inbound=("cmd/#",))

    async def never(topic: str, payload: bytes) -> None:
        await trio.sleep_forever()

    stuck = FakeIO(deliver=never)
    async with running(mosquitto.url(), options, stuck):
        await in_thread(mosquitto.publish, "site/dev1/cmd/a", b"1")
        await stuck.wait(lambda: stuck.deliver_calls == 1)
    assert stuck.delivered == []
    io = FakeIO()
    async with running(mosquitto.url(), options, io):
        assert "session resumed" in io.ups[0][1]
        await io.wait(lambda: len(io.delivered) == 1)
        # The PUBACK goes out right after deliver returns; an outbound round trip after
        # that makes sure it was written before this connection is cancelled.
        io.add("out/x", b"sync")
        await io.wait(lambda: io.confirms == [1])
    assert io.delivered == [("cmd/a", b"1")]
    # Acknowledged this time: a third connection gets nothing more.
    again = FakeIO()
    async with running(mosquitto.url(), options, again):
        await in_thread(mosquitto.publish, "site/dev1/cmd/b", b"2")
        await again.wait(lambda: len(again.delivered) == 1)
    assert again.delivered == [("cmd/b", b"2")]


async def test_deliver_refusal_is_acked_and_dropped(mosquitto: Mosquitto,
                                                      caplog: pytest.LogCaptureFixture
                                                      ) -> None:
    options = opts("cmd3", inbound=("cmd3/#",))

    async def refuse(topic: str, payload: bytes) -> None:
        raise LinkError("cannot publish")

    io = FakeIO(deliver=refuse)
    with caplog.at_level(logging.WARNING, "oxiedge.uplink"):
        async with running(mosquitto.url(), options, io):
            await in_thread(mosquitto.publish, "cmd3/x", b"1")
            await io.wait(lambda: io.deliver_calls == 1)
            io.add("out/still-works", b"y")
            await io.wait(lambda: len(io.confirms) == 1)  # the link stayed up
    assert "cannot be published locally" in caplog.text
    # Acknowledged: the next connection of the same session gets only new commands.
    ok = FakeIO()
    async with running(mosquitto.url(), options, ok):
        await in_thread(mosquitto.publish, "cmd3/y", b"2")
        await ok.wait(lambda: len(ok.delivered) == 1)
    assert ok.delivered == [("cmd3/y", b"2")]


async def test_commands_sent_while_down_survive_broker_restart(tmp_path: Path) -> None:
    node = Mosquitto.start(tmp_path)
    try:
        options = opts("cmd4", prefix="d/", inbound=("cmd/#",))
        first = FakeIO()
        async with running(node.url(), options, first):  # creates the session upstream
            pass
        for i in range(3):
            await in_thread(node.publish, f"d/cmd/{i}", b"c%d" % i)
        await in_thread(node.stop)
        await in_thread(node.start_again)
        io = FakeIO()
        async with running(node.url(), options, io):
            assert "session resumed" in io.ups[0][1]
            await io.wait(lambda: len(io.delivered) == 3)
        assert io.delivered == [(f"cmd/{i}", b"c%d" % i) for i in range(3)]
    finally:
        node.stop()


# --------------------------------------------------------------------------- TLS, auth
async def test_tls_with_ca_file(mosquitto: Mosquitto) -> None:
    io = FakeIO([("tls/x", b"secure")])
    sub = await in_thread(mosquitto.subscriber, "tls/#", "check-tls")
    try:
        async with running(mosquitto.url(tls=True), opts("tls", ca_file=mosquitto.ca_file),
                           io):
            await io.wait(lambda: io.confirms == [1])
        assert await in_thread(sub.wait_for, 1) == [("tls/x", b"secure")]
    finally:
        await in_thread(sub.close)


async def test_tls_without_ca_file_fails_verification(mosquitto: Mosquitto) -> None:
    err = await expect_link_error(mosquitto.url(tls=True), opts("tls2"), FakeIO())
    assert "certificate verification failed" in str(err)
    assert f"localhost:{mosquitto.tls_port}" in str(err)
    err = await expect_link_error(mosquitto.url(tls=True),
                                  opts("tls3", ca_file="/nonexistent/ca.pem"), FakeIO())
    assert "cannot use CA file '/nonexistent/ca.pem'" in str(err)


async def test_bad_credentials_refused(tmp_path: Path) -> None:
    node = Mosquitto.start(tmp_path, users={"dev": "s3cret"})
    try:
        err = await expect_link_error(node.url(user="dev", password="wrong-pw"),
                                      opts("auth"), FakeIO())
        # Mosquitto 2 answers a wrong password in MQTT 5 with CONNACK 0x87 (3.1.1's code 4
        # is covered by test_connack_codes_name_the_reason).
        assert "refused the connection: Not authorized (CONNACK reason code 0x87)" in str(err)
        assert "wrong-pw" not in str(err)
        err = await expect_link_error(node.url(), opts("auth"), FakeIO())
        assert "Not authorized" in str(err)
        io = FakeIO([("a/b", b"x")])
        async with running(node.url(user="dev", password="s3cret"), opts("auth"), io):
            await io.wait(lambda: io.confirms == [1])
    finally:
        node.stop()


async def test_connection_refused_names_endpoint_without_password() -> None:
    with trio.socket.socket() as s:  # a port nothing listens on
        await s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    err = await expect_link_error(f"mqtt://u:hunter2@127.0.0.1:{port}", opts(), FakeIO())
    assert f"mqtt://u:***@127.0.0.1:{port}" in str(err)
    assert "hunter2" not in str(err)


# --------------------------------------------------------------------------- failures
async def test_silent_link_detected_within_keep_alive_bound(mosquitto: Mosquitto) -> None:
    io = FakeIO(window=10)
    with Proxy("127.0.0.1", mosquitto.port) as proxy:
        async with trio.open_nursery() as nursery:
            url = f"mqtt://127.0.0.1:{proxy.port}"
            failed: list[tuple[float, LinkError]] = []

            async def link() -> None:
                try:
                    await run_mqtt_link(parse_endpoint(url), opts("ka", heartbeat=1), io)
                except LinkError as exc:
                    failed.append((trio.current_time(), exc))
                    io._changed()

            nursery.start_soon(link)
            await io.wait(lambda: len(io.ups) == 1)
            # Alive and idle: keep-alive PINGREQs keep it up well past 1.5 s.
            with trio.move_on_after(2.5):
                await io.wait(lambda: bool(failed))
            assert not failed
            io.add("a/b", b"1")
            await io.wait(lambda: io.confirms == [1])
            proxy.freeze()
            frozen_at = trio.current_time()
            io.add("a/b", b"2")  # never confirmed
            await io.wait(lambda: bool(failed), timeout=5)
            nursery.cancel_scope.cancel()
    when, err = failed[0]
    assert "no PINGRESP from upstream in 1.5 s" in str(err)
    assert when - frozen_at <= 1.5 + 1.0  # the bound, plus scheduling slack
    assert io.confirms == [1]


async def test_broker_stopped_mid_stream(tmp_path: Path) -> None:
    node = Mosquitto.start(tmp_path)
    try:
        io = FakeIO([(f"s/{i}", b"x" * 100) for i in range(100_000)], window=200)
        with trio.fail_after(T):
            failed: list[LinkError] = []
            async with trio.open_nursery() as nursery:

                async def link() -> None:
                    try:
                        await run_mqtt_link(parse_endpoint(node.url()), opts("stop"), io)
                    except LinkError as exc:
                        failed.append(exc)
                        io._changed()

                nursery.start_soon(link)
                await io.wait(lambda: len(io.confirms) >= 500)
                await in_thread(node.stop)
                await io.wait(lambda: bool(failed))
        reason = str(failed[0])
        assert "connection closed by upstream" in reason or node.url() in reason, reason
        assert len(set(io.confirms)) == len(io.confirms)
        assert len(io.confirms) < 100_000
    finally:
        node.stop()


async def test_connect_timeout_when_no_connack() -> None:
    async def mute(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, mute, 0)
        port = listeners[0].socket.getsockname()[1]
        t0 = trio.current_time()
        err = await expect_link_error(f"mqtt://127.0.0.1:{port}",
                                      opts(connect_timeout=0.5), FakeIO())
        assert trio.current_time() - t0 < 2
        nursery.cancel_scope.cancel()
    assert "waiting for the CONNACK" in str(err)


# --------------------------------------------------------------------------- scripted peer
class ScriptedPeer:
    """One accepted connection driven by the test: read packets, write packets."""

    def __init__(self) -> None:
        self.accepted: trio.MemorySendChannel[trio.SocketStream]
        self.accepted, self.incoming = trio.open_memory_channel[trio.SocketStream](1)
        self.port = 0

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        await self.accepted.send(stream)
        await trio.sleep_forever()  # the test owns the stream


async def read_packet(stream: trio.SocketStream, decoder: Decoder) -> Packet | None:
    with trio.fail_after(5):
        while True:
            packet = decoder.next_packet()
            if packet is not None:
                return packet
            data = await stream.receive_some(4096)
            if not data:
                return None
            decoder.feed(data)


class Script:
    """The peer's end of a scripted connection, and control over the link."""

    def __init__(self, stream: trio.SocketStream, errors: list[LinkError],
                 scope: trio.CancelScope, done: trio.Event) -> None:
        self.stream = stream
        self.decoder = Decoder()
        self.errors = errors
        self._scope = scope
        self._done = done

    async def read(self) -> Packet | None:
        return await read_packet(self.stream, self.decoder)

    async def stop_link(self) -> None:
        """Cancel the link (an orderly shutdown) and wait until it has ended."""
        self._scope.cancel()
        with trio.fail_after(5):
            await self._done.wait()


@asynccontextmanager
async def scripted(options: LinkOptions, io: FakeIO, connack: int = 0,
                   codes: tuple[int, ...] = (1,)) -> AsyncIterator[Script]:
    """A link connected to a scripted peer that answered CONNECT (and SUBSCRIBE)."""
    peer = ScriptedPeer()
    errors: list[LinkError] = []
    scope, done = trio.CancelScope(), trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(peer.serve)

        async def link() -> None:
            with scope:
                try:
                    await run_mqtt_link(parse_endpoint(f"mqtt://127.0.0.1:{peer.port}"),
                                        options, io)
                except LinkError as exc:
                    errors.append(exc)
                    io._changed()
            done.set()

        nursery.start_soon(link)
        script = Script(await peer.incoming.receive(), errors, scope, done)
        connect = await script.read()
        # The link speaks MQTT 5 first; this peer speaks 3.1.1 only, and answers as a
        # 3.1.1 broker does (3.1.1 CONNACK 1, then close): the link connects again in 3.1.1.
        assert isinstance(connect, Connect) and connect.protocol_level == 5
        await script.stream.send_all(encode(Connack(1, False)))
        await script.stream.aclose()
        script = Script(await peer.incoming.receive(), errors, scope, done)
        connect = await script.read()
        assert isinstance(connect, Connect) and connect.protocol_level == 4
        assert connect.client_id == options.client_id and not connect.clean_session
        await script.stream.send_all(encode(Connack(connack, False)))
        if options.inbound and not connack:
            sub = await script.read()
            assert isinstance(sub, Subscribe)
            await script.stream.send_all(encode(Suback(sub.packet_id, codes)))
        yield script
        await script.stop_link()
        nursery.cancel_scope.cancel()


async def test_connack_codes_name_the_reason() -> None:
    for code, reason in [(4, "bad user name or password"), (2, "identifier rejected")]:
        io = FakeIO()
        async with scripted(opts(), io, connack=code) as script:
            await io.wait(lambda: bool(script.errors))
        assert reason in str(script.errors[0]) and io.ups == []


async def test_malformed_packet_is_link_error() -> None:
    io = FakeIO()
    async with scripted(opts(), io) as script:
        await io.wait(lambda: len(io.ups) == 1)
        await script.stream.send_all(b"\xf0\x00")  # reserved packet type 15
        await io.wait(lambda: bool(script.errors))
    assert "malformed packet from upstream" in str(script.errors[0])


async def test_suback_failure_names_the_filter() -> None:
    io = FakeIO()
    async with scripted(opts(prefix="p/", inbound=("cmd/#",)), io, codes=(0x80,)) as script:
        await io.wait(lambda: bool(script.errors))
    err = str(script.errors[0])
    assert "'p/cmd/#'" in err and "SUBACK 0x80" in err
    assert io.ups == []


async def test_qos2_inbound_and_orderly_disconnect() -> None:
    release = trio.Event()

    async def slow(topic: str, payload: bytes) -> None:
        await release.wait()

    io = FakeIO(deliver=slow)
    async with scripted(opts(inbound=("c/#",)), io) as script:
        await io.wait(lambda: len(io.ups) == 1)
        await script.stream.send_all(
            encode(Publish("c/1", b"q2", 2, packet_id=7))
            + encode(Publish("c/0", b"q0", 0))
            + encode(Publish("elsewhere/x", b"other", 1, packet_id=8)))
        await io.wait(lambda: io.deliver_calls == 1)
        with trio.move_on_after(0.3):  # nothing is acknowledged before deliver returns
            early = await script.read()
            pytest.fail(f"acknowledged before the local delivery: {early}")
        release.set()
        assert await script.read() == Pubrec(7)
        # QoS 0 is never acknowledged; QoS 1 with PUBACK (no prefix: any topic maps).
        assert await script.read() == Puback(8)
        await script.stream.send_all(encode(Pubrel(7)))
        assert await script.read() == Pubcomp(7)
        assert io.delivered == [("c/1", b"q2"), ("c/0", b"q0"), ("elsewhere/x", b"other")]
        await script.stop_link()
        assert not script.errors
        # Cancelled = orderly shutdown: DISCONNECT, then the socket is closed.
        assert await script.read() == Disconnect()
        assert await script.read() is None


# --------------------------------------------------------------------------- RabbitMQ
@pytest.mark.slow
async def test_rabbitmq_mqtt_plugin_interop() -> None:
    """The same link against RabbitMQ's MQTT plugin (boots RabbitMQ: slow)."""
    import paho.mqtt.client as mqtt

    from bench.brokers import start_rabbitmq

    from .mosquitto import Subscriber

    if not Path("/usr/lib/rabbitmq/bin/rabbitmq-server").exists():
        pytest.skip("rabbitmq-server is not installed")
    node = await in_thread(lambda: start_rabbitmq(with_mqtt=True))
    try:
        assert node.target.mqtt is not None
        port = node.target.mqtt[1]
        url = f"mqtt://guest:guest@127.0.0.1:{port}"

        def paho(client_id: str, clean: bool) -> Any:
            client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                                 clean_session=clean, protocol=mqtt.MQTTv311)
            client.username_pw_set("guest", "guest")
            return client

        def publish(topic: str, payload: bytes) -> None:
            client = paho("rmq-pub", True)
            client.connect("127.0.0.1", port)
            client.loop_start()
            try:
                client.publish(topic, payload, qos=1).wait_for_publish(10)
                client.disconnect()
            finally:
                client.loop_stop()

        sub = await in_thread(lambda: Subscriber(paho("rmq-sub", False), port, "site/d/#", 10))
        options = opts("rmq", prefix="site/d/", inbound=("cmd/#",), heartbeat=1)
        io = FakeIO([(f"t/{i}", b"%d" % i) for i in range(300)], window=50)
        try:
            async with running(url, options, io):
                await io.wait(lambda: len(io.confirms) == 300)
                await in_thread(publish, "site/d/cmd/x", b"hello")
                await io.wait(lambda: len(io.delivered) == 1)
                await trio.sleep(2.5)  # idle past 1.5 x keep-alive: PINGRESPs keep it up
            assert sorted(io.confirms) == list(range(1, 301))
            got = await in_thread(sub.wait_for, 300)
            assert got[:300] == [(f"site/d/t/{i}", b"%d" % i) for i in range(300)]
        finally:
            await in_thread(sub.close)
        await in_thread(publish, "site/d/cmd/y", b"while offline")
        io2 = FakeIO()
        async with running(url, options, io2):
            await io2.wait(lambda: len(io2.delivered) >= 1)
        assert io2.delivered[-1] == ("cmd/y", b"while offline")
        err = await expect_link_error(f"mqtt://guest:bad@127.0.0.1:{port}", options, FakeIO())
        assert "bad user name or password" in str(err)
    finally:
        await in_thread(node.stop)


async def test_inbound_outside_prefix_is_acked_and_dropped(caplog: pytest.LogCaptureFixture
                                                           ) -> None:
    io = FakeIO()
    with caplog.at_level(logging.WARNING, "oxiedge.uplink"):
        async with scripted(opts(prefix="site/d1/", inbound=("cmd/#",)), io) as script:
            await io.wait(lambda: len(io.ups) == 1)
            await script.stream.send_all(encode(Publish("site/d2/cmd/x", b"no", 1,
                                                        packet_id=3)))
            assert await script.read() == Puback(3)  # never redelivered, never delivered
            await script.stream.send_all(encode(Publish("site/d1/cmd/x", b"yes", 1,
                                                        packet_id=4)))
            assert await script.read() == Puback(4)
    assert io.delivered == [("cmd/x", b"yes")]
    assert "outside the prefix" in caplog.text


async def test_slow_local_delivery_is_not_a_dead_link() -> None:
    """More inbound messages than the inbound buffer while the local store is slow: the
    reader stops reading (so PINGRESPs wait unread), which must not count as dead."""
    release = trio.Event()

    async def slow(topic: str, payload: bytes) -> None:
        await release.wait()

    io = FakeIO(deliver=slow)
    n = 600
    async with scripted(opts(heartbeat=1, inbound=("c/#",)), io) as script:
        await io.wait(lambda: len(io.ups) == 1)
        await script.stream.send_all(b"".join(encode(Publish(f"c/{i}", b"", 1, packet_id=i))
                                              for i in range(1, n + 1)))
        acks: list[int] = []
        all_acked = trio.Event()

        async def peer() -> None:  # answer PINGREQs, collect PUBACKs
            while (packet := await read_packet(script.stream, script.decoder)) is not None:
                if isinstance(packet, Puback):
                    acks.append(packet.packet_id)
                    if len(acks) == n:
                        all_acked.set()
                elif isinstance(packet, Pingreq):
                    await script.stream.send_all(encode(Pingresp()))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(peer)
            with trio.move_on_after(3.0):  # 3 x keep-alive with the reader stalled
                await io.wait(lambda: bool(script.errors))
            assert not script.errors
            release.set()
            await io.wait(lambda: len(io.delivered) == n)
            with trio.fail_after(5):
                await all_acked.wait()
            nursery.cancel_scope.cancel()
        assert acks == list(range(1, n + 1))
        assert not script.errors
