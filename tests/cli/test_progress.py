"""Progress of long operations: an index build on a collection streams one event per
chunk's commit round, an import one per step, a find one per 10,000 documents scanned;
``oxiedge index add`` still prints its line without a terminal (no bar drawn) and on a
stopped data dir."""

from __future__ import annotations

import json
from typing import Any

from tests.cli.test_mqtt_verbs import _client, _until
from tests.conftest import ServerProcess

DOCS = 4500  # three chunks of the index build (store.index.BUILD_CHUNK is 2000)


def test_index_build_streams_progress(server: ServerProcess) -> None:
    from oxiedge.admin.client import call_stream

    server.cli("ingest", "add", "meters/#:readings")
    pub = _client(server, "meter")
    for i in range(DOCS):
        info = pub.publish("meters/1", json.dumps({"value": i}).encode(), qos=1)
    info.wait_for_publish(30)
    pub.disconnect()
    pub.loop_stop()
    def stored() -> int:
        out = server.cli("collections", "--json").stdout
        rows = [json.loads(line) for line in out.splitlines()]
        return next((int(r.get("count") or r.get("documents") or 0) for r in rows
                     if r.get("name") == "readings"), 0)

    _until(lambda: stored() == DOCS, 30)

    events: list[Any] = []
    result = call_stream(server.admin_socket, "index.add",
                         {"collection": "readings", "field": "value", "progress": True},
                         events.append, timeout=60)
    assert [e["done"] for e in events] == [2000, 4000, DOCS]
    assert {e["total"] for e in events} == {DOCS}
    assert result["created"] is True and result["state"] == "ready"
    found = server.cli("find", "readings", '{"value": 4400}', "--json").stdout
    assert json.loads(found)["value"] == 4400

    out = server.cli("index", "add", "readings", "value").stdout  # no terminal: no bar
    assert "index readings.value already present" in out
    server.stop()
    out = server.cli("index", "add", "readings", "other").stdout  # the data dir
    assert "index readings.other added" in out


def test_find_streams_progress_and_answers_the_same(start_server: Any, tmp_path: Any) -> None:
    """An unsorted find of a user collection scans in chunks of 10,000 documents with a
    progress event after each, and answers what the plain find answers (filter, skip,
    limit); a sorted find and a ``_`` collection answer at once."""
    from oxiedge.admin.client import call, call_stream
    from oxiedge.store import Store

    store = Store.open(tmp_path / "data" / "db")
    for i in range(25_000):
        store.stage_insert("big", {"v": i % 100, "i": i})
    store.commit_blocking()
    store.close()
    server = start_server(data=tmp_path / "data")
    args: dict[str, Any] = {"collection": "big", "filter": {"v": {"$gte": 90}}, "skip": 3,
                            "limit": None, "sort": None}
    events: list[Any] = []
    rows = call_stream(server.admin_socket, "find", {**args, "progress": True}, events.append,
                       timeout=60)
    assert [e["done"] for e in events] == [10_000, 20_000, 25_000]
    assert {e["total"] for e in events} == {25_000}
    assert rows == call(server.admin_socket, "find", args)
    assert len(rows) == 2500 - 3 and rows[0]["i"] == 93
    events.clear()
    rows = call_stream(server.admin_socket, "find", {**args, "limit": 10, "progress": True},
                       events.append, timeout=60)
    assert [r["i"] for r in rows] == [93, 94, 95, 96, 97, 98, 99, 190, 191, 192]
    assert [e["done"] for e in events] == [25_000]  # (stopped early: the end is reached)
    events.clear()
    sorted_rows = call_stream(server.admin_socket, "find",
                              {**args, "sort": "-i", "limit": 2, "progress": True},
                              events.append, timeout=60)
    assert [r["i"] for r in sorted_rows] == [24_996, 24_995] and events == []
    out = server.cli("find", "big", '{"i": 7}', "--json").stdout  # no terminal: no bar
    assert json.loads(out)["v"] == 7
