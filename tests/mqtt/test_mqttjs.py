"""Interop with MQTT.js (Debian's ``node-mqtt``; skipped when node or the module is absent)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ServerProcess

NODE_PATH = "/usr/share/nodejs"
SCRIPT = Path(__file__).with_name("mqttjs_client.js")

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not Path(NODE_PATH, "mqtt").is_dir(),
    reason="node + MQTT.js not installed (apt-get install node-mqtt)",
)


def test_mqttjs_qos_retained_persistent_session(shared_mqtt: ServerProcess) -> None:
    env = dict(os.environ, NODE_PATH=NODE_PATH)
    res = subprocess.run(["node", str(SCRIPT), str(shared_mqtt.mqtt_port)],
                         capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["firstPresent"] is False
    assert out["granted"] == [2]
    live = sorted((m["topic"], m["payload"], m["qos"], m["retain"]) for m in out["live"])
    assert live == [("js/a", "q0", 0, False), ("js/a", "q1", 1, False),
                    ("js/a", "q2", 2, False), ("js/ret", "kept", 1, False)]  # fmt: skip
    assert out["againPresent"] is True
    assert [m["payload"] for m in out["queued"]] == ["off1", "off2"]
    assert out["retained"] == [{"topic": "js/ret", "payload": "kept", "qos": 1, "retain": True}]
