"""MQTT.js (Debian's ``node-mqtt``, with ``node-ws``) over ws:// and wss:// against a real
server; skipped when node or the modules are absent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ServerProcess
from tests.tls.conftest import Pki

NODE_PATH = "/usr/share/nodejs"
SCRIPT = Path(__file__).with_name("mqttjs_ws.js")

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not Path(NODE_PATH, "mqtt").is_dir()
    or not Path(NODE_PATH, "ws").is_dir(),
    reason="node + MQTT.js + ws not installed (apt-get install node-mqtt node-ws)",
)


@pytest.mark.parametrize("scheme", ["ws", "wss"])
def test_mqttjs_over_websocket(ws_server: ServerProcess, ws_pki: Pki, scheme: str) -> None:
    port = ws_server.http_port if scheme == "ws" else ws_server.http_tls_port
    args = ["node", str(SCRIPT), f"{scheme}://localhost:{port}/mqtt"]
    if scheme == "wss":
        args.append(str(ws_pki.ca_file))
    res = subprocess.run(args, capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, NODE_PATH=NODE_PATH))
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["granted"] == [2]
    assert sorted((m["payload"], m["qos"]) for m in out["live"]) == [("q0", 0), ("q1", 1),
                                                                    ("q2", 2)]
    assert out["retained"] == [{"topic": "jsws/ret", "payload": "kept", "qos": 1,
                                "retain": True}]
