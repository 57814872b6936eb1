"""End-to-end tests of issue 9, the uplink: real ``oxiedge serve`` processes forwarding to a
real RabbitMQ / Mosquitto, links broken on purpose with ``Proxy``.

Every wait is bounded: status is polled with a deadline, upstream queues are drained until the
expected messages arrived or the deadline passed.
"""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pika
import pytest

from .proxy import Proxy

TIMEOUT = 10.0


# ===================================================================== the proxy itself
class _Echo:
    """A loopback TCP echo server (one thread per connection) behind the proxy."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        try:
            while data := conn.recv(65536):
                conn.sendall(data)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()
        for conn in self.conns:
            conn.close()


@pytest.fixture
def echo_proxy() -> Iterator[tuple[_Echo, Proxy]]:
    echo = _Echo()
    proxy = Proxy("127.0.0.1", echo.port)
    try:
        yield echo, proxy
    finally:
        proxy.close()
        echo.close()


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    sock.settimeout(TIMEOUT)
    return sock


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise AssertionError(f"EOF after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def _silent_for(sock: socket.socket, seconds: float) -> bool:
    """True if nothing (no byte, no EOF, no reset) arrives on ``sock`` for ``seconds``."""
    sock.settimeout(seconds)
    try:
        sock.recv(1)
    except TimeoutError:
        return True
    except OSError:
        return False
    finally:
        sock.settimeout(TIMEOUT)
    return False


def test_proxy_forwards_both_ways(echo_proxy: tuple[_Echo, Proxy]) -> None:
    _, proxy = echo_proxy
    with _connect(proxy.port) as sock:
        blob = bytes(range(256)) * 4096  # 1 MiB: exercises partial sends and the high water
        threading.Thread(target=sock.sendall, args=(blob,), daemon=True).start()
        assert _recv_exactly(sock, len(blob)) == blob
    assert proxy.accepted == 1


def test_proxy_freeze_holds_bytes_and_thaw_releases_them(
        echo_proxy: tuple[_Echo, Proxy]) -> None:
    _, proxy = echo_proxy
    with _connect(proxy.port) as sock:
        sock.sendall(b"before")
        assert _recv_exactly(sock, 6) == b"before"
        proxy.freeze()
        sock.sendall(b"during")
        # A silent dead link: no echo, but no FIN/RST either.
        assert _silent_for(sock, 0.5)
        # A connection made while frozen is accepted (TCP handshake done) but gets nothing.
        with _connect(proxy.port) as late:
            late.sendall(b"late")
            assert _silent_for(late, 0.3)
            proxy.thaw()
            assert _recv_exactly(sock, 6) == b"during"
            assert _recv_exactly(late, 4) == b"late"
    assert proxy.accepted == 2


def test_proxy_drop_closes_current_connections_only(echo_proxy: tuple[_Echo, Proxy]) -> None:
    _, proxy = echo_proxy
    a, b = _connect(proxy.port), _connect(proxy.port)
    for sock in (a, b):  # both connected upstream before the drop
        sock.sendall(b"x")
        assert _recv_exactly(sock, 1) == b"x"
    assert proxy.drop() == 2
    for sock in (a, b):
        try:
            assert sock.recv(1) == b""  # FIN
        except ConnectionResetError:
            pass  # RST (the default)
        sock.close()
    with _connect(proxy.port) as c:  # the proxy still serves new connections
        c.sendall(b"again")
        assert _recv_exactly(c, 5) == b"again"
    # drop(rst=False) closes with a FIN: the peer reads EOF.
    with _connect(proxy.port) as d:
        d.sendall(b"y")
        assert _recv_exactly(d, 1) == b"y"
        proxy.drop(rst=False)
        assert d.recv(1) == b""


def test_proxy_to_a_dead_target_closes_the_client() -> None:
    # Bound but not listening for the whole test: connections are refused, and no one
    # (not even the proxy's own listener) can take the port meanwhile.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = int(s.getsockname()[1])
        _assert_proxy_closes_client_of(dead)


def _assert_proxy_closes_client_of(dead: int) -> None:
    with Proxy("127.0.0.1", dead) as proxy:
        try:
            with _connect(proxy.port) as sock:
                assert sock.recv(1) == b""
        except ConnectionResetError:
            # The RST may land before this thread returns from connect() (a loaded machine
            # schedules the proxy's accept-refuse-abort first) or at the first recv.
            pass
        deadline = time.monotonic() + TIMEOUT
        while proxy.live and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proxy.live == 0


# ===================================================================== helpers
def unique(tag: str) -> str:
    """A device id / queue name no other test (in this session's shared RabbitMQ) uses."""
    return f"{tag}-{uuid.uuid4().hex[:8]}"


class Local:
    """A paho client (v2 API) on a local oxiedge: QoS 1 publishes with their PUBACKs, and a
    subscription whose messages land in ``messages``."""

    def __init__(self, port: int, client_id: str = "", clean: bool = True) -> None:
        self.messages: queue.Queue[tuple[str, bytes]] = queue.Queue()
        self._acked: set[int] = set()
        self._cond = threading.Condition()
        self._connected = threading.Event()
        self._subacked = threading.Event()
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                             clean_session=clean, protocol=mqtt.MQTTv311)
        self.c.max_inflight_messages_set(100)
        self.c.max_queued_messages_set(0)
        self.c.on_connect = lambda *_a: self._connected.set()
        self.c.on_publish = self._on_publish
        self.c.on_subscribe = lambda *_a: self._subacked.set()
        self.c.on_message = lambda _c, _u, m: self.messages.put((m.topic, bytes(m.payload)))
        self.c.connect("127.0.0.1", port, keepalive=30)
        self.c.loop_start()
        if not self._connected.wait(TIMEOUT):
            self.close()
            raise AssertionError(f"no CONNACK from oxiedge on port {port}")

    def _on_publish(self, _c: Any, _u: Any, mid: int, _rc: Any, _p: Any) -> None:
        with self._cond:
            self._acked.add(mid)
            self._cond.notify_all()

    def publish(self, topic: str, payload: bytes) -> int:
        """Send one QoS 1 PUBLISH; returns its packet id (see ``wait_acked``)."""
        info = self.c.publish(topic, payload, qos=1)
        assert info.rc == mqtt.MQTT_ERR_SUCCESS, info.rc
        return int(info.mid)

    def acked(self, mids: list[int]) -> list[int]:
        with self._cond:
            return [m for m in mids if m in self._acked]

    def wait_acked(self, mids: list[int], timeout: float = TIMEOUT) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: set(mids) <= self._acked, timeout)

    def publish_all(self, messages: list[tuple[str, bytes]], timeout: float = 20.0) -> None:
        """Publish every ``(topic, payload)`` at QoS 1 and wait for all PUBACKs."""
        mids = [self.publish(t, p) for t, p in messages]
        assert self.wait_acked(mids, timeout), \
            f"{len(self.acked(mids))} of {len(mids)} PUBACKs within {timeout}s"

    def subscribe(self, topic_filter: str) -> None:
        self._subacked.clear()
        self.c.subscribe(topic_filter, qos=1)
        assert self._subacked.wait(TIMEOUT), f"no SUBACK for {topic_filter!r}"

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.c.disconnect()
        self.c.loop_stop()

    def __enter__(self) -> Local:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def uplink_status(server: Any, name: str) -> dict[str, Any]:
    """``oxiedge uplink status --json``'s entry for ``name``."""
    res = server.cli("uplink", "status", "--json")
    result = json.loads(res.stdout)
    assert name in result, f"uplink {name} not in status: {res.stdout}"
    return dict(result[name])


def wait_status(server: Any, name: str, pred: Callable[[dict[str, Any]], bool], what: str,
                timeout: float = 30.0) -> dict[str, Any]:
    """Poll the uplink's status until ``pred`` holds; fail naming ``what`` and the last one."""
    deadline = time.monotonic() + timeout
    while True:
        st = uplink_status(server, name)
        if pred(st):
            return st
        if time.monotonic() > deadline:
            tail = "\n".join(server.log_lines[-25:])
            raise AssertionError(f"uplink {name}: not {what} within {timeout}s; status {st}\n"
                                 f"server log tail:\n{tail}")
        time.sleep(0.2)  # polling the CLI: the status has no event to await from here


def connected(st: dict[str, Any]) -> bool:
    return st.get("state") == "connected"


def not_connected(st: dict[str, Any]) -> bool:
    return st.get("state") != "connected"


def drained(st: dict[str, Any]) -> bool:
    return st.get("state") == "connected" and st.get("backlog_messages") == 0 \
        and st.get("inflight", 0) == 0


def wait_log(server: Any, needle: str, timeout: float = TIMEOUT) -> str:
    """Wait until a server log line contains ``needle``."""
    deadline = time.monotonic() + timeout
    while True:
        hit = next((ln for ln in list(server.log_lines) if needle in ln), None)
        if hit is not None:
            return hit
        if time.monotonic() > deadline:
            raise AssertionError(f"no log line with {needle!r} within {timeout}s:\n"
                                 + "\n".join(server.log_lines[-25:]))
        time.sleep(0.1)


class RabbitSink:
    """A durable quorum queue on a RabbitMQ node bound to ``amq.topic``, deleted at the end."""

    def __init__(self, rabbit: Any, binding: str = "#") -> None:
        self.rabbit = rabbit
        self.queue = unique("sink")
        rabbit.declare_sink(self.queue, binding)
        self.got: list[tuple[str, bytes, dict[str, Any]]] = []

    def collect(self, expected: set[bytes], timeout: float = 30.0) -> Counter[bytes]:
        """Drain until every payload in ``expected`` arrived (duplicates kept); the count of
        every payload received so far."""
        deadline = time.monotonic() + timeout
        while True:
            self.got += self.rabbit.drain(self.queue, timeout=0.5)
            seen = Counter(body for _, body, _ in self.got)
            if expected <= set(seen):
                return seen
            if time.monotonic() > deadline:
                missing = sorted(expected - set(seen))
                raise AssertionError(f"{len(missing)} of {len(expected)} messages never "
                                     f"reached {self.queue} within {timeout}s: "
                                     f"{missing[:10]!r}...")

    def delete(self) -> None:
        delete_queues(self.rabbit, [self.queue])


def delete_queues(rabbit: Any, names: list[str]) -> None:
    """Delete queues a test left on a shared RabbitMQ node (best effort)."""
    with contextlib.suppress(Exception):
        conn = pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", rabbit.port, socket_timeout=5))
        try:
            ch = conn.channel()
            for name in names:
                ch.queue_delete(name)
        finally:
            conn.close()


@pytest.fixture
def sinks() -> Iterator[Callable[..., RabbitSink]]:
    made: list[RabbitSink] = []

    def make(rabbit: Any, binding: str = "#") -> RabbitSink:
        sink = RabbitSink(rabbit, binding)
        made.append(sink)
        return sink

    yield make
    for sink in made:
        sink.delete()


def mqtt_collect(sub: Any, expected: set[bytes], timeout: float = 30.0) -> Counter[bytes]:
    """Wait until a Mosquitto ``Subscriber`` got every payload in ``expected``."""
    deadline = time.monotonic() + timeout
    while True:
        seen = Counter(payload for _, payload in list(sub.messages))
        if expected <= set(seen):
            return seen
        if time.monotonic() > deadline:
            missing = sorted(expected - set(seen))
            raise AssertionError(f"{len(missing)} of {len(expected)} messages never reached "
                                 f"the upstream subscriber within {timeout}s: {missing[:10]!r}")
        time.sleep(0.1)


def duplicates(seen: Counter[bytes]) -> int:
    return sum(n - 1 for n in seen.values())


def sensor_batch(tag: str, start: int, count: int) -> list[tuple[str, bytes]]:
    """``count`` messages ``sensors/roomK/temp`` with unique payloads ``TAG-000N``."""
    return [(f"sensors/room{i % 3}/temp", f"{tag}-{i:05d}".encode())
            for i in range(start, start + count)]


@contextlib.contextmanager
def cut_off_uplink(rabbit: Any, start_server: Any, dev: str,
                   *options: str) -> Iterator[tuple[Any, Proxy]]:
    """A server whose uplink ``up1`` (``--out sensors/#`` and ``options``) reached ``rabbit``
    through a ``Proxy``, then lost it: new connections hang, the current one died.
    ``proxy.thaw()`` makes the upstream reachable again."""
    with Proxy("127.0.0.1", rabbit.port) as proxy:
        srv = start_server("--device-id", dev)
        srv.cli("uplink", "add", "up1", f"amqp://guest:guest@127.0.0.1:{proxy.port}/",
                "--out", "sensors/#", *options)
        wait_status(srv, "up1", connected, "connected")
        proxy.freeze()
        proxy.drop()
        wait_status(srv, "up1", not_connected, "disconnected")
        yield srv, proxy


# ===================================================================== (a) RabbitMQ upstream
def test_rabbit_upstream_forwards_matching_topics(rabbit: Any, start_server: Any,
                                                  sinks: Callable[..., RabbitSink]) -> None:
    dev = unique("a")
    sink = sinks(rabbit, "#")
    srv = start_server("--device-id", dev)
    srv.cli("uplink", "add", "up1", rabbit.url(), "--out", "sensors/#")
    wait_status(srv, "up1", connected, "connected")
    wait_log(srv, "uplink up1 connected to amqp://guest:***@127.0.0.1:")

    first, second = sensor_batch(dev, 0, 30), sensor_batch(dev, 30, 30)
    with Local(srv.mqtt_port) as pub:
        pub.publish_all(first)
        pub.publish_all([("other/topic", f"{dev}-not-forwarded".encode())])
        pub.publish_all(second)
    expected = {p for _, p in first + second}
    seen = sink.collect(expected)
    # Forwarding is in order, so the unmatched message would be here by now.
    assert set(seen) == expected, set(seen) - expected
    assert duplicates(seen) == 0  # nothing was resent on a healthy link
    by_body = {body: (key, info) for key, body, info in sink.got}
    for topic, payload in first + second:
        key, info = by_body[payload]
        assert key == topic.replace("/", "."), (topic, key)
        assert info.get("delivery_mode") == 2, info  # persistent upstream
    st = wait_status(srv, "up1", drained, "drained")
    assert st["confirmed"] >= 60 and st["dropped"] == 0, st
    assert st["node"].startswith("amqp://guest:***@127.0.0.1:"), st


# ===================================================================== (b) outage, SIGKILL
def test_rabbit_outage_and_sigkill_lose_nothing(tmp_path: Path, start_server: Any) -> None:
    from .rabbit import Rabbit

    rb = Rabbit.start(tmp_path / "rabbit")
    try:
        sink = RabbitSink(rb, "sensors.#")
        dev = unique("b")
        srv = start_server("--device-id", dev, data=tmp_path / "data")
        srv.cli("uplink", "add", "up1", rb.url(), "--out", "sensors/#", "--window", "16")
        wait_status(srv, "up1", connected, "connected")
        warm = sensor_batch(dev, 0, 20)
        with Local(srv.mqtt_port) as pub:
            pub.publish_all(warm)
        sink.collect({p for _, p in warm})
        wait_status(srv, "up1", drained, "drained")

        rb.stop()
        st = wait_status(srv, "up1", not_connected, "disconnected")
        wait_log(srv, "uplink up1 lost amqp://guest:***@127.0.0.1:")
        n = 100
        batch = sensor_batch(dev, 20, n)
        with Local(srv.mqtt_port) as pub:
            pub.publish_all(batch)  # every one PUBACKed although the upstream is down
        st = wait_status(srv, "up1", lambda s: s["backlog_messages"] == n, f"backlog {n}")
        assert st["state"] != "connected" and st["last_error"], st

        srv.kill()  # power cut with the whole backlog only on disk
        srv.start()
        st = uplink_status(srv, "up1")
        assert st["backlog_messages"] == n, st  # the outbox survived the SIGKILL
        rb.start_again()
        seen = sink.collect({p for _, p in batch}, timeout=60)
        wait_status(srv, "up1", drained, "drained", timeout=30)
        assert set(seen) == {p for _, p in warm + batch}
        assert duplicates(seen) <= 16, seen.most_common(3)  # at most one window resent
    finally:
        rb.stop()


# ===================================================================== (c) Mosquitto upstream
def test_mosquitto_upstream_with_prefix_outage_and_sigkill(tmp_path: Path,
                                                           start_server: Any) -> None:
    from .mosquitto import Mosquitto

    mq = Mosquitto.start(tmp_path / "mosquitto")
    sub = None
    try:
        dev = unique("c")
        sub_id = f"sink-{dev}"
        sub = mq.subscriber(f"site/{dev}/#", sub_id)
        srv = start_server("--device-id", dev, data=tmp_path / "data")
        srv.cli("uplink", "add", "up1", mq.url(), "--out", "sensors/#",
                "--prefix", "site/{device}/", "--window", "16")
        wait_status(srv, "up1", connected, "connected")
        wait_log(srv, "uplink up1 connected to mqtt://127.0.0.1:")
        warm = sensor_batch(dev, 0, 20)
        with Local(srv.mqtt_port) as pub:
            pub.publish_all(warm)
            pub.publish_all([("other/x", b"not forwarded")])
        mqtt_collect(sub, {p for _, p in warm})
        for topic, payload in warm:
            assert (f"site/{dev}/{topic}", payload) in sub.messages
        wait_status(srv, "up1", drained, "drained")

        sub.close()  # its persistent session keeps collecting on the broker
        mq.stop()
        wait_status(srv, "up1", not_connected, "disconnected")
        wait_log(srv, "uplink up1 lost mqtt://127.0.0.1:")
        n = 100
        batch = sensor_batch(dev, 20, n)
        with Local(srv.mqtt_port) as pub:
            pub.publish_all(batch)
        st = wait_status(srv, "up1", lambda s: s["backlog_messages"] == n, f"backlog {n}")
        assert st["state"] != "connected" and st["last_error"], st

        srv.kill()
        srv.start()
        assert uplink_status(srv, "up1")["backlog_messages"] == n
        mq.start_again()
        sub = mq.subscriber(f"site/{dev}/#", sub_id)
        seen = mqtt_collect(sub, {p for _, p in batch}, timeout=60)
        wait_status(srv, "up1", drained, "drained", timeout=30)
        assert b"not forwarded" not in seen
        assert {t for t, _ in sub.messages} <= {f"site/{dev}/sensors/room{k}/temp"
                                                 for k in range(3)}
        assert duplicates(seen) <= 16, seen.most_common(3)
    finally:
        if sub is not None:
            sub.close()
        mq.stop()


# ===================================================================== (d) silent link
@pytest.mark.parametrize("protocol", ["amqp", "mqtt"])
def test_silent_dead_link_is_detected_by_heartbeats(protocol: str, request: Any,
                                                    start_server: Any,
                                                    sinks: Callable[..., RabbitSink]) -> None:
    dev = unique("d")
    if protocol == "amqp":
        upstream = request.getfixturevalue("rabbit")
        sink = sinks(upstream, "sensors.#")
        proxy = Proxy("127.0.0.1", upstream.port)
        url = f"amqp://guest:guest@127.0.0.1:{proxy.port}/"

        def collect(expected: set[bytes]) -> Counter[bytes]:
            return sink.collect(expected, timeout=45)
    else:
        upstream = request.getfixturevalue("mosquitto")
        sub = upstream.subscriber(f"{dev}/#", f"sink-{dev}")
        request.addfinalizer(sub.close)
        proxy = Proxy("127.0.0.1", upstream.port)
        url = f"mqtt://127.0.0.1:{proxy.port}"

        def collect(expected: set[bytes]) -> Counter[bytes]:
            return mqtt_collect(sub, expected, timeout=45)
    request.addfinalizer(proxy.close)
    srv = start_server("--device-id", dev)
    srv.cli("uplink", "add", "up1", url, "--out", "sensors/#", "--heartbeat", "1",
            *(["--prefix", "{device}/"] if protocol == "mqtt" else []))
    wait_status(srv, "up1", connected, "connected")
    warm = sensor_batch(dev, 0, 5)
    with Local(srv.mqtt_port) as pub:
        pub.publish_all(warm)
    collect({p for _, p in warm})

    proxy.freeze()
    frozen_at = time.monotonic()
    batch = sensor_batch(dev, 5, 20)
    with Local(srv.mqtt_port) as pub:
        pub.publish_all(batch)
    # Heartbeat 1 s: a link that hears nothing must give up within a few heartbeats (the log
    # line is watched in-process, so the time measured is the link's, not the CLI's).
    line = wait_log(srv, "uplink up1 lost", timeout=10)
    detected = time.monotonic() - frozen_at
    assert detected < 5, f"dead link noticed only after {detected:.1f}s"
    assert f":{proxy.port}" in line, line
    st = wait_status(srv, "up1", not_connected, "disconnected", timeout=5)
    assert st["last_error"], st

    proxy.thaw()
    seen = collect({p for _, p in batch})
    assert set(seen) == {p for _, p in warm + batch}
    st = wait_status(srv, "up1", drained, "drained", timeout=30)
    assert st["reconnects"] >= 1, st


# ===================================================================== (e) --in commands
def test_commands_from_upstream_reach_local_subscribers(rabbit: Any, mosquitto: Any,
                                                        start_server: Any, request: Any
                                                        ) -> None:
    dev = unique("e")
    srv = start_server("--device-id", dev)
    request.addfinalizer(lambda: delete_queues(rabbit, [f"oxiedge.{dev}.rmq"]))
    srv.cli("uplink", "add", "rmq", rabbit.url(), "--out", "sensors/#", "--in", "cmd/#")
    srv.cli("uplink", "add", "mq", mosquitto.url(), "--out", "sensors/#", "--in", "cmd/#",
            "--prefix", "site/{device}/")
    with Local(srv.mqtt_port) as local:
        local.subscribe("cmd/#")
        wait_status(srv, "rmq", connected, "connected")
        wait_status(srv, "mq", connected, "connected")

        rabbit.publish(f"cmd.{dev}.reboot", b"from-rabbit")
        topic, payload = local.messages.get(timeout=TIMEOUT)
        assert (topic, payload) == (f"cmd/{dev}/reboot", b"from-rabbit")

        mosquitto.publish(f"site/{dev}/cmd/restart", b"from-mosquitto")
        topic, payload = local.messages.get(timeout=TIMEOUT)
        assert (topic, payload) == ("cmd/restart", b"from-mosquitto")
        # Outside the prefix (another device's commands) never arrives here.
        mosquitto.publish("site/other-device/cmd/restart", b"not-for-us")
        mosquitto.publish(f"site/{dev}/cmd/stop", b"marker")
        assert local.messages.get(timeout=TIMEOUT) == ("cmd/stop", b"marker")
        with pytest.raises(queue.Empty):
            local.messages.get_nowait()
    assert uplink_status(srv, "rmq")["received"] == 1
    assert uplink_status(srv, "mq")["received"] == 2


@pytest.mark.parametrize("protocol", ["amqp", "mqtt"])
def test_commands_wait_upstream_while_the_device_is_down(protocol: str, request: Any,
                                                         start_server: Any) -> None:
    """A command published while the device is off (SIGKILLed) waits upstream (durable
    queue / persistent session) and reaches a local persistent subscriber after restart."""
    dev = unique("e")
    upstream = request.getfixturevalue("rabbit" if protocol == "amqp" else "mosquitto")
    srv = start_server("--device-id", dev)
    if protocol == "amqp":
        request.addfinalizer(lambda: delete_queues(upstream, [f"oxiedge.{dev}.up1"]))
    srv.cli("uplink", "add", "up1", upstream.url(), "--in", "cmd/#", "--prefix", "{device}/")
    app_id = f"app-{dev}"
    with Local(srv.mqtt_port, client_id=app_id, clean=False) as app:
        app.subscribe("cmd/#")
    wait_status(srv, "up1", connected, "connected")

    srv.kill()
    if protocol == "amqp":
        upstream.publish(f"{dev}.cmd.open", b"while-down")
    else:
        upstream.publish(f"{dev}/cmd/open", b"while-down")
    srv.start()
    with Local(srv.mqtt_port, client_id=app_id, clean=False) as app:
        assert app.messages.get(timeout=30) == ("cmd/open", b"while-down")
    st = wait_status(srv, "up1", lambda s: s["received"] == 1, "received 1")
    assert st["state"] == "connected", st


def test_command_is_not_echoed_back_upstream(rabbit: Any, start_server: Any, request: Any,
                                            sinks: Callable[..., RabbitSink]) -> None:
    """--out '#' also matches the commands --in brings: they must not go back upstream."""
    dev = unique("e")
    sink = sinks(rabbit, f"{dev}.#")  # sees the command itself once, and any echo
    srv = start_server("--device-id", dev)
    request.addfinalizer(lambda: delete_queues(rabbit, [f"oxiedge.{dev}.up1"]))
    srv.cli("uplink", "add", "up1", rabbit.url(), "--out", "#", "--in", "cmd/#",
            "--prefix", "{device}/")
    with Local(srv.mqtt_port) as local:
        local.subscribe("cmd/#")
        wait_status(srv, "up1", connected, "connected")
        rabbit.publish(f"{dev}.cmd.go", b"the-command")
        assert local.messages.get(timeout=TIMEOUT) == ("cmd/go", b"the-command")
        local.publish_all([("sensors/marker", b"marker")])
    # An echo would have been queued before the marker, so it would be here by now.
    seen = sink.collect({b"marker", b"the-command"})
    assert seen == Counter({b"marker": 1, b"the-command": 1}), seen


# ===================================================================== (f) bounds
def test_drop_oldest_keeps_the_newest(rabbit: Any, start_server: Any,
                                      sinks: Callable[..., RabbitSink]) -> None:
    dev = unique("f")
    sink = sinks(rabbit, "sensors.#")
    with cut_off_uplink(rabbit, start_server, dev, "--max-messages", "10",
                        "--policy", "drop-oldest") as (srv, proxy):
        batch = sensor_batch(dev, 0, 30)
        with Local(srv.mqtt_port) as pub:
            pub.publish_all(batch)  # drop-oldest never blocks a publisher
        st = wait_status(srv, "up1", lambda s: s["backlog_messages"] == 10, "backlog 10")
        assert st["dropped"] == 20, st
        proxy.thaw()
        newest = {p for _, p in batch[20:]}
        seen = sink.collect(newest, timeout=45)
        wait_status(srv, "up1", drained, "drained", timeout=30)
        seen = sink.collect(newest)
        assert set(seen) == newest, sorted(set(seen) - newest)[:5]  # the 20 oldest dropped
        assert uplink_status(srv, "up1")["dropped"] == 20


def test_drop_oldest_by_bytes(rabbit: Any, start_server: Any,
                              sinks: Callable[..., RabbitSink]) -> None:
    from oxiedge.sizes import parse_size

    dev = unique("f")
    sink = sinks(rabbit, "sensors.#")
    with cut_off_uplink(rabbit, start_server, dev, "--max-bytes", "4KB",
                        "--policy", "drop-oldest") as (srv, proxy):
        batch = [(t, p + b"." * 200) for t, p in sensor_batch(dev, 0, 40)]
        with Local(srv.mqtt_port) as pub:
            pub.publish_all(batch)
        st = wait_status(srv, "up1", lambda s: s["dropped"] + s["backlog_messages"] == 40,
                         "40 accounted for")
        kept = st["backlog_messages"]
        assert 0 < kept < 40 and st["backlog_bytes"] <= parse_size("4KB"), st
        proxy.thaw()
        newest = {p for _, p in batch[40 - kept:]}
        sink.collect(newest, timeout=45)
        wait_status(srv, "up1", drained, "drained", timeout=30)
        seen = sink.collect(newest)
        assert set(seen) == newest


def test_block_policy_holds_publishers_until_the_upstream_drains(
        rabbit: Any, start_server: Any, sinks: Callable[..., RabbitSink]) -> None:
    dev = unique("f")
    sink = sinks(rabbit, "sensors.#")
    with cut_off_uplink(rabbit, start_server, dev, "--max-messages", "10",
                        "--policy", "block") as (srv, proxy):
        full = sensor_batch(dev, 0, 10)
        with Local(srv.mqtt_port) as pub:
            pub.publish_all(full)  # up to the bound: accepted
            # Past the bound the publisher is held: one message at a time (a burst read in
            # one go is processed as a whole), at most one more may still be accepted.
            more: list[tuple[str, bytes]] = []
            mids: list[int] = []
            for topic, payload in sensor_batch(dev, 10, 3):
                more.append((topic, payload))
                mids.append(pub.publish(topic, payload))
                if not pub.wait_acked(mids[-1:], timeout=2.0):
                    break
            assert len(pub.acked(mids)) == len(mids) - 1 <= 1, \
                f"publisher not held: {len(pub.acked(mids))} PUBACKs past the bound"
            st = uplink_status(srv, "up1")
            assert st["blocking"] and st["backlog_messages"] <= 11, st
            assert st["dropped"] == 0 and st["state"] != "connected", st
            proxy.thaw()  # the upstream drains the outbox: publishers resume
            assert pub.wait_acked(mids, timeout=45), "no PUBACK after the upstream returned"
            pub.publish_all(sensor_batch(dev, 13, 5))  # and new publishes flow again
            more += sensor_batch(dev, 13, 5)
        seen = sink.collect({p for _, p in full + more}, timeout=45)
        assert set(seen) == {p for _, p in full + more}
        st = wait_status(srv, "up1", drained, "drained")
        assert not st["blocking"] and st["dropped"] == 0, st


def test_live_update_takes_effect_and_server_status_shows_uplinks(
        rabbit: Any, start_server: Any, sinks: Callable[..., RabbitSink]) -> None:
    dev = unique("u")
    sink = sinks(rabbit, f"{dev}.#")
    srv = start_server("--device-id", dev)
    res = srv.cli("uplink", "add", "up1", rabbit.url(), "--out", "a/#", "--prefix", "{device}/")
    assert "added" in res.stdout, res.stdout
    wait_status(srv, "up1", connected, "connected")
    with Local(srv.mqtt_port) as pub:
        pub.publish_all([("a/1", b"a1"), ("b/1", b"b1")])
        sink.collect({b"a1"})
        res = srv.cli("uplink", "add", "up1", rabbit.url(), "--out", "b/#",
                      "--prefix", "{device}/")
        assert "updated" in res.stdout, res.stdout
        res = srv.cli("uplink", "add", "up1", rabbit.url(), "--out", "b/#",
                      "--prefix", "{device}/")
        assert "already present" in res.stdout, res.stdout
        wait_status(srv, "up1", connected, "connected")
        pub.publish_all([("a/2", b"a2"), ("b/2", b"b2"), ("b/3", b"b3")])
    seen = sink.collect({b"b2", b"b3"})
    assert set(seen) == {b"a1", b"b2", b"b3"}, seen  # the new filter only, from now on
    status = json.loads(srv.cli("status", "--json").stdout)
    up = status["uplink"]["up1"]
    for key in ("state", "node", "backlog_messages", "backlog_bytes", "inflight", "forwarded",
                "confirmed", "resent", "dropped", "received", "lag_seconds", "rate",
                "last_error", "reconnects"):
        assert key in up, (key, up)


# ===================================================================== (g) CLI
def test_cli_add_list_remove_status_and_errors(start_server: Any) -> None:
    srv = start_server("--device-id", unique("g"))
    with socket.create_server(("127.0.0.1", 0)) as s:
        dead = int(s.getsockname()[1])  # nothing listens: the uplink keeps retrying
    url = f"amqp://alice:s3cret-pw@127.0.0.1:{dead}/"
    res = srv.cli("uplink", "add", "up1", url, "--out", "sensors/#", "--in", "cmd/#",
                  "--prefix", "site/{device}/", "--window", "32")
    assert "up1" in res.stdout
    table = srv.cli("uplink", "list").stdout
    rows = [json.loads(ln) for ln in srv.cli("uplink", "list", "--json").stdout.splitlines()]
    status = srv.cli("uplink", "status").stdout + srv.cli("uplink", "status", "--json").stdout
    for text in (table, json.dumps(rows), status, "\n".join(srv.log_lines)):
        assert "s3cret-pw" not in text  # the password is never shown nor logged
    assert "up1" in table and "alice" in table
    (row,) = rows
    assert row["name"] == "up1" and row["out"] == ["sensors/#"] and row["in"] == ["cmd/#"]
    assert "***" in json.dumps(row["urls"]) and row["window"] == 32, row
    st = wait_status(srv, "up1", lambda s: bool(s["last_error"]), "failing", timeout=20)
    assert st["state"] in ("connecting", "backoff"), st

    bad = srv.cli("uplink", "add", "bad", "http://127.0.0.1:80/", "--out", "a/#", check=False)
    assert bad.returncode == 2, bad
    assert "scheme" in bad.stderr + bad.stdout, bad
    bad = srv.cli("uplink", "add", "bad", "amqp://127.0.0.1/", "--out", "a/#/b", check=False)
    assert bad.returncode != 0 and "a/#/b" in bad.stderr + bad.stdout, bad
    assert [r["name"] for r in map(json.loads,
            srv.cli("uplink", "list", "--json").stdout.splitlines())] == ["up1"]

    res = srv.cli("uplink", "status", "nope", check=False)
    assert res.returncode != 0 and "nope" in res.stderr + res.stdout, res
    res = srv.cli("uplink", "remove", "nope", check=False)
    assert res.returncode != 0 and "nope" in res.stderr + res.stdout, res

    with Local(srv.mqtt_port) as pub:  # a backlog the upstream never took
        pub.publish_all(sensor_batch("g", 0, 3))
    wait_status(srv, "up1", lambda s: s["backlog_messages"] == 3, "backlog 3")
    res = srv.cli("uplink", "remove", "up1")
    assert "3 unsent" in res.stdout, res.stdout
    assert srv.cli("uplink", "list", "--json").stdout.strip() == ""
    assert json.loads(srv.cli("uplink", "status", "--json").stdout) == {}


def test_config_file_uplink_and_offline_cli(rabbit: Any, tmp_path: Path, start_server: Any,
                                            sinks: Callable[..., RabbitSink]) -> None:
    dev = unique("g")
    sink = sinks(rabbit, f"{dev}.#")
    conf = tmp_path / "oxiedge.toml"
    conf.write_text(f'[uplink.fromconf]\nurl = "{rabbit.url()}"\nout = ["sensors/#"]\n'
                    f'prefix = "{{device}}/"\nheartbeat = 5\n')
    data = tmp_path / "data"
    # Added while no server runs: written to the data dir, used at the next start.
    srv_args = ("--device-id", dev, "--config", str(conf))
    from tests.conftest import ServerProcess

    offline = ServerProcess(data, srv_args, None)
    offline.cli("uplink", "add", "offline1", rabbit.url(), "--out", "alerts/#",
                "--prefix", "{device}/")
    srv = start_server(*srv_args, data=data)
    rows = {r["name"]: r for r in map(json.loads,
                                      srv.cli("uplink", "list", "--json").stdout.splitlines())}
    assert set(rows) == {"fromconf", "offline1"}, rows
    assert rows["fromconf"]["source"] == "config", rows
    assert rows["offline1"]["source"] != "config", rows
    wait_status(srv, "fromconf", connected, "connected")
    wait_status(srv, "offline1", connected, "connected")
    msgs = [*sensor_batch(dev, 0, 10), ("alerts/fire", f"{dev}-alert".encode())]
    with Local(srv.mqtt_port) as pub:
        pub.publish_all(msgs)
    seen = sink.collect({p for _, p in msgs})
    keys = {key for key, _, _ in sink.got}
    assert f"{dev}.alerts.fire" in keys and f"{dev}.sensors.room0.temp" in keys, keys
    assert duplicates(seen) == 0


# ===================================================================== TLS, clusters
@pytest.mark.parametrize("protocol", ["amqp", "mqtt"])
def test_tls_upstream_verifies_the_certificate(protocol: str, request: Any,
                                               start_server: Any) -> None:
    dev = unique("tls")
    upstream = request.getfixturevalue("rabbit" if protocol == "amqp" else "mosquitto")
    srv = start_server("--device-id", dev)
    # Without the test CA the upstream's certificate cannot be verified: never connected.
    srv.cli("uplink", "add", "untrusted", upstream.url(tls=True), "--out", "sensors/#")
    st = wait_status(srv, "untrusted", lambda s: bool(s["last_error"]), "failing")
    assert st["state"] != "connected" and "certif" in st["last_error"].lower(), st
    srv.cli("uplink", "remove", "untrusted")

    srv.cli("uplink", "add", "up1", upstream.url(tls=True), "--out", "sensors/#",
            "--ca-file", upstream.ca_file, "--prefix", "{device}/")
    wait_status(srv, "up1", connected, "connected")
    batch = sensor_batch(dev, 0, 10)
    if protocol == "amqp":
        sink = RabbitSink(upstream, f"{dev}.#")
        try:
            with Local(srv.mqtt_port) as pub:
                pub.publish_all(batch)
            seen = sink.collect({p for _, p in batch})
        finally:
            sink.delete()
    else:
        sub = upstream.subscriber(f"{dev}/#", f"sink-{dev}")
        try:
            with Local(srv.mqtt_port) as pub:
                pub.publish_all(batch)
            seen = mqtt_collect(sub, {p for _, p in batch})
        finally:
            sub.close()
    assert set(seen) == {p for _, p in batch}
    st = wait_status(srv, "up1", drained, "drained")
    assert st["node"].startswith(("amqps://", "mqtts://")), st


def test_cluster_urls_are_tried_in_turn(rabbit: Any, start_server: Any,
                                        sinks: Callable[..., RabbitSink]) -> None:
    dev = unique("cl")
    sink = sinks(rabbit, f"{dev}.#")
    with socket.create_server(("127.0.0.1", 0)) as s:
        dead = int(s.getsockname()[1])
    srv = start_server("--device-id", dev)
    # The first node is down: the uplink must go on to the second.
    srv.cli("uplink", "add", "up1", f"amqp://guest:guest@127.0.0.1:{dead}/", rabbit.url(),
            "--out", "sensors/#", "--prefix", "{device}/")
    st = wait_status(srv, "up1", connected, "connected")
    assert st["node"].endswith(f":{rabbit.port}"), st
    batch = sensor_batch(dev, 0, 10)
    with Local(srv.mqtt_port) as pub:
        pub.publish_all(batch)
    assert set(sink.collect({p for _, p in batch})) == {p for _, p in batch}


# ===================================================================== slow: big backlog
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_large_backlog_drains_through_flapping_link_and_sigkill(
        rabbit: Any, start_server: Any, sinks: Callable[..., RabbitSink]) -> None:
    dev = unique("big")
    sink = sinks(rabbit, f"{dev}.#")
    n, window = 20000, 256
    with cut_off_uplink(rabbit, start_server, dev, "--prefix", "{device}/",
                        "--window", str(window), "--heartbeat", "1") as (srv, proxy):
        batch = sensor_batch(dev, 0, n)
        with Local(srv.mqtt_port) as pub:
            for i in range(0, n, 500):
                pub.publish_all(batch[i:i + 500], timeout=60)
        wait_status(srv, "up1", lambda s: s["backlog_messages"] == n, f"backlog {n}")
        proxy.thaw()
        thawed = time.monotonic()
        breaks, killed_at = 0, None
        while True:
            st = uplink_status(srv, "up1")
            if st["backlog_messages"] == 0 or time.monotonic() - thawed > 240:
                break
            if killed_at is None and st["backlog_messages"] < n * 2 // 3:
                killed_at = st["backlog_messages"]
                srv.kill()  # mid-drain: what was confirmed is gone, the rest is resent
                srv.start()
            else:
                proxy.drop()
            breaks += 1
            time.sleep(0.3)  # the flapping schedule, not a wait for an event
        assert killed_at is not None and 0 < killed_at < n and breaks >= 3, (killed_at, breaks)
        seen = sink.collect({p for _, p in batch}, timeout=120)
        wait_status(srv, "up1", drained, "drained", timeout=120)
        assert set(seen) == {p for _, p in batch}
        assert duplicates(seen) <= window * (breaks + 1), (duplicates(seen), breaks)
