"""PUBACK means the document is stored, also for payloads the document encoder refuses.

orjson parses JSON nested up to 1024 levels but writes at most 254: such a payload used to
be PUBACKed and counted in ``ingest.failed`` with no document. It is now stored as text
(``_ingest_fallback`` says why) and counted in ``ingest.fallback``; a SIGKILL right after
the acknowledgements proves the documents are on disk.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pika

from tests.bridge.conftest import Mqtt, amqp, find, status
from tests.conftest import ServerProcess

Start = Callable[..., ServerProcess]

DEEP_LIST = b"[" * 300 + b"]" * 300
DEEP_OBJECT = b'{"a":' * 300 + b"1" + b"}" * 300


def test_refused_documents_are_stored_as_text_and_survive_sigkill(start_server: Start) -> None:
    server = start_server("--ingest", "deep/#:deep", "--ingest", "deep/+/copy:copies")
    client = Mqtt(server.mqtt_port)
    try:
        mids = [client.publish("deep/list", DEEP_LIST, 1),
                client.publish("deep/obj", DEEP_OBJECT, 2),
                client.publish("deep/ok", b'{"value": 1}', 1),
                # matches two routes: the fallback lands in both collections
                client.publish("deep/x/copy", DEEP_LIST, 1)]
        client.wait_acked(mids)
    finally:
        client.close()
    # AMQP into amq.topic reaches the ingest route through the bridge: the confirm too.
    conn = amqp(server.amqp_port)
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("amq.topic", "deep.amqp", DEEP_OBJECT,
                         pika.BasicProperties(delivery_mode=2))
    finally:
        conn.close()
    ingest = status(server)["ingest"]
    assert ingest["fallback"] == 5 and ingest["failed"] == 0
    assert ingest["ingested"] == 6
    server.kill()  # right after the acknowledgements: what they promised is on disk
    server.start()
    docs = {d["_topic"]: d for d in find(server, "deep")}
    assert set(docs) == {"deep/list", "deep/obj", "deep/ok", "deep/x/copy", "deep/amqp"}
    assert docs["deep/list"]["payload"] == DEEP_LIST.decode()
    assert docs["deep/obj"]["payload"] == DEEP_OBJECT.decode()
    assert docs["deep/amqp"]["payload"] == DEEP_OBJECT.decode()
    assert "Recursion limit" in docs["deep/list"]["_ingest_fallback"]
    assert docs["deep/ok"]["value"] == 1 and "_ingest_fallback" not in docs["deep/ok"]
    copies = find(server, "copies")
    assert [d["payload"] for d in copies] == [DEEP_LIST.decode()]
    # The operator finds them with an ordinary query.
    res = server.cli("find", "deep", '{"_ingest_fallback": {"$exists": true}}', "--json")
    assert len(res.stdout.splitlines()) == 4
    assert json.loads(server.cli("status", "--json").stdout)["ingest"]["fallback"] == 0
    table = server.cli("status", "--all").stdout
    assert "ingest.fallback" in table
