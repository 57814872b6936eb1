"""MQTT 5 interop with MQTT.js (``protocolVersion: 5``; Debian's ``node-mqtt``; skipped
when node or the module is absent)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ServerProcess

NODE_PATH = "/usr/share/nodejs"
SCRIPT = Path(__file__).with_name("mqttjs5_client.js")

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not Path(NODE_PATH, "mqtt").is_dir(),
    reason="node + MQTT.js not installed (apt-get install node-mqtt)",
)


def test_mqttjs5_properties_aliases_and_a_persistent_session(shared_mqtt: ServerProcess
                                                             ) -> None:  # fmt: skip
    env = dict(os.environ, NODE_PATH=NODE_PATH)
    res = subprocess.run(["node", str(SCRIPT), str(shared_mqtt.mqtt_port)],
                         capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    connack = out["connack"]
    assert (connack["present"], connack["reasonCode"]) == (False, 0)
    assert connack["properties"]["topicAliasMaximum"] >= 1
    # Subscription Identifiers are supported: the property is left out (absent means 1).
    assert connack["properties"].get("subscriptionIdentifiersAvailable", True) is True
    assert out["granted"] == [2]
    live = sorted(out["live"], key=lambda m: (m["topic"], m["payload"]))
    assert [(m["topic"], m["payload"], m["qos"]) for m in live] == [
        ("js5/a", "q0", 0), ("js5/a", "q1", 1), ("js5/a", "q2", 2),
        ("js5/aliased", "first", 1), ("js5/aliased", "second", 1)]  # fmt: skip
    for m in live[:3]:
        assert m["contentType"] == "text/plain" and m["responseTopic"] == "js5/reply"
        assert m["correlationData"] == [0, 1, 2]
        assert m["userProperties"] == {"a": "1", "b": ["2", "3"]}
        assert 0 < m["expiry"] <= 300
    assert out["againPresent"] is True
    assert out["queued"] == ["queued"]
