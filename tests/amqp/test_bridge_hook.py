"""The AMQP end of the bus in-process, on a real RocksDB store in a temp dir."""

from __future__ import annotations

from pathlib import Path

from oxiedge.amqp import persist
from oxiedge.staged import COMMIT, NOTHING, ROUTED, Staged
from tests.amqp.conftest import amqp_service


async def test_publish_from_bridge_stages_then_releases(tmp_path: Path) -> None:
    async with amqp_service(tmp_path) as svc:
        store = svc.app.store
        broker = svc.broker
        q, staged = broker.declare_queue("work", passive=False, durable=True,
                                         exclusive=False, auto_delete=False, arguments={},
                                         owner=None)
        assert staged
        assert broker.topology.bind(q, "amq.topic", "sensors.#", {})
        await store.commit()
        calls: list[tuple[str, bool]] = []

        class Entry:  # the bus as the AMQP broker sees it
            def from_amqp(self, routing_key: str, body: bytes, persistent: bool,
                          properties: bytes = b"") -> Staged:
                calls.append((routing_key, persistent))
                return NOTHING

        broker.bus = Entry()
        st = svc.publish_from_bridge("amq.topic", "sensors.t1", b"21.5", True)
        assert st & COMMIT and st & ROUTED
        assert [m.body for m in q.ready] == [b"21.5"] and q.ready[0].stored
        await store.commit()
        assert [persist.parse_key(k) for k, _v in store.iter_raw(persist.CF, b"m")] == \
            [(q.qid, 1)]
        transient = svc.publish_from_bridge("amq.topic", "sensors.t2", b"x", False)
        assert not transient & COMMIT
        assert len(q.ready) == 2
        assert not svc.publish_from_bridge("amq.topic", "other", b"y", True) & ROUTED
        assert calls == []  # bridge publishes never go back to the bus
