"""Listings show what a session still has queued: a queue log removes an acknowledged run
below its floor with one range delete once the run is 1,024 seqs long (``store/qlog.py``),
and until then those records are still on disk. ``oxiedge find _mqtt`` and the session
listings start at the floor the queue's counters name, live and offline."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.conftest import ServerProcess

from .conftest import cli_rows
from .rawclient import RawSession, offline_subscriber

Start = Callable[..., ServerProcess]


def msgs(srv: ServerProcess) -> list[dict[str, Any]]:
    return cli_rows(srv, "find", "_mqtt", json.dumps({"_kind": "msg", "client": "lag"}))


def test_acknowledged_records_below_the_floor_are_not_listed(start_mqtt: Start) -> None:
    srv = start_mqtt()
    assert srv.mqtt_port is not None
    offline_subscriber(srv.mqtt_port, "lag", "lag/#")
    pub = RawSession(srv.mqtt_port)
    pub.connect("lag-pub")
    for i in range(300):
        pub.publish("lag/x", str(i).encode(), 1, pid=i % 60000 + 1)
    sub = RawSession(srv.mqtt_port)
    sub.connect("lag", clean=False, expect=None)
    assert [sub.receive().payload for _ in range(200)] == [str(i).encode() for i in range(200)]
    sub.disconnect()  # read after every PUBACK; the other 100 stay queued (redelivered)
    pub.publish("other", b"sync", 1, pid=1)  # its PUBACK: the acks' round is on disk
    listed = msgs(srv)
    assert [d["payload"] for d in listed] == [str(i) for i in range(200, 300)]
    session = cli_rows(srv, "find", "_mqtt", json.dumps({"_kind": "session", "client": "lag"}))
    assert session[0]["queued"] == 100
    srv.kill()  # offline: the same from the data dir
    assert [d["payload"] for d in msgs(srv)] == [str(i) for i in range(200, 300)]
    srv.start()
    sub = RawSession(srv.mqtt_port)
    sub.connect("lag", clean=False, expect=None)
    got = [sub.receive().payload for _ in range(100)]
    assert got == [str(i).encode() for i in range(200, 300)]
