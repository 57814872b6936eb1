"""``MqttService`` in-process on a real store: recovery lines and the bus entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from oxiedge.app import App
from oxiedge.auth import UserStore
from oxiedge.bus import Bus
from oxiedge.config import Config
from oxiedge.mqtt import persist
from oxiedge.mqtt.service import MqttService
from oxiedge.staged import Origin
from oxiedge.store import Store


def make_app(tmp_path: Path, persist_on: bool = True) -> App:
    config = Config(data=tmp_path, mqtt_persist=persist_on)
    return App(config=config, store=Store.open(tmp_path / "db"), users=UserStore({}, None))


class UplinkStub:
    """One uplink as the bus sees it (an outbox destination with an origin of its own);
    the topic has no upstream name there, so the bus only counts it in ``skipped``."""

    origin = Origin("uplink stub")
    skipped = 0

    @property
    def uplinks(self) -> dict[str, UplinkStub]:
        return {"stub": self}

    def enqueue(self, topic: str, payload: bytes, retain: bool = False) -> None:
        raise AssertionError("not routable: never enqueued")

    def targets(self, topic: str) -> tuple[tuple[UplinkStub, bool], ...]:
        return ((self, False),)


async def test_bridge_publish_is_durable_and_the_bus_skips_its_origin(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    svc = MqttService(app)
    try:
        async with app.store.running():
            await svc.recover()
            assert svc.extra_lines() == [
                "MQTT persistence on - recovered 0 sessions, 0 pending messages"
            ]
            s, _, _ = svc.broker.open_session("dev", clean=False)
            svc.broker.subscribe(s, [("up/#", 1)])
            await app.store.commit()
            uplink = UplinkStub()
            bus = Bus(svc, None, None)
            bus.uplinks = uplink
            svc.broker.bus = bus
            await svc.publish("up/1", b"from-uplink", 1, origin=uplink.origin)
            assert uplink.skipped == 0  # not handed back to the origin that injected it
            assert svc.publish_from_bridge("up/2", b"x", 0, False) is False  # QoS 0
            assert uplink.skipped == 1  # any other origin reaches it
            with pytest.raises(ValueError):
                svc.publish_from_bridge("up/#", b"x", 1, False)
            # Durable once publish() returned: the record is on disk.
            keys = [k for k, _ in app.store.iter_raw(persist.CF, persist.MSG)]
            assert len(keys) == 1
    finally:
        app.store.close()
    app2 = make_app(tmp_path)
    svc2 = MqttService(app2)
    try:
        async with app2.store.running():
            await svc2.recover()
            assert svc2.extra_lines() == [
                "MQTT persistence on - recovered 1 sessions, 1 pending messages"
            ]
            assert svc2.status()["queued"] == 1
    finally:
        app2.store.close()


async def test_no_persist_touches_nothing(tmp_path: Path) -> None:
    app = make_app(tmp_path, persist_on=False)
    svc = MqttService(app)
    try:
        async with app.store.running():
            await svc.recover()
            assert svc.extra_lines() == ["MQTT persistence off - sessions live in memory only"]
            s, _, staged = svc.broker.open_session("mem", clean=False)
            assert staged is False
            svc.broker.subscribe(s, [("#", 1)])
            assert svc.publish_from_bridge("a", b"1", 1, True) is False
            assert not app.store.committer.pending
            assert list(app.store.iter_raw(persist.CF)) == []
    finally:
        app.store.close()
