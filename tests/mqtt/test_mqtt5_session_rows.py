"""``oxiedge sessions`` (the admin rows, also /api/mqtt/sessions) shows an MQTT 5 session's
``expires_in`` from its own Session Expiry Interval and wall-clock deadline."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.conftest import ServerProcess, run_cli
from tests.mqtt.paho5 import Client5, props

Start = Callable[..., ServerProcess]


def _rows(server: ServerProcess) -> dict[str, dict[str, Any]]:
    out = server.cli("sessions", "--json").stdout
    rows = json.loads(out) if out.lstrip().startswith("[") else \
        [json.loads(line) for line in out.splitlines() if line.strip()]
    return {r["client"]: r for r in rows}


def test_v5_session_expires_in(start_mqtt: Start) -> None:
    server = start_mqtt("--mqtt-session-expiry", "1d")
    kept = Client5(server.mqtt_port, "rows-kept")
    kept.connect(properties=props(1, SessionExpiryInterval=600))
    live = Client5(server.mqtt_port, "rows-live")
    live.connect(properties=props(1, SessionExpiryInterval=600))
    kept.disconnect()
    rows = _rows(server)
    assert 590 <= rows["rows-kept"]["expires_in"] <= 600  # its own interval, not 1 day
    assert rows["rows-live"]["expires_in"] is None  # connected
    assert not rows["rows-kept"]["connected"] and rows["rows-live"]["connected"]
    live.close()


def test_v5_session_expires_in_with_no_server(start_mqtt: Start) -> None:
    server = start_mqtt()
    kept = Client5(server.mqtt_port, "rows-off")
    kept.connect(properties=props(1, SessionExpiryInterval=600))
    kept.disconnect()
    server.stop()
    out = run_cli(server.data, "sessions", "--json")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    rows = json.loads(text) if text.lstrip().startswith("[") else \
        [json.loads(line) for line in text.splitlines() if line.strip()]
    row = {r["client"]: r for r in rows}["rows-off"]
    assert 590 <= row["expires_in"] <= 600 and not row["connected"]
