"""``MqttService`` in-process on a real store: recovery lines and the bridge hook."""

from __future__ import annotations

from pathlib import Path

import pytest

from oxiedge.app import App
from oxiedge.auth import UserStore
from oxiedge.config import Config
from oxiedge.mqtt import persist
from oxiedge.mqtt.service import MqttService
from oxiedge.store import Store


def make_app(tmp_path: Path, persist_on: bool = True) -> App:
    config = Config(data=tmp_path, mqtt_persist=persist_on)
    return App(config=config, store=Store.open(tmp_path / "db"), users=UserStore({}, None))


async def test_bridge_publish_is_durable_and_hooks_skip_their_own(tmp_path: Path) -> None:
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
            seen: list[str] = []

            def bridge_out(topic: str, payload: bytes, qos: int, retain: bool) -> bool:
                seen.append(topic)
                return False

            svc.on_publish.append(bridge_out)
            await svc.publish("up/1", b"from-amqp", 1, skip=bridge_out)
            assert seen == []  # not echoed to the bridge that injected it
            assert svc.publish_from_bridge("up/2", b"x", 0, False) is False  # QoS 0
            assert seen == ["up/2"]
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
