"""Names and documents come from clients: a hostile topic, client id, queue name or document
field is shown as text on every page, never as markup."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import paho.mqtt.client as mqtt

from tests.conftest import ServerProcess

HOSTILE = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(2)>'


def test_hostile_names_render_inert(http_server: ServerProcess, client_for: Any) -> None:
    srv = http_server
    srv.cli("ingest", "add", "s/#:hostile")  # a route: its documents keep the topic
    srv.cli("queue", "declare", HOSTILE + IMG)
    assert srv.mqtt_port
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=HOSTILE + IMG,
                         clean_session=False)
    client.connect("127.0.0.1", srv.mqtt_port)
    client.loop_start()
    doc = {HOSTILE: 1.5, "note": IMG, "v": 3}
    client.publish(f"s/{HOSTILE}/{IMG}", json.dumps(doc), qos=1, retain=True
                   ).wait_for_publish(10)
    client.loop_stop()
    client.disconnect()
    c = client_for(srv)
    queue = "/queues/" + quote(HOSTILE + IMG, safe="")
    shown = {"/mqtt/sessions": 1, "/mqtt/retained": 1, "/queues": 1, queue: 1,
             "/collections": 0, "/collections/hostile": 1,
             "/collections/hostile?field=" + quote(HOSTILE): 1, "/": 0, "/exchanges": 1}
    for path, expect in shown.items():
        r = c.get(path)
        assert r.status == 200, path
        body = r.body.decode()
        assert "<script>alert" not in body, path
        assert "<img src=x" not in body, path
        if expect:  # shown, as text
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body, path
    # the escaped client id, topic and document field are all there
    assert "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in c.get("/mqtt/retained").body.decode()
