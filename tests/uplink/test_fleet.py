"""A small fleet: several ``oxiedge serve`` devices forward to ONE RabbitMQ while their links
flap (connections reset, links frozen silently, one device SIGKILLed and restarted) and their
local publishers keep publishing. Every locally acknowledged message must reach the upstream
queue; a command published upstream must reach a local subscriber on every device.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from .proxy import Proxy
from .test_uplink_e2e import (
    TIMEOUT,
    Local,
    RabbitSink,
    connected,
    delete_queues,
    drained,
    mqtt_collect,
    unique,
    uplink_status,
    wait_status,
)

WINDOW = 32


class Device:
    """One fleet member: its server, the proxy its uplink goes through, its publisher."""

    def __init__(self, name: str, server: Any, proxy: Proxy) -> None:
        self.name = name
        self.server = server
        self.proxy = proxy
        self.acked: list[bytes] = []      # payloads whose PUBACK arrived
        self.unacked: list[bytes] = []    # sent, no PUBACK (server killed): may or may not arrive
        self.breaks = 0                   # link breaks caused by the test
        self.killed = False               # SIGKILLed (its status counters started again)
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start_publishing(self, until: float, interval: float) -> None:
        self._thread = threading.Thread(target=self._publish, args=(until, interval),
                                        name=f"pub-{self.name}", daemon=True)
        self._thread.start()

    def join(self) -> None:
        assert self._thread is not None
        self._thread.join(TIMEOUT * 3)
        assert not self._thread.is_alive(), f"publisher of {self.name} hangs"
        if self.error is not None:
            raise AssertionError(f"publisher of {self.name} failed") from self.error

    def _publish(self, until: float, interval: float) -> None:
        """Publish one QoS 1 message at a time; a lost server (SIGKILL) means reconnect to
        whatever port the restarted server logged."""
        n = 0
        try:
            while time.monotonic() < until:
                port = self.server.mqtt_port
                proc = self.server.proc
                if port is None or proc is None or proc.poll() is not None:
                    time.sleep(0.05)  # the server is being restarted: no event to await
                    continue
                try:
                    client = Local(port)
                except (OSError, AssertionError):
                    time.sleep(0.05)
                    continue
                try:
                    while time.monotonic() < until:
                        payload = f"{self.name}:{n:06d}".encode()
                        n += 1
                        try:
                            mid = client.publish(f"sensors/{self.name}/temp", payload)
                        except AssertionError:  # not connected any more
                            self.unacked.append(payload)
                            break
                        if client.wait_acked([mid], timeout=5):
                            self.acked.append(payload)
                        else:
                            self.unacked.append(payload)
                            break
                        time.sleep(interval)
                finally:
                    client.close()
        except BaseException as exc:  # reported by join()
            self.error = exc


class Upstream:
    """The one central broker of the fleet as the test sees it (RabbitMQ or Mosquitto)."""

    def __init__(self, protocol: str, broker: Any, tag: str) -> None:
        self.protocol = protocol
        self.broker = broker
        self.port: int = broker.port
        self.inbound_queues: list[str] = []
        self._sink: RabbitSink | None = None
        self._sub: Any = None
        if protocol == "amqp":
            self._sink = RabbitSink(broker, "sensors.#")
        else:
            self._sub = broker.subscriber("sensors/#", f"sink-{tag}")

    def url(self, port: int) -> str:
        if self.protocol == "amqp":
            return f"amqp://guest:guest@127.0.0.1:{port}/"
        return f"mqtt://127.0.0.1:{port}"

    def device_added(self, device: str, uplink: str) -> None:
        if self.protocol == "amqp":
            self.inbound_queues.append(f"oxiedge.{device}.{uplink}")

    def collect(self, expected: set[bytes], timeout: float = 30.0) -> Counter[bytes]:
        if self._sink is not None:
            return self._sink.collect(expected, timeout)
        return mqtt_collect(self._sub, expected, timeout)

    def command(self, name: str, payload: bytes) -> None:
        """Publish a command to ``cmd/NAME`` upstream (AMQP: routing key ``cmd.NAME``)."""
        if self.protocol == "amqp":
            self.broker.publish(f"cmd.{name}", payload)
        else:
            self.broker.publish(f"cmd/{name}", payload)

    def close(self) -> None:
        if self._sink is not None:
            self._sink.delete()
            delete_queues(self.broker, self.inbound_queues)
        if self._sub is not None:
            self._sub.close()


def _run_fleet(protocol: str, request: Any, start_server: Any, tmp_path: Path,
               devices: int, seconds: float, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    tag = unique("fleet")
    up = Upstream(protocol, request.getfixturevalue("rabbit" if protocol == "amqp"
                                                    else "mosquitto"), tag)
    fleet: list[Device] = []
    try:
        for i in range(1, devices + 1):
            name = f"{tag}-dev{i}"
            proxy = Proxy("127.0.0.1", up.port)
            srv = start_server("--device-id", name, data=tmp_path / f"dev{i}")
            srv.cli("uplink", "add", "up", up.url(proxy.port),
                    "--out", "sensors/#", "--in", "cmd/#", "--heartbeat", "1",
                    "--window", str(WINDOW))
            fleet.append(Device(name, srv, proxy))
            up.device_added(name, "up")
        for dev in fleet:
            wait_status(dev.server, "up", connected, "connected")

        # ---------------------------------------------------------------- chaos
        start = time.monotonic()
        until = start + seconds
        for dev in fleet:
            dev.start_publishing(until, interval=0.01)
        frozen: dict[Device, float] = {}   # device → when to thaw it
        # SIGKILL + restart of a device at evenly spaced moments (the first: the last device).
        kill_at = [start + seconds * k / (kills + 1) for k in range(1, kills + 1)]
        victims = [fleet[-1]] + [rng.choice(fleet) for _ in range(kills - 1)]
        while time.monotonic() < until:
            now = time.monotonic()
            for dev, thaw_at in list(frozen.items()):
                if now >= thaw_at:
                    dev.proxy.thaw()
                    del frozen[dev]
            if kill_at and now >= kill_at[0]:
                kill_at.pop(0)
                victim = victims.pop(0)
                victim.server.kill()  # power cut mid-stream
                victim.breaks += 1
                victim.killed = True
                victim.server.start()
                continue
            dev = rng.choice(fleet)
            if dev not in frozen:
                if rng.random() < 0.5:
                    dev.proxy.drop()  # RST: seen at once
                else:
                    dev.proxy.freeze()  # silent: only heartbeats notice
                    # Heartbeat 1 s: the link gives up after ~2 s of silence, so some
                    # freezes are noticed (reconnect) and some are only a stall.
                    frozen[dev] = now + rng.uniform(1.0, 4.0)
                dev.breaks += 1
            time.sleep(rng.uniform(0.3, 0.8))  # the chaos schedule's pacing, not a wait
        for dev in fleet:
            dev.join()
        for dev in list(frozen):
            dev.proxy.thaw()

        # ---------------------------------------------------------------- every ack arrived
        expected = {p for dev in fleet for p in dev.acked}
        for dev in fleet:
            assert len(dev.acked) >= 20, (dev.name, len(dev.acked))
        seen = up.collect(expected, timeout=60)
        reconnects = 0
        resent: dict[Device, int] = {}
        for dev in fleet:
            st = wait_status(dev.server, "up", drained, "drained", timeout=30)
            assert st["dropped"] == 0, st
            reconnects += st["reconnects"]
            resent[dev] = st["resent"]
        assert reconnects >= 1, "the chaos never broke a link"
        seen = up.collect(expected)
        allowed = {p for dev in fleet for p in dev.acked + dev.unacked}
        assert set(seen) <= allowed, sorted(set(seen) - allowed)[:5]
        for dev in fleet:
            mine = Counter({p: n for p, n in seen.items() if p.startswith(dev.name.encode())})
            dups = sum(n - 1 for n in mine.values())
            # Each break resends at most what was in flight: one window.
            assert dups <= WINDOW * (dev.breaks + 1), (dev.name, dups, dev.breaks)
            if not dev.killed:  # every duplicate upstream is a resend the status counted
                assert dups <= resent[dev], (dev.name, dups, resent[dev])

        # ---------------------------------------------------------------- a command to all
        locals_ = [Local(dev.server.mqtt_port) for dev in fleet]
        try:
            for local in locals_:
                local.subscribe("cmd/#")
            for dev in fleet:
                wait_status(dev.server, "up", connected, "connected")
            # One device's link is silently dead while the command is published: it gets
            # the command from its durable upstream queue once the link is back.
            fleet[0].proxy.freeze()
            up.command("all", f"{tag}-reboot".encode())
            for local in locals_[1:]:
                assert local.messages.get(timeout=TIMEOUT) == ("cmd/all", f"{tag}-reboot".encode())
            fleet[0].proxy.thaw()
            assert locals_[0].messages.get(timeout=30) == ("cmd/all", f"{tag}-reboot".encode())
        finally:
            for local in locals_:
                local.close()
        for dev in fleet:
            assert uplink_status(dev.server, "up")["received"] >= 1
    finally:
        for dev in fleet:
            dev.proxy.close()
            with contextlib.suppress(Exception):
                dev.server.kill()
        up.close()


@pytest.mark.parametrize("protocol", ["amqp", "mqtt"])
def test_fleet_forwards_every_acked_message_while_links_flap(
        protocol: str, request: Any, start_server: Any, tmp_path: Path) -> None:
    _run_fleet(protocol, request, start_server, tmp_path, devices=3, seconds=8, kills=1,
               seed=9)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("protocol", ["amqp", "mqtt"])
def test_fleet_long_flapping(protocol: str, request: Any, start_server: Any,
                             tmp_path: Path) -> None:
    _run_fleet(protocol, request, start_server, tmp_path, devices=5, seconds=90, kills=5,
               seed=99)
