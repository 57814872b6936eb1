"""Slow: a deep MQTT backlog survives a power cut on the appliance image (issue 37).

A persistent session (clean session off, QoS 1 subscription) goes offline; 100,000 QoS 1
messages are published to it, each acknowledged (PUBACK) by the broker, so each is on the
data partition (the session's queue is on disk). QEMU is then killed with SIGKILL (a power
cut: no shutdown, the guest's page cache lost), the card boots again, the session
reconnects and every one of the 100,000 messages arrives, in order; duplicates (QoS 1
redelivery) are allowed and counted, losses are not.

Opt-in (``-m slow``); the image as in test_image_boot.py (tests/appliance/qemu.py:
``OXIEDGE_BOOT_TARGET``, ``OXIEDGE_IMAGE_OUT``). Takes ~15-30 min under software
emulation on a 2-core machine; prints the boot, publish and drain times.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from oxiedge.mqtt.codec import encode
from oxiedge.mqtt.packets import Disconnect, Puback, Publish
from tests.mqtt.rawclient import RawSession

from .qemu import boot, credential, make_card

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

BACKLOG = 100_000
WINDOW = 500  # publishes in flight at once (packet ids 1..WINDOW, reused per window)
TOPIC = "backlog/m"


def payload(i: int) -> bytes:
    return b"%08d" % i + b"." * 56  # 64 bytes


@pytest.fixture(scope="module")
def card(image: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_card(image, tmp_path_factory.mktemp("backlog-card"))


def publish_backlog(port: int, auth: tuple[str, str]) -> None:
    """BACKLOG QoS 1 publishes, WINDOW at a time, each window fully PUBACKed."""
    pub = RawSession(port)
    pub.connect("backlog-pub", username=auth[0], password=auth[1].encode())
    for start in range(0, BACKLOG, WINDOW):
        count = min(WINDOW, BACKLOG - start)
        pub.send(b"".join(encode(Publish(TOPIC, payload(start + k), 1, False, False, k + 1))
                          for k in range(count)))
        acked = {pub.next(timeout=120) for _ in range(count)}
        assert acked == {Puback(k + 1) for k in range(count)}, start
    pub.send(encode(Disconnect()))
    pub.close()


def test_100k_queued_messages_survive_a_power_cut(image: Path, card: Path) -> None:
    guest = boot(image, card, image / "console-backlog-1.log")
    try:
        print(f"first boot: broker ready after {guest.wait_ready():.0f} s")
        auth = credential(guest)
        assert auth is not None, "first boot registered no broker credential"
        sub = RawSession(guest.ports["mqtt"])
        sub.connect("backlog-sub", clean=False, username=auth[0], password=auth[1].encode())
        assert sub.subscribe(1, ("backlog/#", 1)) == (1,)
        sub.send(encode(Disconnect()))
        sub.close()

        started = time.monotonic()
        publish_backlog(guest.ports["mqtt"], auth)
        took = time.monotonic() - started
        print(f"published {BACKLOG} QoS 1 messages (all PUBACKed) in {took:.0f} s "
              f"({BACKLOG / took:.0f} msg/s)")
    finally:
        if guest.proc.poll() is None:
            guest.power_cut()  # right after the last PUBACK

    second = boot(image, card, image / "console-backlog-2.log")
    try:
        print(f"boot after the power cut: broker ready after {second.wait_ready():.0f} s")
        assert "oxiedge-firstboot: hostname" not in second.text(), "first boot ran again"
        started = time.monotonic()
        sub = RawSession(second.ports["mqtt"])
        connack = sub.connect("backlog-sub", clean=False, username=auth[0],
                              password=auth[1].encode(), expect=None)
        assert connack == b"\x20\x02\x01\x00", connack  # session present
        seen: set[int] = set()
        order: list[int] = []
        duplicates = 0
        while len(seen) < BACKLOG:
            try:
                msg = sub.next(timeout=120)
            except TimeoutError:
                break
            assert isinstance(msg, Publish) and msg.topic == TOPIC, msg
            sub.send(encode(Puback(msg.packet_id or 0)))
            index = int(msg.payload[:8])
            if index in seen:
                duplicates += 1
                continue
            seen.add(index)
            order.append(index)
        took = time.monotonic() - started
        missing = sorted(set(range(BACKLOG)) - seen)
        print(f"delivered {len(seen)} of {BACKLOG} after the power cut in {took:.0f} s "
              f"({len(seen) / took:.0f} msg/s), {duplicates} duplicates")
        assert not missing, f"{len(missing)} lost, first {missing[:10]}"
        assert order == list(range(BACKLOG)), "out of order"
        sub.ping()  # nothing else queued
        sub.send(encode(Disconnect()))
        sub.close()
    finally:
        if second.proc.poll() is None:
            second.power_cut()
