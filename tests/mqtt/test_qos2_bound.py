"""Inbound QoS 2 state is bounded per session: a client that sends QoS 2 PUBLISHes and never
their PUBREL cannot make the broker hold 65,535 packet ids (and records) per session.

At ``MAX_QOS2_PENDING`` the oldest id is forgotten (counted ``qos2_ids_forgotten``): the
broker core on a real store, then a real server across a SIGKILL.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from oxiedge.mqtt import persist
from oxiedge.mqtt.bounds import MAX_QOS2_PENDING, Limits
from oxiedge.mqtt.broker import Broker
from oxiedge.mqtt.codec import encode
from oxiedge.mqtt.packets import Pubcomp, Publish, Pubrec, Pubrel
from oxiedge.store import Store
from tests.conftest import ServerProcess

from .conftest import cli_rows
from .rawclient import RawSession

Start = Callable[..., ServerProcess]


def rx2_on_disk(store: Store) -> list[int]:
    keys = [bytes(k) for k, _ in store.iter_raw(persist.CF, persist.RX2)]
    return [int.from_bytes(k[-2:], "big") for k in keys]


def test_the_oldest_unreleased_id_is_forgotten_at_the_bound(store: Store) -> None:
    b = Broker(store, Limits(10, max_qos2_pending=3))
    s, _, _ = b.open_session("q2", clean=False)
    for pid in (7, 1, 9):
        assert s.rx2.received(pid)
    assert not s.rx2.received(1)  # a duplicate while held: not routed again (MQTT-4.3.3-2)
    assert s.rx2.received(4)  # the fourth: 7, the oldest, is forgotten
    assert s.rx2.received(5)  # and then 1
    assert list(s.rx2) == [9, 4, 5]
    assert b.stats.qos2_ids_forgotten == 2
    store.commit_blocking()
    assert rx2_on_disk(store) == [4, 5, 9]  # the forgotten ids' records went too
    assert s.rx2.released(9) and not s.rx2.released(7)  # PUBREL of a forgotten id: unknown
    assert s.rx2.received(7)  # a re-send of a forgotten id is a new message
    store.commit_blocking()
    assert rx2_on_disk(store) == [4, 5, 7]


def test_the_arrival_order_survives_a_restart(store: Store) -> None:
    """Packet ids wrap (65535 -> 1) and clients reuse free ones: after a restart the
    oldest held id is still the one that arrived first, not the lowest number."""
    b = Broker(store, Limits(10, max_qos2_pending=3))
    s, _, _ = b.open_session("wrap", clean=False)
    for pid in (65534, 65535, 1):
        assert s.rx2.received(pid)
    store.commit_blocking()
    again = Broker(store, Limits(10, max_qos2_pending=3))
    again.recover()
    r = again.sessions["wrap"]
    assert list(r.rx2) == [65534, 65535, 1]
    assert r.rx2.received(2)  # forgets 65534, the oldest
    assert list(r.rx2) == [65535, 1, 2]
    assert not r.rx2.received(1)  # still held: a re-send is not routed again
    store.commit_blocking()
    assert rx2_on_disk(store) == [1, 2, 65535]


def test_a_set_over_the_bound_from_an_older_version_is_cut_at_recovery(store: Store) -> None:
    b = Broker(store, Limits(10))
    s, _, _ = b.open_session("old", clean=False)
    store.commit_blocking()
    for pid in range(1, 6):  # as an older oxiedge wrote them: no arrival number
        store.stage_put(persist.CF, persist.rx2_key(s.owner_b, pid), b"")
    store.commit_blocking()
    again = Broker(store, Limits(10, max_qos2_pending=3))
    again.recover()
    assert list(again.sessions["old"].rx2) == [3, 4, 5]  # order unknown: lowest ids go
    assert again.stats.qos2_ids_forgotten == 2
    store.commit_blocking()
    assert rx2_on_disk(store) == [3, 4, 5]


def test_a_flood_of_unreleased_qos2_stays_bounded_across_a_crash(start_mqtt: Start) -> None:
    srv = start_mqtt()
    assert srv.mqtt_port is not None
    raw = RawSession(srv.mqtt_port)
    raw.connect("hoarder", clean=False)
    n = MAX_QOS2_PENDING + 76
    for pid in range(1, n + 1):  # PUBREC for each, PUBREL for none
        raw.send(encode(Publish("hoard/t", b"x", 2, False, False, pid)))
        assert raw.next() == Pubrec(pid)
    status = json.loads(srv.cli("status", "--json").stdout)["mqtt"]
    assert status["qos2_ids_forgotten"] == 76
    srv.kill()
    srv.start()
    held = cli_rows(srv, "find", "_mqtt", json.dumps({"_kind": "rx2"}), "--limit", "100000")
    assert len(held) == MAX_QOS2_PENDING
    assert min(r["packet_id"] for r in held) == 77  # the newest are kept
    raw = RawSession(srv.mqtt_port)
    assert raw.connect("hoarder", clean=False, expect=None) == b"\x20\x02\x01\x00"
    raw.send(encode(Pubrel(n)))  # the newest id is still held: released, not re-routed
    assert raw.next() == Pubcomp(n)
    raw.disconnect()
