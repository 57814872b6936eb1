"""SUBSCRIBE abuse against a real server: repeated filters and retained replay (issue 14).

Each test measures an innocent client's PINGREQ round trip (own process, must stay under
100 ms) and the broker's RSS while the abuse runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from oxiedge.mqtt.codec import Decoder, encode
from oxiedge.mqtt.packets import Publish, Suback, Subscribe, Unsubscribe
from tests.conftest import ServerProcess
from tests.hostile.conftest import InnocentClient, PingStats, server_status
from tests.hostile.mqtt_retry import fresh, responsive_in_some_run
from tests.mqtt.rawclient import RawClient, RawSession

RETAINED = 50


def _retain(port: int, n: int = RETAINED, size: int = 100) -> None:
    pub = RawSession(port)
    pub.connect("retainer")
    for i in range(n):
        pub.publish(f"r/{i}", b"x" * size, 1, pid=i + 1, retain=True)
    pub.disconnect()


def _read_all(raw: RawClient, decoder: Decoder, want: Callable[[list[object]], bool],
              timeout: float = 30.0) -> list[object]:  # fmt: skip
    """Packets from ``raw`` until ``want(packets)`` holds."""
    got: list[object] = []
    deadline = time.monotonic() + timeout
    while not want(got):
        left = deadline - time.monotonic()
        assert left > 0, f"gave up after {len(got)} packets"
        raw.sock.settimeout(left)
        chunk = raw.sock.recv(1 << 20)
        assert chunk, "server closed the connection"
        decoder.feed(chunk)
        got.extend(decoder)
    return got


def test_100000_copies_of_one_filter_are_one_subscription(
        hostile_server: Callable[..., ServerProcess], tmp_path: Path,
        innocent: Callable[..., InnocentClient]) -> None:
    """The issue's case: `#` 100,000 times in one SUBSCRIBE with 50 retained messages. One
    SUBACK code per filter (MQTT-3.8.4-5), one subscription (MQTT-3.8.4-3), each retained
    message replayed once, and the innocent client never waits."""

    fresh_server = fresh(hostile_server, tmp_path)

    def run() -> PingStats:
        srv = fresh_server()
        port = srv.mqtt_port
        assert port is not None
        _retain(port)
        with innocent(port, interval=0.02) as client:
            time.sleep(0.3)
            srv.rss.mark()  # type: ignore[attr-defined]
            raw = RawClient(port)
            raw.connect("flood")
            raw.send(encode(Subscribe(7, (("#", 0),) * 100_000)))
            decoder = Decoder(1 << 21)
            got = _read_all(raw, decoder, lambda ps: sum(isinstance(p, Publish) for p in ps)
                            >= RETAINED)  # fmt: skip
            time.sleep(0.5)  # anything more would show up now
            raw.sock.setblocking(False)
            try:
                decoder.feed(raw.sock.recv(1 << 20))
                got.extend(decoder)
            except BlockingIOError:
                pass
        stats = client.stop()
        [ack] = [p for p in got if isinstance(p, Suback)]
        assert len(ack.return_codes) == 100_000 and set(ack.return_codes) == {0}
        topics = [p.topic for p in got if isinstance(p, Publish)]
        assert sorted(topics) == sorted(f"r/{i}" for i in range(RETAINED))  # once each
        status = server_status(srv)["mqtt"]
        assert status["subscriptions"] == 1
        grew = srv.rss.peak - srv.rss.baseline  # type: ignore[attr-defined]
        assert grew < 64 << 20, f"RSS grew {grew >> 20} MiB"
        print(f"broker RSS start {srv.rss.baseline >> 20} MiB, "  # type: ignore[attr-defined]
              f"peak {srv.rss.peak >> 20} MiB")  # type: ignore[attr-defined]
        return stats

    responsive_in_some_run(run)


def test_resubscribe_flood_from_a_client_that_never_reads(
        hostile_server: Callable[..., ServerProcess], tmp_path: Path,
        innocent: Callable[..., InnocentClient]) -> None:
    """20,000 SUBSCRIBE packets for `#` (each owes the 50 retained messages again,
    MQTT-3.8.4-3) from a client that never reads: the replay waits for the output buffer,
    memory stays bounded, other clients are served."""

    fresh_server = fresh(hostile_server, tmp_path)

    def run() -> PingStats:
        srv = fresh_server()
        port = srv.mqtt_port
        assert port is not None
        _retain(port, size=1000)
        with innocent(port, interval=0.02) as client:
            time.sleep(0.3)
            raw = RawClient(port)
            raw.connect("nonreader")
            raw.sock.setsockopt(__import__("socket").SOL_SOCKET,
                                __import__("socket").SO_RCVBUF, 4096)  # fmt: skip
            packet = encode(Subscribe(1, (("#", 1),)))
            raw.sock.settimeout(20)
            sent = 0
            try:
                for _ in range(20):
                    raw.sock.sendall(packet * 1000)
                    sent += 1000
            except (TimeoutError, OSError):
                pass  # the broker stopped reading us: TCP back-pressure, as intended
            time.sleep(1.0)
            status = server_status(srv)["mqtt"]
        stats = client.stop()
        assert sent >= 1000
        assert status["subscriptions"] == 1
        assert status["retained_owed"] <= 1  # one filter owed, not one per SUBSCRIBE
        grew = srv.rss.peak - srv.rss.baseline  # type: ignore[attr-defined]
        assert grew < 64 << 20, f"RSS grew {grew >> 20} MiB"
        raw.close()
        print(f"broker RSS start {srv.rss.baseline >> 20} MiB, "  # type: ignore[attr-defined]
              f"peak {srv.rss.peak >> 20} MiB")  # type: ignore[attr-defined]
        return stats

    responsive_in_some_run(run)


def test_subscriptions_per_session_bound(
        hostile_server: Callable[..., ServerProcess], tmp_path: Path,
        innocent: Callable[..., InnocentClient]) -> None:
    """20,000 distinct filters in one SUBSCRIBE: the first --mqtt-max-subscriptions are
    granted, the rest get 0x80 and are counted."""

    fresh_server = fresh(hostile_server, tmp_path)

    def run() -> PingStats:
        srv = fresh_server("--mqtt-max-subscriptions", "100")
        port = srv.mqtt_port
        assert port is not None
        with innocent(port, interval=0.02) as client:
            time.sleep(0.3)
            raw = RawSession(port)
            raw.connect("many")
            codes = raw.subscribe(3, *((f"a/{i}", 1) for i in range(20_000)))
            raw.ping()
        stats = client.stop()
        assert codes[:100] == (1,) * 100 and set(codes[100:]) == {0x80}
        status = server_status(srv)["mqtt"]
        assert status["subscriptions_refused"] == 19_900
        assert status["max_subscriptions"] == 100
        print(f"broker RSS start {srv.rss.baseline >> 20} MiB, "  # type: ignore[attr-defined]
              f"peak {srv.rss.peak >> 20} MiB")  # type: ignore[attr-defined]
        return stats

    responsive_in_some_run(run)


def test_deep_filters_fill_the_subscription_trie_only_to_its_bound(
        hostile_server: Callable[..., ServerProcess], tmp_path: Path,
        innocent: Callable[..., InnocentClient]) -> None:
    """One client SUBSCRIBEs 1,000 distinct filters of 201 levels (the most the level bound
    allows), two more 50 each: that would be 221,000 trie nodes. The subscriptions' total
    levels stop at --mqtt-max-subscription-levels (0x80 beyond), a big SUBSCRIBE is applied
    in steps (other clients are served meanwhile), and UNSUBSCRIBE gives it all back."""

    fresh_server = fresh(hostile_server, tmp_path)

    def run() -> PingStats:
        srv = fresh_server("--mqtt-max-subscription-levels", "100000")
        port = srv.mqtt_port
        assert port is not None
        deep = "/".join(["lvl"] * 200)
        with innocent(port, interval=0.02) as client:
            time.sleep(0.3)
            subs = []
            granted = []
            for c, count in enumerate((1000, 50, 50)):
                raw = RawSession(port)
                raw.connect(f"deep-{c}")
                filters = [(f"{c}/{i}/{deep}"[: -len("/lvl")], 0) for i in range(count)]
                granted.append(sum(code == 0 for code in raw.subscribe(1, *filters)))
                subs.append((raw, filters))
            for raw, filters in subs:
                raw.send(encode(Unsubscribe(2, tuple(f for f, _ in filters))))
                assert raw.recv_packet()[:1] == b"\xb0"
        stats = client.stop()
        after = server_status(srv)["mqtt"]
        assert granted[0] == 100_000 // 201 and granted[1:] == [0, 0], granted
        assert after["subscriptions_refused"] == 1100 - granted[0]
        assert after["subscription_levels"] == 0 and after["subscriptions"] == 0
        grew = srv.rss.peak - srv.rss.baseline  # type: ignore[attr-defined]
        assert grew < 64 << 20, f"RSS grew {grew >> 20} MiB"
        print(f"broker RSS start {srv.rss.baseline >> 20} MiB, "  # type: ignore[attr-defined]
              f"peak {srv.rss.peak >> 20} MiB")  # type: ignore[attr-defined]
        return stats

    responsive_in_some_run(run)
