"""Progress of long operations: an index build on a collection streams one event per
chunk's commit round, an import one per step; ``oxiedge index add`` still prints its line
without a terminal (no bar drawn) and on a stopped data dir."""

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
