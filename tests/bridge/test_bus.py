"""The bus in-process, on a real store: one publish, every destination, the one echo rule."""

from __future__ import annotations

from pathlib import Path

from oxiedge.amqp import persist as amqp_persist
from oxiedge.amqp.service import AmqpService
from oxiedge.app import App
from oxiedge.auth import UserStore
from oxiedge.bridge.amqp_mqtt import TopicBridge
from oxiedge.bus import Bus
from oxiedge.config import Config
from oxiedge.ingest.routes import parse_route
from oxiedge.ingest.step import Ingest
from oxiedge.mqtt import persist as mqtt_persist
from oxiedge.mqtt.service import MqttService
from oxiedge.staged import COMMIT, NOTHING, Origin
from oxiedge.store import Store
from oxiedge.topicmap import EXCHANGE


class UplinkStub:
    """One uplink as the bus sees it: an outbox destination with an origin of its own."""

    def __init__(self, out_prefix: str) -> None:
        self.origin = Origin("uplink stub")
        self.skipped = 0
        self.out_prefix = out_prefix
        self.enqueued: list[str] = []

    @property
    def uplinks(self) -> dict[str, UplinkStub]:
        return {"stub": self}

    def targets(self, topic: str) -> tuple[tuple[UplinkStub, bool], ...]:
        return ((self, True),) if topic.startswith(self.out_prefix) else ()

    def enqueue(self, topic: str, payload: bytes, retain: bool = False,
                props: object = None) -> None:
        self.enqueued.append(topic)


async def test_one_publish_reaches_every_destination_but_its_origin(tmp_path: Path) -> None:
    app = App(config=Config(data=tmp_path), store=Store.open(tmp_path / "db"),
              users=UserStore({}, None))
    try:
        async with app.store.running():
            mqtt, amqp = MqttService(app), AmqpService(app)
            ingest = Ingest(app, [parse_route("sensors/#:readings")])
            await ingest.start()
            bridge = TopicBridge(amqp, amqp.broker.exchanges[EXCHANGE])
            bus = Bus(mqtt, bridge, ingest)
            uplink = UplinkStub("")
            bus.uplinks = uplink
            mqtt.broker.bus = amqp.broker.bus = bus
            await mqtt.recover()
            await amqp.recover()
            broker = amqp.broker
            work, _ = broker.declare_queue("work", passive=False, durable=True,
                                           exclusive=False, auto_delete=False, arguments={},
                                           owner=None)
            assert broker.topology.bind(work, "amq.topic", "#", {})
            cmd, _, _ = mqtt.broker.open_session("valve", clean=False)
            mqtt.broker.subscribe(cmd, [("devices/#", 1)])
            await app.store.commit()

            # An MQTT client's QoS 1 publish: amq.topic, the uplink and ingest, one round.
            assert mqtt.broker.route("sensors/t1", b"21.5", 1, False) is True
            assert [m.body for m in work.ready] == [b"21.5"]
            assert uplink.enqueued == ["sensors/t1"]
            await app.store.commit()
            assert [d["payload"] for d in app.store.find("readings")] == [21.5]
            assert len(list(app.store.iter_raw(amqp_persist.CF, b"m"))) == 1

            # An AMQP client's publish to amq.topic (its queues were routed by the
            # exchange): MQTT's offline session and the uplink, never amq.topic again.
            assert bus.from_amqp("devices.v7.cmd", b"open", True) == COMMIT
            assert len(work.ready) == 1  # not handed back to AMQP
            assert uplink.enqueued == ["sensors/t1", "devices/v7/cmd"]
            await app.store.commit()
            assert len(list(app.store.iter_raw(mqtt_persist.CF, mqtt_persist.MSG))) == 1

            # An uplink's command: everything but that uplink's own outbox.
            assert bus.publish(uplink.origin, "devices/v8/cmd", b"close", 1, False) == COMMIT
            assert uplink.enqueued == ["sensors/t1", "devices/v7/cmd"]
            assert [m.body for m in work.ready] == [b"21.5", b"close"]
            await app.store.commit()

            # Untranslatable names are counted and skipped, never mangled.
            bus.uplinks = None
            assert bus.from_amqp("a..b", b"x", True) == NOTHING
            assert mqtt.broker.route("has.dot", b"x", 0, False) is False
            assert bridge.status() == {"mqtt_to_amqp": 2, "amqp_to_mqtt": 1,
                                       "skipped_mqtt_topics": 1, "skipped_amqp_keys": 1,
                                       "user_properties_dropped": 0}
    finally:
        app.store.close()


class TwoUplinks:
    """Two uplinks as the bus sees them, both taking every topic."""

    def __init__(self) -> None:
        self.a, self.b = UplinkStub(""), UplinkStub("")
        self.a.origin, self.b.origin = Origin("uplink a"), Origin("uplink b")

    @property
    def uplinks(self) -> dict[str, UplinkStub]:
        return {"a": self.a, "b": self.b}

    def targets(self, topic: str) -> tuple[tuple[UplinkStub, bool], ...]:
        return ((self.a, True), (self.b, True))


async def test_amqp_alone_the_same_rule(tmp_path: Path) -> None:
    """Without MQTT: a command reaches amq.topic and the other uplinks, never its own; an
    AMQP client's amq.topic publish reaches the uplinks; ingest is MQTT's and gets nothing."""
    app = App(config=Config(data=tmp_path), store=Store.open(tmp_path / "db"),
              users=UserStore({}, None))
    try:
        async with app.store.running():
            amqp = AmqpService(app)
            ingest = Ingest(app, [parse_route("devices/#:docs")])
            await ingest.start()
            bus = Bus(None, TopicBridge(amqp, amqp.broker.exchanges[EXCHANGE]), ingest)
            uplinks = TwoUplinks()
            bus.uplinks = uplinks
            amqp.broker.bus = bus
            await amqp.recover()
            work, _ = amqp.broker.declare_queue("work", passive=False, durable=True,
                                                exclusive=False, auto_delete=False,
                                                arguments={}, owner=None)
            assert amqp.broker.topology.bind(work, "amq.topic", "devices.#", {})
            await app.store.commit()

            assert bus.publish(uplinks.a.origin, "devices/v1/cmd", b"on", 1, False) == COMMIT
            assert [m.body for m in work.ready] == [b"on"]
            assert uplinks.a.enqueued == [] and uplinks.b.enqueued == ["devices/v1/cmd"]

            assert bus.from_amqp("devices.v2.cmd", b"off", True) == COMMIT
            assert len(work.ready) == 1  # amq.topic routed it itself; never again
            assert uplinks.a.enqueued == ["devices/v2/cmd"]
            assert uplinks.b.enqueued == ["devices/v1/cmd", "devices/v2/cmd"]
            await app.store.commit()
            assert app.store.find("docs") == []
    finally:
        app.store.close()
